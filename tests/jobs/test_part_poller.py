"""The batched cloud poll (poller.py): one `cloud_views` query per cloud and region per
tick whatever the number of jobs, and preemption detection that does not slow down as
jobs are added (a loss wakes the job's watch at the next tick)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from launcher.clouds.base import NodeState
from launcher.jobs.controller.poller import CloudPoller
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore
from tests.jobs.fake_ops import Behaviour, FakeOps
from tests.jobs.harness import Running, fast_config, submit, wait_for
from tests.jobs.parts import PLACES, run, start_cluster


def test_one_query_per_cloud_and_region_per_tick_for_any_number_of_clusters() -> None:
    ops = FakeOps(PLACES)
    # 60 clusters over 3 (cloud, region) groups: aws/us-east-1, aws/us-west-2, gcp/us-central1
    groups = {PLACES[0], PLACES[2], PLACES[3]}
    names = []
    for i in range(60):
        place = [PLACES[0], PLACES[2], PLACES[3]][i % 3]
        names.append((start_cluster(ops, f"c{i}", place=place, nodes=2).name, place))

    async def go() -> CloudPoller:
        poller = CloudPoller(ops, fast_config(), _inline)
        for name, place in names:
            poller.watch(name, place.cloud, place.region, (f"{name}-0", f"{name}-1"))
        for _ in range(3):
            await poller.tick()
        await poller.stop()
        return poller

    poller = run(go())
    assert poller.ticks >= 3  # ours, and maybe the ticker's own
    assert poller.queries == poller.ticks * len(groups)  # O(clouds x regions), not O(jobs)
    assert len(ops.batch_calls) == poller.queries
    assert sorted(set(ops.batch_calls)) == sorted(
        (p.cloud, p.region, 20) for p in groups)  # each group's 20 clusters in its one call
    assert ops.view_calls == 0  # never one query per cluster


def test_a_tick_wakes_only_the_watches_whose_nodes_were_lost_or_noticed() -> None:
    ops = FakeOps(PLACES)
    for i in range(3):
        start_cluster(ops, f"c{i}")

    async def go() -> list[bool]:
        poller = CloudPoller(ops, fast_config(), _inline)
        ws = [poller.watch(f"c{i}", "aws", "us-east-1", (f"c{i}-0",)) for i in range(3)]
        ops.preempt("c1")
        ops.preempt("c2", notice_s=30.0)
        await poller.tick()
        await poller.stop()
        assert ws[1].view == {"c1-0": NodeState.PREEMPTED} and ws[2].notices
        return [w.changed.is_set() for w in ws]

    assert run(go()) == [False, True, True]


def test_a_failed_batch_query_is_no_loss_and_fresh_raises_for_it() -> None:
    ops = FakeOps(PLACES)
    start_cluster(ops, "c0")

    async def go() -> str:
        poller = CloudPoller(ops, fast_config(cloud_poll_s=0.01), _inline)
        w = poller.watch("c0", "aws", "us-east-1", ("c0-0",))
        ops.query_failures = 1
        try:
            await poller.fresh(w)
        except Exception as exc:
            err = str(exc)
        else:
            err = ""
        assert not w.changed.is_set()
        view = await poller.fresh(w)  # the next tick answers
        await poller.stop()
        assert view == {"c0-0": NodeState.RUNNING}
        return err

    assert "injected" in run(go())


def _detection_s(n: int) -> float:
    """Seconds from preempting one of `n` running jobs to the controller acting on it, while
    each job's own look (its agent check) comes every 8 s or more (a large controller's
    shared budget); a per-job poll of the cloud would see the loss only then."""
    ops = FakeOps(PLACES, behaviours=lambda _n: Behaviour(duration_s=600.0))
    r = Running(ops, poll_min_s=8.0, poll_max_s=60.0, max_polls_per_s=2.0, cloud_poll_s=0.1,
                watch_workers=4, launch_workers=8, max_parallel_launches=8)
    store = JobStore()
    try:
        ids = [submit(store, name=f"j{i}").id for i in range(n)]
        wait_for(lambda: all(store.job(i).status == S.RUNNING for i in ids), 60.0,
                 "all running")
        time.sleep(1.0)  # every watch is in its long wait between agent checks
        victim = ids[-1]
        ops.preempt(store.attempts(victim)[-1].cluster_name)
        t0 = time.monotonic()
        wait_for(lambda: store.job(victim).status == S.RECOVERING
                 or len(store.attempts(victim)) > 1, 15.0, "preemption noticed")
        took = time.monotonic() - t0
        for i in ids:
            store.request_cancel(i)
        return took
    finally:
        r.stop(timeout=60.0)
        store.close()


def test_preemption_is_detected_as_fast_with_many_jobs_as_with_one() -> None:
    """1 or 150 running jobs: a preempted one is noticed within a few 0.1 s cloud-poll
    ticks (with room for a loaded machine), not at its next own look ~7 s later."""
    one, many = _detection_s(1), _detection_s(150)
    assert one < 3.0 and many < 3.0, (one, many)


def test_the_controller_polls_in_batches_not_per_job() -> None:
    ops = FakeOps(PLACES, behaviours=lambda _n: Behaviour(duration_s=600.0))
    r = Running(ops, cloud_poll_s=0.05)
    store = JobStore()
    try:
        ids = [submit(store, name=f"j{i}").id for i in range(40)]
        wait_for(lambda: all(store.job(i).status == S.RUNNING for i in ids), 30.0, "running")
        before_views, before_batches = ops.view_calls, len(ops.batch_calls)
        ticks0 = r.ctrl.ctx.poller.ticks
        time.sleep(1.0)
        ticks = r.ctrl.ctx.poller.ticks - ticks0
        batches = len(ops.batch_calls) - before_batches
        assert ticks >= 5
        assert batches <= ticks + 1  # every job is on one cloud and region: 1 per tick
        assert ops.view_calls == before_views  # no per-job cloud query meanwhile
        for i in ids:
            store.request_cancel(i)
        wait_for(lambda: all(store.job(i).status.is_terminal for i in ids), 30.0, "ended")
    finally:
        r.stop(timeout=30.0)
        store.close()


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    """A `call` that runs the blocking function inline (the fake answers at once)."""
    await asyncio.sleep(0)
    return fn(*args)

