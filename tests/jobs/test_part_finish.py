"""The finisher and the log keeping, alone: applying recorded outcomes (the job's terminal
and recovering transitions), drains, teardown order and idempotency, cancel; saving an
attempt's log before its cluster goes. Real store, FakeOps cluster."""

from __future__ import annotations

import asyncio
import time

from launcher.jobs import paths
from launcher.jobs.controller.context import Context
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase
from tests.jobs.fake_ops import Behaviour, FakeOps
from tests.jobs.parts import PLACES, add_job, context, run, running_job, start_cluster


def _finisher(ctx: Context) -> Finisher:
    loss = LossDetector(ctx)
    return Finisher(ctx, AttemptLogs(ctx, loss), loss)


async def _settle(ctx: Context) -> None:
    """Wait for the background work (teardowns, drains) the finisher started."""
    while ctx.background:
        await asyncio.gather(*list(ctx.background), return_exceptions=True)


def test_a_final_outcome_saves_the_log_tears_down_then_ends_the_job() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx)
        Decisions(ctx.store).decide(job, att, Outcome.SUCCEEDED, exit_code=0,
                                    reason="job succeeded")
        run(_finisher(ctx).apply_outcome(job, ctx.store.attempt(job.id, 1)))
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
        events = ctx.store.events(job.id)
    assert j.status == S.SUCCEEDED and j.ended_at is not None and j.failure_reason is None
    assert a.phase == AttemptPhase.ENDED and a.outcome_applied and a.torn_down_at is not None
    assert events[-1].to_status == "SUCCEEDED" and events[-1].reason == "job succeeded"
    assert ops.timeline == [f"fetch-ok {att.cluster_name}", f"teardown {att.cluster_name}"]
    log = paths.attempt_log_path(job.id, 1).read_text()
    assert "(rank 0) done (gang run 1)" in log


def test_a_setup_failure_tears_down_without_a_log_and_says_why() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job = add_job(ctx.store)
        ctx.store.transition(job.id, S.STARTING, "test")
        att = ctx.store.add_attempt(job.id, 1, f"mj-{job.id}-1", "initial")
        start_cluster(ops, att.cluster_name)  # provisioned; its setup failed
        Decisions(ctx.store).decide(job, att, Outcome.SETUP_FAILED, reason="setup exited 1")
        run(_finisher(ctx).apply_outcome(ctx.store.job(job.id), ctx.store.attempt(job.id, 1)))
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
    assert j.status == S.FAILED_SETUP and j.failure_reason == "setup exited 1"
    assert a.phase == AttemptPhase.ENDED and a.torn_down_at is not None
    assert ops.timeline == [f"teardown {att.cluster_name}"]  # no job ran: no log to fetch


def test_an_outcome_applied_again_after_a_crash_does_not_tear_down_twice() -> None:
    """Rule 2: the teardown ran, the crash came before the terminal transition."""
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx)
        Decisions(ctx.store).decide(job, att, Outcome.FAILED, exit_code=1, reason="failed")
        run(_finisher(ctx).finalize_attempt(ctx.store.attempt(job.id, 1), fetch_logs=True))
        assert ops.teardowns == [att.cluster_name]
        assert ctx.store.job(job.id).status == S.RUNNING  # "crashed" here
        saved = paths.attempt_log_path(job.id, 1).read_text()
        start_cluster(ops, att.cluster_name)  # would be fetched and torn down if asked
        run(_finisher(ctx).apply_outcome(ctx.store.job(job.id), ctx.store.attempt(job.id, 1)))
        j = ctx.store.job(job.id)
    assert j.status == S.FAILED and j.exit_code == 1
    # nothing was fetched or torn down again
    assert ops.teardowns == [att.cluster_name] and att.cluster_name in ops.live()
    assert ops.timeline.count(f"fetch-ok {att.cluster_name}") == 1
    assert paths.attempt_log_path(job.id, 1).read_text() == saved


def test_a_preemption_moves_the_job_to_recovering_and_tears_down_in_the_background() -> None:
    ops = FakeOps(PLACES)
    ops.teardown_delay_s = 1.0
    with context(ops) as ctx:
        job, att = running_job(ctx)
        ops.preempt(att.cluster_name)
        Decisions(ctx.store).decide(job, att, Outcome.PREEMPTED, reason="cloud reports it",
                                    attempt_fields={"preempted_at": time.time()})
        fin = _finisher(ctx)

        async def go() -> tuple[float, bool]:
            t0 = time.monotonic()
            await fin.apply_outcome(job, ctx.store.attempt(job.id, 1))
            took = time.monotonic() - t0
            still_up = att.cluster_name in ops.live()
            await _settle(ctx)
            return took, still_up

        took, still_up = run(go())
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
    assert took < 1.0 and still_up  # not waited for
    assert j.status == S.RECOVERING and j.recoveries == 1 and j.restarts_on_errors == 0
    assert a.phase == AttemptPhase.ENDED and a.outcome_applied and a.torn_down_at is not None
    assert att.cluster_name not in ops.live()


