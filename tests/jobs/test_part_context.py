"""The controller's shared plumbing, alone: cancel signals, the recovery's step times, the
shared poll budget, crash points and background tasks."""

from __future__ import annotations

import asyncio
import time

import pytest

from launcher.jobs.controller.context import Cancelled, CancelSignals, RecoverySteps
from launcher.jobs.crash import SimulatedCrash
from tests.jobs.parts import context, run


def test_a_cancel_wakes_a_sleeping_job_at_once_and_stops_its_workers() -> None:
    signals = CancelSignals()

    async def go() -> float:
        await signals.sleep(1, 0.01)  # no cancel: just sleeps
        t0 = time.monotonic()
        asyncio.get_running_loop().call_later(0.05, signals.request, 1)
        with pytest.raises(Cancelled):
            await signals.sleep(1, 30.0)
        return time.monotonic() - t0

    assert run(go()) < 5.0
    assert signals.flag(1).is_set() and signals.requested(1)
    assert not signals.requested(2)
    signals.forget(1)
    assert not signals.requested(1) and not signals.flag(1).is_set()


def test_the_recovery_breakdown_names_each_step_since_the_loss() -> None:
    steps = RecoverySteps()
    steps.mark(7, "detected", at=100.5)
    steps.detected_once(7)  # already stamped: kept
    steps.mark(7, "decided", at=100.75)
    steps.mark(7, "provisioned", at=110.0)
    assert steps.breakdown(7, 100.0, 112.0) == (
        "detect 0.5 s, decide 0.2 s, provision 9.2 s, to running 2.0 s")
    assert steps.breakdown(7, 100.0, 101.0) == "to running 1.0 s"  # forgotten once told
    steps.mark(8, "decided", at=5.0)
    steps.mark(8, "detected", at=6.0)  # a new loss starts a new recovery
    assert steps.breakdown(8, 6.0, 6.0) == "detect 0.0 s, to running 0.0 s"


def test_the_poll_budget_is_shared_by_every_driven_job() -> None:
    # One head-agent check per job per interval (the cloud's view is polled in batches)
    with context(poll_max_s=2.0, max_polls_per_s=100.0, unreachable_poll_max_s=15.0) as ctx:
        ctx.jobs_driven = 10
        assert ctx.poll_cap() == 2.0 and ctx.unreachable_cap() == 15.0
        ctx.jobs_driven = 500
        assert ctx.poll_cap() == 5.0
        ctx.jobs_driven = 2000
        assert ctx.unreachable_cap() == 20.0


def test_a_crash_point_in_background_work_marks_the_controller_crashed() -> None:
    with context(crash_at="drain_ended") as ctx:

        async def go() -> None:
            async def work() -> None:
                ctx.hit("teardown_done")  # not the configured point
                ctx.hit("drain_ended")

            t = ctx.spawn(work())
            await asyncio.gather(t, return_exceptions=True)
            await asyncio.sleep(0)

        run(go())
        assert isinstance(ctx.crashed, SimulatedCrash) and not ctx.background
