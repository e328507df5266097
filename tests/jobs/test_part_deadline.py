"""The DEADLINE driver, alone, on a hand-driven clock: the market of the next attempt (a
spot probe, on-demand when the slack is short, waiting for the next tick), a decision
logged but not acted on is acted on as logged, a refusal is decided on at once, and a
running gang's tick (nothing to do, or moving it off spot). Real store, FakeOps."""

from __future__ import annotations

import asyncio

import pytest

from launcher.jobs import deadline_store as dl
from launcher.jobs.controller.context import Context, RecoverySteps
from launcher.jobs.controller.deadline import DeadlineDriver
from launcher.jobs.controller.deadline_events import IDLE, ON_DEMAND, SPOT, DeadlineEvents
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.placement import LaunchRequests
from launcher.jobs.controller.running import RunningRecorder
from launcher.jobs.deadline_store import DeadlineSpec
from launcher.jobs.store import JobRow, JobStore
from tests.jobs.deadline_clock import ManualClock
from tests.jobs.parts import add_job, context, run, running_job

TICK = 60.0
WORK = 10 * TICK
OVERHEAD = 15.0


def _driver(ctx: Context, clock: ManualClock) -> DeadlineDriver:
    loss = LossDetector(ctx)
    logs = AttemptLogs(ctx, loss)
    steps = RecoverySteps()
    events = DeadlineEvents(ctx.store, clock)
    finisher = Finisher(ctx, logs, loss)
    return DeadlineDriver(ctx, clock, events, Decisions(ctx.store, events.on_decided), finisher,
                          LaunchRequests(ctx, finisher, logs, steps),
                          RunningRecorder(ctx, steps, events), loss)


def _job(store: JobStore, slack_ticks: float) -> JobRow:
    job = add_job(store, strategy="DEADLINE")
    spec = DeadlineSpec(job.submitted_at + WORK + slack_ticks * TICK, WORK, OVERHEAD)
    with store._tx() as c:  # the row as jobs_launch writes it
        c.execute("UPDATE managed_jobs SET deadline_at = ?, work_s = ?, restart_overhead_s = ? "
                  "WHERE id = ?", (spec.deadline_at, spec.work_s, spec.restart_overhead_s,
                                   job.id))
    return store.job(job.id)


def _decisions(store: JobStore, job_id: int) -> list[dl.DeadlineLogRow]:
    return [r for r in dl.log_rows(store, job_id) if r.kind == "decision"]


def test_with_slack_and_no_evidence_spot_is_probed_and_the_decision_logged() -> None:
    with context(deadline_tick_s=TICK) as ctx:
        job = _job(ctx.store, slack_ticks=20)
        clock = ManualClock(job.submitted_at)
        d = _driver(ctx, clock)
        market = run(d.market(job, []))
        (r,) = _decisions(ctx.store, job.id)
        # a crash after logging, before launching: the next call launches as logged
        again = run(d.market(job, []))
        rows = _decisions(ctx.store, job.id)
    assert market == SPOT and again == SPOT and len(rows) == 1
    assert (r.tick, r.mode, r.current, r.spot_available, r.attempt) == (0, SPOT, IDLE, True, 1)
    assert r.reason == "tick; spot wanted if available: trying it"
    assert r.slack_s == 20 * TICK and r.restart_overhead_s == OVERHEAD


def test_short_slack_goes_on_demand() -> None:
    with context(deadline_tick_s=TICK) as ctx:
        job = _job(ctx.store, slack_ticks=1.1)  # below overhead + one tick
        d = _driver(ctx, ManualClock(job.submitted_at))
        market = run(d.market(job, []))
        (r,) = _decisions(ctx.store, job.id)
    assert market == ON_DEMAND and r.mode == ON_DEMAND


def test_a_refused_spot_launch_is_decided_on_at_once_then_the_next_tick_is_waited_for() -> None:
    with context(deadline_tick_s=TICK) as ctx:
        job = _job(ctx.store, slack_ticks=20)
        clock = ManualClock(job.submitted_at)
        d = _driver(ctx, clock)

        async def go() -> tuple[str | None, str | None, bool]:
            assert await d.market(job, []) == SPOT
            att = ctx.store.add_attempt(job.id, 1, f"mj-{job.id}-1", "initial", market=SPOT)
            d.events.refused(job, att, "no spot capacity")
            ctx.store.update_attempt(job.id, 1, outcome=Outcome.NO_RESOURCE_RETRY,
                                     outcome_applied=1)
            attempts = ctx.store.attempts(job.id)
            after_refusal = await d.market(job, attempts)  # decided now, spot known down
            waiting = asyncio.ensure_future(d.market(job, attempts))
            await asyncio.sleep(0.1)
            waited = not waiting.done()  # nothing new this tick: wait for the next one
            clock.advance_to(job.submitted_at + TICK)
            at_next_tick = await waiting
            return after_refusal, at_next_tick, waited

        after_refusal, at_next_tick, waited = run(go())
        rows = _decisions(ctx.store, job.id)
    assert after_refusal is None and waited and at_next_tick is None
    assert [(r.tick, r.mode, r.spot_available, r.reason) for r in rows] == [
        (0, SPOT, True, "tick; spot wanted if available: trying it"),
        (0, IDLE, False, "spot launch refused"),
    ]
    clock.wait_settled(job.id, 0, timeout=0.1)  # the wait said it had acted on tick 0


def test_a_running_gang_with_nothing_to_do_is_quiet_for_the_rest_of_its_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    log_rows = dl.log_rows

    def counted(store: JobStore, job_id: int) -> list[dl.DeadlineLogRow]:
        reads.append(job_id)
        return log_rows(store, job_id)

    with context(deadline_tick_s=TICK) as ctx:
        job = _job(ctx.store, slack_ticks=20)
        clock = ManualClock(job.submitted_at)
        d = _driver(ctx, clock)
        job, att = running_job(ctx, job=job, market=SPOT)
        d.events.running(job, att)
        monkeypatch.setattr(dl, "log_rows", counted)
        first = run(d.tick(job, att))
        n = len(reads)
        second = run(d.tick(job, att))  # the same tick: the log is not even read
        quiet_reads = len(reads) - n
        clock.advance_to(job.submitted_at + TICK)
        third = run(d.tick(job, att))  # a new tick: decided again
        rows = _decisions(ctx.store, job.id)
    assert first is False and second is False and third is False
    assert n > 0 and quiet_reads == 0
    assert [(r.tick, r.mode, r.current) for r in rows] == [(0, SPOT, SPOT), (1, SPOT, SPOT)]
    clock.wait_settled(job.id, 1, timeout=0.1)


def test_a_spot_gang_whose_slack_ran_short_is_switched_off_spot() -> None:
    with context(deadline_tick_s=TICK) as ctx:
        job = _job(ctx.store, slack_ticks=1.1)
        clock = ManualClock(job.submitted_at)
        d = _driver(ctx, clock)
        job, att = running_job(ctx, job=job, market=SPOT)
        d.events.running(job, att)
        acted = run(d.tick(job, att))
        a = ctx.store.attempt(job.id, 1)
        log = dl.log_rows(ctx.store, job.id)
    assert acted is True
    assert a.outcome == Outcome.SWITCHED and not a.outcome_applied
    assert a.outcome_reason is not None and a.outcome_reason.startswith(
        "deadline policy: moving from spot to on-demand")
    assert [(r.kind, r.mode) for r in log] == [("running", SPOT), ("decision", ON_DEMAND),
                                               ("stopped", SPOT)]
    assert log[1].attempt == 2 and log[2].reason == "switched to on_demand"
