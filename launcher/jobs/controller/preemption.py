"""Recovering from a confirmed loss: deciding PREEMPTED (blocking the places the job's
strategy avoids next, estimating the work lost, draining a noticed gang), or replacing
only the lost nodes of a multi-node cluster in place when its cloud can.

Crash safety (controller rule 5): an in-place replacement writes its intent (lost nodes,
time, reason) with the RECOVERING transition before the cloud is asked, and clears it in
the transaction that records the new gang job; a restart that finds the intent recovers
with a full relaunch (`abandon_replace`).
"""

from __future__ import annotations

import logging
import time

from launcher.jobs import accounting, paths
from launcher.jobs.controller.context import Cancelled, Context, RecoverySteps
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.placement import LaunchRequests, placement_strategy
from launcher.jobs.crash import SimulatedCrash
from launcher.jobs.ops_interface import LaunchAbortedError
from launcher.jobs.recovery import Where, blocks_after_preemption
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")
# Attempt fields that clear an in-place replacement intent.
_NO_INTENT: dict[str, object] = {"replace_lost": None, "replace_at": None,
                                 "replace_reason": None}


class Recovery:
    """Acts on a loss the watch (or a launch) confirmed (see the module docstring)."""

    def __init__(self, ctx: Context, decisions: Decisions, requests: LaunchRequests,
                 logs: AttemptLogs, steps: RecoverySteps) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.decisions = decisions
        self.requests = requests
        self.logs = logs
        self.steps = steps

    async def on_preemption(self, job: JobRow, att: AttemptRow, lost: tuple[str, ...],
                            reason: str, at: float, *, draining: bool,
                            grace_s: float = 0.0) -> None:
        """Nodes `lost` of running attempt `att` are gone (or noticed: `draining`) since
        `at`: replace them in place when only some of a gang's nodes went and the cloud
        can, else decide the attempt PREEMPTED; or, when the cloud says the nodes ended
        for good at a limit the task set (`final_loss`: a Slurm time limit), FAILED."""
        if not draining:
            try:
                final = await self.ctx.watch_call(self.ctx.ops.final_loss, att.cluster_name)
            except Exception as exc:
                log.info("job %d: final_loss unreadable: %r", job.id, exc)
                final = None
            if final:
                self.steps.detected_once(job.id)
                self.decisions.decide(job, att, Outcome.FAILED, reason=final)
                return
        if (not draining and att.num_nodes and att.num_nodes > 1 and len(lost) < att.num_nodes
                and att.cluster_job_id is not None
                and self.ctx.ops.can_replace_nodes(att.cluster_name)):
            if await self.replace_in_place(job, att, lost, reason, at):
                return
            job = self.store.job(job.id)
            reason += "; they could not be replaced in place: relaunching the whole cluster"
        self.decide_preempted(job, att, reason, at, draining=draining, grace_s=grace_s)

    def decide_preempted(self, job: JobRow, att: AttemptRow, reason: str, at: float, *,
                         draining: bool, grace_s: float = 0.0) -> None:
        """Decide `att` PREEMPTED at `at`: block where it ran (per the job's strategy,
        for `cooldown_s`), record the work lost since its last checkpoint, and, when
        `draining` (an interruption notice), let its gang run until it has written its
        last checkpoint (`drain_until`) while the recovery starts."""
        self.steps.detected_once(job.id)
        self.steps.mark(job.id, "decided")
        att = self.store.attempt(att.job_id, att.attempt)  # where it was provisioned, if known
        if att.cloud is not None:
            for b in blocks_after_preemption(placement_strategy(job.strategy),
                                             Where(att.cloud, att.region, att.zone),
                                             at, self.ctx.cfg.cooldown_s):
                self.store.add_block(job.id, b.cloud, b.region, b.zone, b.until, b.reason)
        lost_s = accounting.work_lost_s(att.checkpoint_dir, att.running_at, at)
        fields: dict[str, object] = {"preempted_at": at, "work_lost_s": lost_s}
        if draining:
            # Recovery starts now; the old cluster keeps running until its job has
            # written its last checkpoint (see Finisher.ensure_drain).
            fields["drain_until"] = at + min(grace_s + 5.0, self.ctx.cfg.max_drain_s)
        self.decisions.decide(job, att, Outcome.PREEMPTED, reason=reason,
                              attempt_fields=fields)

    async def replace_in_place(self, job: JobRow, att: AttemptRow, lost: tuple[str, ...],
                               reason: str, at: float) -> bool:
        """Multi-node: replace only the lost nodes when the cloud can. True if done.

        Crash safety: the intent (lost nodes, preemption time, reason: the attempt's
        `replace_*` columns) is written with the RECOVERING transition before the cloud
        is asked; it is cleared in the same transaction that records the new gang job. A
        controller restarted in between finds the intent (`abandon_replace`) and
        recovers with a full relaunch: the cluster (and whatever the interrupted
        replacement started on it) is torn down, so no duplicate gang can run. The old
        gang run's output is saved before the nodes are replaced
        (`attempt-<n>.run-<k>.log`).

        A cancel meanwhile aborts the replacement like a launch (`call_cancellable`:
        the cluster's nodes are terminated under it, `before_run` refuses to submit)."""
        req = self.requests.build(job, att, [att], in_place=True)
        lost_s = accounting.work_lost_s(att.checkpoint_dir, att.running_at, at)
        self.store.transition(
            job.id, S.RECOVERING, f"{reason}; replacing only those nodes",
            attempt=att.attempt, recoveries=job.recoveries + 1,
            attempt_fields={"replace_lost": lost, "replace_at": at, "replace_reason": reason,
                            "preempted_at": at,
                            "work_lost_s": (att.work_lost_s or 0.0) + lost_s})
        self.ctx.hit("replace_intent_recorded")
        header = (f"=== gang run {att.gang_runs} ended: node(s) {', '.join(lost)} lost; gang "
                  f"restarted after the node(s) were replaced ===")
        await self.logs.save_retrying(
            att, paths.gang_run_log_path(job.id, att.attempt, att.gang_runs), header)
        try:
            launch = await self.ctx.call_cancellable(
                job.id, att.cluster_name, "node replacement", self.ctx.ops.replace_nodes,
                att.cluster_name, lost, req)
        except LaunchAbortedError:
            raise Cancelled from None
        except (Cancelled, SimulatedCrash):
            raise
        except Exception as exc:
            log.warning("job %d: in-place replacement failed: %r", job.id, exc)
            launch = None
        if launch is None:
            # Fall back to a full relaunch: the recovery is already counted.
            job = self.store.job(job.id)
            self.store.update_job(job.id, recoveries=job.recoveries - 1)
            self.store.update_attempt(job.id, att.attempt, **_NO_INTENT,
                                      work_lost_s=att.work_lost_s)
            return False
        self.ctx.hit("nodes_replaced")
        now = time.time()
        self.store.transition(
            job.id, S.RUNNING, f"replaced {len(lost)} node(s) in place; gang restarted "
            f"{now - at:.1f} s after the preemption", attempt=att.attempt,
            last_recovery_s=now - at,
            attempt_fields={"cluster_job_id": launch.cluster_job_id,
                            "node_ids": ",".join(launch.node_ids), "recovery_s": now - at,
                            **_NO_INTENT, "gang_runs": att.gang_runs + 1,
                            "node_price": launch.node_price})
        return True

    def abandon_replace(self, job: JobRow, att: AttemptRow) -> None:
        """A replacement interrupted by a controller crash: recover by a full relaunch
        (see `replace_in_place`). The recovery was counted with the intent."""
        at = att.replace_at or att.preempted_at or time.time()
        reason = att.replace_reason or (
            f"node(s) {', '.join(att.replace_lost)} lost" if att.replace_lost else "node(s) lost")
        self.store.update_job(job.id, recoveries=max(0, job.recoveries - 1))
        self.store.update_attempt(job.id, att.attempt, **_NO_INTENT)
        job = self.store.job(job.id)
        self.decide_preempted(job, att, f"{reason} (in-place replacement interrupted by a "
                              "controller restart: relaunching)", at, draining=False)