def test_retry_outcomes_count_and_keep_the_status() -> None:
    with context() as ctx:
        job, att = running_job(ctx, max_restarts=3)
        Decisions(ctx.store).decide(job, att, Outcome.ERROR_RESTART, exit_code=1, reason="r")
        fin = _finisher(ctx)
        run(fin.apply_outcome(job, ctx.store.attempt(job.id, 1)))
        j = ctx.store.job(job.id)
        assert j.status == S.RECOVERING and j.restarts_on_errors == 1 and j.recoveries == 0
        # a refused relaunch during the recovery: no status change, only an event
        ctx.store.add_attempt(job.id, 2, f"mj-{job.id}-2", "error-restart")
        Decisions(ctx.store).decide(j, ctx.store.attempt(job.id, 2), Outcome.NO_RESOURCE_RETRY,
                                    reason="no capacity")
        run(fin.apply_outcome(j, ctx.store.attempt(job.id, 2)))
        ev = ctx.store.events(job.id)[-1]
        j2 = ctx.store.job(job.id)
    assert j2.status == S.RECOVERING and j2.restarts_on_errors == 1
    assert (ev.from_status, ev.to_status, ev.reason) == ("RECOVERING", "RECOVERING",
                                                         "no capacity")


def test_a_noticed_attempt_drains_until_its_job_ends_then_goes() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx, behaviour=Behaviour(duration_s=0.3))
        now = time.time()
        Decisions(ctx.store).decide(job, att, Outcome.PREEMPTED, reason="notice",
                                    attempt_fields={"preempted_at": now,
                                                    "drain_until": now + 5.0})
        fin = _finisher(ctx)

        async def go() -> tuple[str, bool, float]:
            await fin.apply_outcome(job, ctx.store.attempt(job.id, 1))
            a = ctx.store.attempt(job.id, 1)
            up = att.cluster_name in ops.live()
            t0 = time.monotonic()
            await fin.ensure_drain(job, a)
            return a.phase, up, time.monotonic() - t0

        phase, up, drained_s = run(go())
        a = ctx.store.attempt(job.id, 1)
    assert phase == AttemptPhase.RUNNING and up  # applied, still running its checkpoint
    assert drained_s < 2.0  # ended with its job, not at drain_until
    assert a.phase == AttemptPhase.ENDED and a.torn_down_at is not None
    assert att.cluster_name not in ops.live()


def test_old_clusters_are_waited_for_unless_every_node_is_lost() -> None:
    ops = FakeOps(PLACES)
    ops.teardown_delay_s = 1.0
    with context(ops) as ctx:
        fin = _finisher(ctx)
        lost_job, lost = running_job(ctx)
        ops.preempt(lost.cluster_name)  # every node gone: nothing can run there
        ctx.store.update_attempt(lost_job.id, 1, outcome=Outcome.PREEMPTED, outcome_applied=1)
        failed_job, failed = running_job(ctx)
        ctx.store.update_attempt(failed_job.id, 1, outcome=Outcome.ERROR_RESTART,
                                 outcome_applied=1)

        async def gone_after(job_id: int) -> float:
            t0 = time.monotonic()
            await fin.old_clusters_gone(ctx.store.attempts(job_id))
            return time.monotonic() - t0

        async def go() -> tuple[float, float]:
            a, b = await gone_after(lost_job.id), await gone_after(failed_job.id)
            await _settle(ctx)
            return a, b

        lost_s, failed_s = run(go())
    assert lost_s < 1.0 <= failed_s
    assert ops.live() == []


def test_cancel_stops_the_run_ends_every_attempt_then_writes_cancelled() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx)
        c = ops.clusters[att.cluster_name]
        run(_finisher(ctx).cancel(job.id))
        j, a = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
    assert c.cancelled
    assert j.status == S.CANCELLED and j.failure_reason == "cancelled"
    assert a.outcome == Outcome.CANCELLED and a.outcome_applied and a.torn_down_at is not None
    assert ops.live() == []


def test_logs_are_fetched_again_until_whole_and_never_replaced_by_less() -> None:
    ops = FakeOps(PLACES)
    with context(ops, log_fetch_tries=3) as ctx:
        job, att = running_job(ctx)
        logs = AttemptLogs(ctx, LossDetector(ctx))
        ops.fetch_failures = 2
        assert run(logs.save_retrying(att))
        path = paths.attempt_log_path(job.id, 1)
        whole = path.read_text()
        ops.fetch_failures = 5  # every try breaks off after one line
        assert not run(logs.save_retrying(att))
        kept = path.read_text()
    assert "(rank 0) done (gang run 1)" in whole and kept == whole
    assert ops.timeline.count(f"fetch-failed {att.cluster_name}") == 5
