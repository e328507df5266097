"""Launch slots and per-cloud back-off (launch_gate.py): no more than
`max_parallel_launches` provision at once, and a cloud that throttles launches is backed
off (doubling) without the throttled launches counting as launch errors."""

from __future__ import annotations

import asyncio

import pytest

from launcher.jobs.controller.launch_gate import LaunchGate
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore
from tests.jobs.fake_ops import Behaviour, FakeOps
from tests.jobs.harness import Running, fast_config, submit, wait_for
from tests.jobs.parts import PLACES, run


def test_launches_run_in_parallel_up_to_the_limit() -> None:
    ops = FakeOps(PLACES, behaviours=lambda _n: Behaviour(duration_s=0.2))
    ops.provision_delay_s = 0.3
    r = Running(ops, launch_workers=8, max_parallel_launches=3)
    store = JobStore()
    try:
        ids = [submit(store, name=f"j{i}").id for i in range(9)]
        wait_for(lambda: all(store.job(i).status == S.SUCCEEDED for i in ids), 30.0, "done")
    finally:
        r.stop()
        store.close()
    assert ops.peak_provisioning == 3  # in parallel, but never past the limit
    assert r.ctrl.ctx.launches.peak == 3


def test_a_throttled_cloud_is_backed_off_and_its_launches_are_retried_not_failed() -> None:
    ops = FakeOps(PLACES, behaviours=lambda _n: Behaviour(duration_s=0.1))
    ops.throttled_launches = 4  # more than max_launch_errors (3): still no failure
    r = Running(ops, rate_limit_backoff_s=0.2, rate_limit_backoff_max_s=0.4,
                backoff_min_s=0.01, backoff_max_s=0.01, max_launch_errors=3)
    store = JobStore()
    try:
        job = submit(store)
        wait_for(lambda: store.job(job.id).status.is_terminal, 30.0, "job ended")
        atts = store.attempts(job.id)
    finally:
        r.stop()
        store.close()
    assert store_status(job.id) == S.SUCCEEDED
    assert [a.outcome for a in atts][:4] == ["LAUNCH_ERROR"] * 4
    assert all("rate limited by aws" in (a.outcome_reason or "") for a in atts[:4])
    gaps = [b - a for a, b in zip(ops.provision_times, ops.provision_times[1:], strict=False)]
    # backed off 0.2, 0.4, 0.4 (capped), 0.4 s between the tries
    assert all(g >= 0.18 for g in gaps), gaps
    assert sum(gaps) >= 1.3, gaps


def store_status(job_id: int) -> S:
    store = JobStore()
    try:
        return store.job(job_id).status
    finally:
        store.close()


def test_the_back_off_doubles_per_cloud_honours_the_hint_and_resets_after_a_success() -> None:
    now = [100.0]
    gate = LaunchGate(fast_config(rate_limit_backoff_s=1.0, rate_limit_backoff_max_s=5.0),
                      clock=lambda: now[0])
    assert [gate.throttled("aws") for _ in range(4)] == [1.0, 2.0, 4.0, 5.0]
    assert gate.wait_s(["aws"]) == 5.0 and gate.wait_s(["gcp", None]) == 0.0
    assert gate.throttled("gcp", retry_after_s=30.0) == 30.0  # the cloud's hint is longer
    now[0] += 6.0
    assert gate.wait_s(["aws"]) == 0.0 and gate.wait_s(["aws", "gcp"]) == 24.0
    gate.succeeded("aws")
    assert gate.throttled("aws") == 1.0  # starts over


def test_slots_are_shared_by_every_launch() -> None:
    gate = LaunchGate(fast_config(max_parallel_launches=2))

    async def go() -> int:
        async def one() -> None:
            async with gate.slot():
                await asyncio.sleep(0.02)

        await asyncio.gather(*(one() for _ in range(7)))
        return gate.peak

    assert run(go()) == 2 and gate.in_flight == 0


def test_a_relaunch_takes_the_next_free_slot_before_waiting_first_launches() -> None:
    gate = LaunchGate(fast_config(max_parallel_launches=1))
    order: list[str] = []

    async def go() -> None:
        release = asyncio.Event()

        async def holder() -> None:
            async with gate.slot():
                await release.wait()

        async def one(name: str, urgent: bool) -> None:
            async with gate.slot(urgent=urgent):
                order.append(name)

        h = asyncio.ensure_future(holder())
        await asyncio.sleep(0)
        waiters = [asyncio.ensure_future(one(f"new{i}", False)) for i in range(3)]
        await asyncio.sleep(0)
        cancelled = asyncio.ensure_future(one("gone", True))
        await asyncio.sleep(0)
        cancelled.cancel()  # a cancelled waiter gives up its turn, nothing leaks
        waiters.append(asyncio.ensure_future(one("relaunch", True)))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(h, *waiters)

    run(go())
    assert order == ["relaunch", "new0", "new1", "new2"]
    assert gate.in_flight == 0 and gate._free == 1


def test_a_failover_refused_only_for_too_many_requests_is_a_rate_limited_launch() -> None:
    from launcher.clouds.base import FailoverAttempt, ProvisionFailedError
    from launcher.jobs.cluster_ops import _raise_if_throttled
    from launcher.jobs.ops_interface import RateLimitedOpsError

    def attempt(error: str) -> FailoverAttempt:
        return FailoverAttempt("aws", "us-east-1", "use1-az1", "g5.xlarge", error, "...")

    throttled = ProvisionFailedError("no placement", [attempt("RateLimitedError")] * 2)
    with pytest.raises(RateLimitedOpsError) as exc:
        _raise_if_throttled(throttled)
    assert exc.value.cloud == "aws"
    # one placement refused for capacity: a real capacity miss, not a rate limit
    _raise_if_throttled(ProvisionFailedError(
        "no placement", [attempt("RateLimitedError"), attempt("CapacityError")]))
