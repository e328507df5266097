"""Recovery and placement, alone: what deciding PREEMPTED writes (blocks per strategy, work
lost, drain), the placement tiers the next attempt gets from those blocks, the launch
request's environment and gates, and in-place node replacement with its crash-safe intent.
Real store, FakeOps."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from launcher.jobs import paths
from launcher.jobs.controller.context import Context, RecoverySteps
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.placement import LaunchRequests
from launcher.jobs.controller.preemption import Recovery
from launcher.jobs.ops_interface import Placed
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptRow, JobRow
from launcher.optimizer.ranking import Blocked
from tests.jobs.fake_ops import FakeOps
from tests.jobs.parts import PLACES, context, run, running_job


def _parts(ctx: Context) -> tuple[Recovery, LaunchRequests]:
    loss = LossDetector(ctx)
    logs = AttemptLogs(ctx, loss)
    steps = RecoverySteps()
    requests = LaunchRequests(ctx, Finisher(ctx, logs, loss), logs, steps)
    return Recovery(ctx, Decisions(ctx.store), requests, logs, steps), requests


def _next(ctx: Context, job: JobRow) -> AttemptRow:
    n = len(ctx.store.attempts(job.id)) + 1
    return ctx.store.add_attempt(job.id, n, f"mj-{job.id}-{n}", "preemption")


def test_eager_blocks_the_zone_and_its_region_and_tries_other_regions_first() -> None:
    with context() as ctx:
        job, att = running_job(ctx)  # aws us-east-1a
        recovery, requests = _parts(ctx)
        at = time.time()
        recovery.decide_preempted(job, att, "lost", at, draining=False)
        blocks = {(b.cloud, b.region, b.zone) for b in ctx.store.blocks(job.id)}
        a = ctx.store.attempt(job.id, 1)
        tiers = requests.tiers(job, _next(ctx, job), ctx.store.attempts(job.id), time.time())
    assert blocks == {("aws", "us-east-1", "us-east-1a"), ("aws", "us-east-1", None)}
    assert a.outcome == Outcome.PREEMPTED and a.preempted_at == at and a.drain_until is None
    assert not a.outcome_applied  # the finisher applies it
    assert [t.label for t in tiers][:2] == ["other regions", "other zones"]
    assert ("aws", "us-east-1") in tiers[0].blocked.regions
    assert tiers[1].blocked == Blocked(zones=frozenset({("aws", "us-east-1", "us-east-1a")}))
    assert tiers[-1].blocked == Blocked()  # the preempted zone comes back last
    assert all(t.only_region is None for t in tiers)


def test_failover_blocks_only_the_zone_and_stays_in_its_region_first() -> None:
    with context() as ctx:
        job, att = running_job(ctx, strategy="FAILOVER")
        recovery, requests = _parts(ctx)
        recovery.decide_preempted(job, att, "lost", time.time(), draining=False)
        blocks = {(b.cloud, b.region, b.zone) for b in ctx.store.blocks(job.id)}
        tiers = requests.tiers(job, _next(ctx, job), ctx.store.attempts(job.id), time.time())
    assert blocks == {("aws", "us-east-1", "us-east-1a")}
    assert tiers[0].only_region == ("aws", "us-east-1")
    assert tiers[0].blocked.zones == {("aws", "us-east-1", "us-east-1a")}


def test_deadline_jobs_are_placed_like_eager_next_region() -> None:
    with context() as ctx:
        job, att = running_job(ctx, strategy="DEADLINE")
        recovery, requests = _parts(ctx)
        recovery.decide_preempted(job, att, "lost", time.time(), draining=False)
        blocks = {(b.cloud, b.region, b.zone) for b in ctx.store.blocks(job.id)}
        tiers = requests.tiers(job, _next(ctx, job), ctx.store.attempts(job.id), time.time())
    assert ("aws", "us-east-1", None) in blocks
    assert tiers[0].label == "other regions"


def test_a_noticed_preemption_drains_for_its_grace_capped() -> None:
    with context(max_drain_s=20.0) as ctx:
        job, att = running_job(ctx)
        recovery, _ = _parts(ctx)
        at = time.time()
        recovery.decide_preempted(job, att, "notice", at, draining=True, grace_s=7.0)
        short = ctx.store.attempt(job.id, 1).drain_until
        job2, att2 = running_job(ctx)
        recovery.decide_preempted(job2, att2, "notice", at, draining=True, grace_s=120.0)
        capped = ctx.store.attempt(job2.id, 1).drain_until
    assert short == pytest.approx(at + 12.0) and capped == pytest.approx(at + 20.0)


def test_the_launch_request_numbers_gang_runs_and_records_where_it_was_provisioned() -> None:
    with context() as ctx:
        job, att = running_job(ctx)
        ctx.store.update_attempt(job.id, 1, gang_runs=2, outcome=Outcome.PREEMPTED,
                                 outcome_applied=1, torn_down_at=time.time())
        _, requests = _parts(ctx)
        nxt = _next(ctx, job)

        async def go() -> tuple[dict[str, str], str | None, bool]:
            req = requests.build(job, nxt, ctx.store.attempts(job.id), market="spot")
            p = Placed("gcp", "us-central1", "us-central1-a", "g.1", 1, True, 2.5)
            threading.Thread(target=req.on_provisioned, args=(p,)).start()  # type: ignore[misc]
            for _ in range(100):
                await asyncio.sleep(0.01)
                if ctx.store.attempt(job.id, 2).cloud is not None:
                    break
            assert req.before_run is not None
            return dict(req.env_extra), req.market, req.before_run()

        env, market, may_run = run(go())
        a2 = ctx.store.attempt(job.id, 2)
    assert env == {"LAUNCHER_MANAGED_JOB_ID": str(job.id), "LAUNCHER_ATTEMPT": "3"}
    assert market == "spot" and may_run
    assert (a2.cloud, a2.zone, a2.node_price) == ("gcp", "us-central1-a", 2.5)


def test_a_cancelled_job_is_never_submitted() -> None:
    with context() as ctx:
        job, _ = running_job(ctx)
        _, requests = _parts(ctx)

        async def go() -> bool:
            req = requests.build(job, _next(ctx, job), ctx.store.attempts(job.id))
            ctx.cancels.request(job.id)
            assert req.before_run is not None
            return req.before_run()

        assert run(go()) is False


def test_a_partial_loss_replaces_only_the_lost_nodes_in_place() -> None:
    ops = FakeOps(PLACES, replace_supported=True)
    with context(ops, num_nodes=3) as ctx:
        job, att = running_job(ctx, nodes=3)
        recovery, _ = _parts(ctx)
        lost = (att.node_ids[1],)
        ops.preempt(att.cluster_name, node_index=1)
        run(recovery.on_preemption(job, att, lost, "cloud reports it", time.time(),
                                   draining=False))
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
        gang_log = paths.gang_run_log_path(job.id, 1, 1).read_text()
    assert j.status == S.RUNNING and j.recoveries == 1
    assert a.outcome is None and a.gang_runs == 2 and a.cluster_job_id == 2
    assert not a.replacing and a.replace_lost == ()  # the intent is cleared with the new gang
    assert ops.replacements == 1 and ops.gang_attempt_env == ["2"]
    assert "gang run 1 ended: node(s) " + lost[0] + " lost" in gang_log


def test_a_cloud_that_cannot_replace_falls_back_to_a_full_relaunch() -> None:
    ops = FakeOps(PLACES, replace_supported=False)
    with context(ops, num_nodes=2) as ctx:
        job, att = running_job(ctx, nodes=2)
        recovery, _ = _parts(ctx)
        run(recovery.on_preemption(job, att, (att.node_ids[1],), "cloud reports it",
                                   time.time(), draining=False))
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
    # The cloud says up front that it cannot replace nodes: no in-place attempt (no
    # "replacing only those nodes" transition), the attempt is decided PREEMPTED and the
    # loop applies it (RECOVERING, the recovery counted) on its next pass.
    assert j.status == S.RUNNING and j.recoveries == 0
    assert a.outcome == Outcome.PREEMPTED and a.outcome_reason == "cloud reports it"
    assert not a.replacing and ops.replacements == 0


def test_an_intent_left_by_a_crash_is_recovered_by_a_full_relaunch() -> None:
    with context(num_nodes=2) as ctx:
        job, att = running_job(ctx, nodes=2)
        at = time.time() - 5.0
        ctx.store.transition(job.id, S.RECOVERING, "replacing", attempt=1, recoveries=1,
                             attempt_fields={"replace_lost": (att.node_ids[1],),
                                             "replace_at": at, "replace_reason": "n1 lost",
                                             "preempted_at": at})
        recovery, _ = _parts(ctx)
        a = ctx.store.attempt(job.id, 1)
        assert a.replacing
        recovery.abandon_replace(ctx.store.job(job.id), a)
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
    assert j.recoveries == 0 and not a.replacing
    assert a.outcome == Outcome.PREEMPTED and a.preempted_at == at
    assert a.outcome_reason == ("n1 lost (in-place replacement interrupted by a controller "
                                "restart: relaunching)")
