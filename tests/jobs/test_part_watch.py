"""The watch and loss detection, alone: `Watcher.watch` over a FakeOps cluster, the real
store, real loss questions and outcome records, and a recording stand-in for the recovery
(what the watch hands over on a loss is checked, not what recovery then does)."""

from __future__ import annotations

import time

from launcher.clouds.base import NodeState
from launcher.jobs.controller.context import Context, RecoverySteps
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.watch import Watcher
from launcher.jobs.ops_interface import JobRun, RunState
from launcher.jobs.store import AttemptRow, JobRow
from tests.jobs.fake_ops import Behaviour, FakeOps
from tests.jobs.parts import PLACES, NoDeadline, RecordingRecovery, context, run, running_job


def _watcher(ctx: Context) -> tuple[Watcher, RecordingRecovery]:
    loss = LossDetector(ctx)
    recovery = RecordingRecovery()
    w = Watcher(ctx, loss, AttemptLogs(ctx, loss), Decisions(ctx.store), recovery,  # type: ignore[arg-type]
                NoDeadline(), RecoverySteps())  # type: ignore[arg-type]
    return w, recovery


def _watch(ctx: Context, job: JobRow, att: AttemptRow) -> tuple[AttemptRow, RecordingRecovery]:
    w, recovery = _watcher(ctx)
    run(w.watch(job, att))
    return ctx.store.attempt(job.id, att.attempt), recovery


def test_a_node_the_cloud_reports_preempted_is_handed_to_recovery_with_the_clouds_time() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx, nodes=2)
        ops.preempt(att.cluster_name, node_index=1)
        lost_at = ops.clusters[att.cluster_name].preempted_at
        after, recovery = _watch(ctx, job, att)
    (p,) = recovery.preemptions
    node = f"{att.cluster_name}-1"
    assert p["lost"] == (node,) and not p["draining"]
    assert p["reason"] == f"cloud reports {node} {NodeState.PREEMPTED}"
    assert p["at"] == lost_at  # the cloud's record of the loss, not the detection time
    assert after.outcome is None  # the watch decides nothing itself on a loss


def test_an_unreachable_head_the_cloud_does_not_confirm_is_no_loss() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx, behaviour=Behaviour(duration_s=0.3))
        ops.status_failures = 4  # the agent does not answer for a while
        ops.query_failures = 2  # nor does the cloud at first: still no loss
        after, recovery = _watch(ctx, job, att)
    assert recovery.preemptions == [] and recovery.decided == []
    assert after.outcome == Outcome.SUCCEEDED and after.exit_code == 0
    assert ops.status_failures == 0  # it kept asking until the agent answered


def test_a_head_unreachable_past_the_limit_is_recovered_anyway() -> None:
    ops = FakeOps(PLACES)
    with context(ops, head_unreachable_limit_s=0.3, unreachable_poll_max_s=0.05) as ctx:
        job, att = running_job(ctx)
        ops.status_failures = 10**6
        t0 = time.time()
        after, recovery = _watch(ctx, job, att)
    (p,) = recovery.preemptions
    head = att.node_ids[0]
    assert p["lost"] == (head,) and not p["draining"]
    assert p["reason"].startswith(f"head node {head} unreachable for ")
    assert "the cloud's view never confirmed a loss" in p["reason"]
    assert f"{head} {NodeState.RUNNING}" in p["reason"]
    assert time.time() - t0 >= 0.3
    assert after.outcome is None


def test_an_interruption_notice_starts_a_draining_recovery_with_its_grace() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx)
        ops.preempt(att.cluster_name, node_index=0, notice_s=30.0)
        notice = ops.clusters[att.cluster_name].notices[0]
        _, recovery = _watch(ctx, job, att)
    (p,) = recovery.preemptions
    assert p["draining"] and p["grace_s"] == 30.0 and p["at"] == notice.received_at
    assert p["lost"] == (notice.node_id,)
    assert p["reason"] == f"interruption notice for {notice.node_id} (grace 30 s)"


def test_a_run_that_ended_before_its_node_was_lost_keeps_its_own_result() -> None:
    ops = FakeOps(PLACES)
    ops.records_outlive_nodes = True  # the head's record outlives the node (local cloud)
    with context(ops) as ctx:
        job, att = running_job(ctx, behaviour=Behaviour(duration_s=0.0))
        time.sleep(0.01)
        ops.preempt(att.cluster_name)  # lost after the run had already succeeded
        after, recovery = _watch(ctx, job, att)
    assert recovery.preemptions == []
    assert after.outcome == Outcome.SUCCEEDED


def test_a_failed_exit_is_decided_by_the_jobs_exit_policy() -> None:
    ops = FakeOps(PLACES)
    cases = [
        (dict(codes=(3,)), 3, Outcome.EXIT_CODE,
         "job ended with exit code 3 on rank 0: user code (listed in recover_on_exit_codes)"),
        (dict(max_restarts=2), 1, Outcome.ERROR_RESTART,
         "job failed with exit code 1 on rank 0: user code; restart 1 of 2"),
        ({}, 1, Outcome.FAILED, "job failed with exit code 1 on rank 0: user code"),
    ]
    with context(ops, failure_confirm_s=0.01) as ctx:
        for kw, code, outcome, reason in cases:
            job, att = running_job(ctx, behaviour=Behaviour(duration_s=0.0, exit_code=code),
                                   **kw)
            after, recovery = _watch(ctx, job, att)
            assert recovery.preemptions == []
            assert (after.outcome, after.exit_code, after.outcome_reason) == (outcome, code,
                                                                              reason)


def test_a_failure_on_a_lost_node_is_a_preemption_not_the_users_error() -> None:
    ops = FakeOps(PLACES)
    ops.records_outlive_nodes = True
    with context(ops, failure_confirm_s=0.01) as ctx:
        job, att = running_job(ctx, nodes=2, behaviour=Behaviour(duration_s=0.2, exit_code=137))
        w, recovery = _watcher(ctx)

        async def go() -> None:
            # the run is seen failing while the cloud reports node 1 gone (no loss time
            # recorded: the failure may have been caused by the loss)
            with ops.lock:
                ops.clusters[att.cluster_name].nodes[f"{att.cluster_name}-1"] = (
                    NodeState.TERMINATED)
            await w.on_run_end(job, att, JobRun(RunState.FAILED, 137, 1, "killed",
                                                ended_at=time.time()))

        run(go())
        after = ctx.store.attempt(job.id, att.attempt)
    (p,) = recovery.preemptions
    assert p["lost"] == (f"{att.cluster_name}-1",)
    assert p["reason"] == f"node(s) {att.cluster_name}-1 preempted (job exit 137)"
    assert after.outcome is None


def test_a_node_the_health_watch_failed_is_excluded_and_handed_to_recovery() -> None:
    ops = FakeOps(PLACES)
    with context(ops) as ctx:
        job, att = running_job(ctx, nodes=2,
                               behaviour=Behaviour(duration_s=30, watch_fails_rank=1))
        t0 = time.time()
        after, recovery = _watch(ctx, job, att)
    (p,) = recovery.preemptions
    node = att.node_ids[1]
    assert p["lost"] == (node,) and not p["draining"]
    assert p["reason"].startswith(
        f"node 1 ({node}) failed the health watch: Xid 79 (GPU has fallen off the bus)")
    assert "excluded: " in p["reason"]
    assert ops.excluded == [(att.cluster_name, (node,), p["reason"].split("; excluded")[0])]
    assert p["at"] == ops.clusters[att.cluster_name].started + 0.05  # the agent's detection
    assert time.time() - t0 < 10  # handed over at the next poll, not at the job's end
    assert after.outcome is None
