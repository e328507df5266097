"""Launching an attempt, alone: the attempt row (and its cluster name) written before the
cloud is asked, adopting or cleaning up what a dead controller left provisioning, and how
a failed launch ends (no capacity, setup, transient errors, a loss during setup).
Real store, FakeOps; a recording stand-in for the recovery."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.jobs.controller.context import Context, RecoverySteps
from launcher.jobs.controller.deadline_events import DeadlineEvents
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.launch import AttemptLauncher, backoff_s, cause_after
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.placement import LaunchRequests
from launcher.jobs.controller.running import RunningRecorder
from launcher.jobs.crash import SimulatedCrash
from launcher.jobs.ops_interface import LaunchRequest
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, JobRow
from tests.jobs.fake_ops import Behaviour, FakeOps
from tests.jobs.harness import fast_config
from tests.jobs.parts import (
    PLACES,
    NoDeadline,
    RecordingRecovery,
    add_job,
    context,
    run,
    running_job,
    start_cluster,
)


def _launcher(ctx: Context) -> tuple[AttemptLauncher, RecordingRecovery]:
    loss = LossDetector(ctx)
    logs = AttemptLogs(ctx, loss)
    steps = RecoverySteps()
    events = DeadlineEvents(ctx.store, None)  # type: ignore[arg-type]  # no DEADLINE job here
    finisher = Finisher(ctx, logs, loss)
    recovery = RecordingRecovery()
    launcher = AttemptLauncher(ctx, LaunchRequests(ctx, finisher, logs, steps),
                               Decisions(ctx.store), recovery, loss, finisher,  # type: ignore[arg-type]
                               RunningRecorder(ctx, steps, events), NoDeadline(),  # type: ignore[arg-type]
                               events, steps)
    return launcher, recovery


def _starting(ctx: Context, **kw: Any) -> JobRow:
    job = add_job(ctx.store, **kw)
    return ctx.store.transition(job.id, S.STARTING, "test")


def _launch(ctx: Context, job: JobRow, times: int = 1) -> RecordingRecovery:
    """`times` launch steps of `job` in one event loop, each after the last one's outcome
    was applied (as the loop does between them)."""
    launcher, recovery = _launcher(ctx)

    async def go() -> None:
        for i in range(times):
            if i:
                last = ctx.store.attempts(job.id)[-1]
                ctx.store.update_attempt(job.id, last.attempt, outcome_applied=1)
            await launcher.launch(ctx.store.job(job.id), ctx.store.attempts(job.id))

    run(go())
    return recovery


def test_a_first_launch_records_the_attempt_and_runs_it() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job = _starting(ctx)
        _launch(ctx, job)
        j, (a,) = ctx.store.job(job.id), ctx.store.attempts(job.id)
    assert j.status == S.RUNNING and j.started_at is not None
    assert (a.cluster_name, a.cause, a.phase) == (f"mj-{job.id}-1", "initial",
                                                  AttemptPhase.RUNNING)
    assert (a.cloud, a.zone, a.cluster_job_id) == ("aws", "us-east-1a", 1)
    assert ops.live() == [a.cluster_name]


def test_the_cluster_name_is_written_before_the_cloud_is_asked() -> None:
    """Rule 1: a controller dying right after recording the attempt leaves its name in the
    DB and nothing in the cloud; the next one provisions that same name once."""
    ops = FakeOps(PLACES)
    with context(ops, crash_at="attempt_recorded") as ctx:
        job = _starting(ctx)
        with pytest.raises(SimulatedCrash):
            _launch(ctx, job)
        (a,) = ctx.store.attempts(job.id)
        assert a.phase == AttemptPhase.PROVISIONING and ops.history == []
    with context(ops) as ctx:  # the next controller: nothing to adopt, it launches that name
        _launch(ctx, job)
        attempts = ctx.store.attempts(job.id)
    assert [x.cluster_name for x in attempts] == [a.cluster_name]
    assert [name for name, _ in ops.history] == [a.cluster_name]
    assert attempts[0].phase == AttemptPhase.RUNNING


def test_a_cluster_left_provisioning_is_adopted_not_launched_again() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job = _starting(ctx)
        a = ctx.store.add_attempt(job.id, 1, f"mj-{job.id}-1", "initial")
        start_cluster(ops, a.cluster_name)  # up and running our job: the crash came after
        _launch(ctx, job)
        j, a1 = ctx.store.job(job.id), ctx.store.attempt(job.id, 1)
    assert ops.history == [] and ops.teardowns == []
    assert j.status == S.RUNNING and a1.phase == AttemptPhase.RUNNING


def test_a_crash_between_the_attempts_running_and_the_jobs_only_writes_the_job() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx)
        ctx.store.add_attempt(job.id, 2, f"mj-{job.id}-2", "preemption")
        ctx.store.update_attempt(job.id, 1, outcome=Outcome.PREEMPTED, outcome_applied=1)
        job = ctx.store.transition(job.id, S.RECOVERING, "test")
        ctx.store.update_attempt(job.id, 2, phase=AttemptPhase.RUNNING, cluster_job_id=1)
        _launch(ctx, job)
        j = ctx.store.job(job.id)
    assert j.status == S.RUNNING and ops.history == []


def test_no_capacity_fails_a_first_launch_and_retries_a_recovery_up_to_its_limit() -> None:
    ops = FakeOps(PLACES)
    ops.capacity = {p.zone: False for p in PLACES}
    with context(ops, max_no_capacity_retries=2) as ctx:
        first = _starting(ctx)
        _launch(ctx, first)
        assert ctx.store.attempt(first.id, 1).outcome == Outcome.NO_RESOURCE
        job, _ = running_job(ctx)
        ctx.store.update_attempt(job.id, 1, outcome=Outcome.PREEMPTED, outcome_applied=1,
                                 torn_down_at=1.0)
        ctx.store.transition(job.id, S.RECOVERING, "test")
        _launch(ctx, job, times=2)
        outcomes = [(a.cause, a.outcome) for a in ctx.store.attempts(job.id)]
    assert outcomes == [("initial", Outcome.PREEMPTED),
                        ("preemption", Outcome.NO_RESOURCE_RETRY),
                        ("preemption", Outcome.NO_RESOURCE)]


def test_transient_launch_errors_are_retried_then_fail_the_job() -> None:
    ops = FakeOps(PLACES)

    def broken(req: LaunchRequest) -> Any:
        raise RuntimeError("api hiccup")

    ops.provision_and_start = broken  # type: ignore[method-assign]
    with context(ops, max_launch_errors=2, failure_confirm_s=0.0) as ctx:
        job = _starting(ctx)
        _launch(ctx, job, times=2)
        attempts = ctx.store.attempts(job.id)
    assert [(a.cause, a.outcome) for a in attempts] == [("initial", Outcome.LAUNCH_ERROR),
                                                        ("initial", Outcome.LAUNCH_FAILED)]
    assert attempts[1].outcome_reason == "launch error: RuntimeError: api hiccup"


def test_a_setup_failure_is_the_tasks_unless_the_cloud_lost_a_node_meanwhile() -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(setup_fails=n == 1))
    with context(ops, failure_confirm_s=0.0) as ctx:
        job = _starting(ctx)
        recovery = _launch(ctx, job)
        assert ctx.store.attempt(job.id, 1).outcome == Outcome.SETUP_FAILED
        assert recovery.decided == []
        ops.on_setup = ops.preempt  # the node goes during the next setup
        job2 = _starting(ctx)
        recovery = _launch(ctx, job2)
    (d,) = recovery.decided
    assert d["reason"] == f"node(s) mj-{job2.id}-1-0 preempted during setup"
    assert not d["draining"]


def test_a_node_failing_the_health_gate_is_handled_like_a_lost_node() -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(unhealthy_rank=1 if n == 1 else None))
    with context(ops, failure_confirm_s=0.0) as ctx:
        job = _starting(ctx)
        recovery = _launch(ctx, job)
        assert ctx.store.attempt(job.id, 1).outcome != Outcome.SETUP_FAILED
    (d,) = recovery.decided
    assert d["reason"] == ("node 1 failed the health gate: node 1 (10.0.0.1): gpus: 7 GPU(s) "
                           "visible, 8 paid for")
    assert not d["draining"]


def test_a_launch_failing_the_gate_every_time_fails_the_job_after_max_launch_errors() -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(unhealthy_rank=0))
    with context(ops, failure_confirm_s=0.0) as ctx:
        job = _starting(ctx)
        launcher, recovery = _launcher(ctx)
        limit = ctx.cfg.max_launch_errors

        async def go() -> None:
            for i in range(limit):
                if i:  # what the recovery would have done with the attempt before
                    last = ctx.store.attempts(job.id)[-1]
                    ops.teardown(last.cluster_name)
                    ctx.store.update_attempt(job.id, last.attempt, outcome_applied=1,
                                             outcome="PREEMPTED", torn_down_at=1.0,
                                             outcome_reason=recovery.decided[-1]["reason"])
                await launcher.launch(ctx.store.job(job.id), ctx.store.attempts(job.id))

        run(go())
        assert len(recovery.decided) == limit - 1
        last = ctx.store.attempts(job.id)[-1]
        assert last.outcome == Outcome.LAUNCH_FAILED
        assert f"{limit} launches in a row failed the health gate" in (last.outcome_reason or "")


def test_the_next_attempts_cause_and_backoff_follow_the_last_outcomes() -> None:
    with context() as ctx:
        job, _ = running_job(ctx)
        store = ctx.store
        store.update_attempt(job.id, 1, outcome=Outcome.PREEMPTED)
        store.add_attempt(job.id, 2, "x-2", "preemption")
        store.update_attempt(job.id, 2, outcome=Outcome.NO_RESOURCE_RETRY)
        store.add_attempt(job.id, 3, "x-3", "preemption")
        store.update_attempt(job.id, 3, outcome=Outcome.NO_RESOURCE_RETRY)
        attempts = store.attempts(job.id)
    cfg = fast_config(backoff_min_s=1.0, backoff_max_s=3.0)
    assert cause_after(attempts) == "preemption"  # a retry keeps the recovery's cause
    assert cause_after(attempts[:1]) == "preemption" and cause_after([]) == "initial"
    assert backoff_s(cfg, attempts[:2]) == 1.0 and backoff_s(cfg, attempts) == 2.0
    assert backoff_s(fast_config(backoff_min_s=1.0, backoff_max_s=1.5), attempts) == 1.5
