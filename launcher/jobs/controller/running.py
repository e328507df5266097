"""Recording that an attempt runs: where it landed, its cluster job, how long its recovery
took (with the breakdown of the recovery's steps), and the job's RUNNING transition."""

from __future__ import annotations

import logging
import time
from typing import Any

from launcher.jobs.controller.context import Context, RecoverySteps
from launcher.jobs.controller.deadline_events import DeadlineEvents
from launcher.jobs.ops_interface import AttemptLaunch
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")


class RunningRecorder:
    """Writes an attempt's RUNNING state (attempt row, then the job's transition)."""

    def __init__(self, ctx: Context, steps: RecoverySteps, deadline: DeadlineEvents) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.steps = steps
        self.deadline = deadline

    def record(self, job: JobRow, att: AttemptRow, launch: AttemptLaunch) -> None:
        """Attempt `att` was launched as `launch` (its job submitted): record it, then
        move the job to RUNNING."""
        now = time.time()
        recovery_s = None
        prev = [a for a in self.store.attempts(job.id) if a.attempt < att.attempt]
        preempted = [a.preempted_at for a in prev if a.preempted_at is not None]
        breakdown = ""
        if att.cause == "preemption" and preempted:
            recovery_s = now - preempted[-1]
            breakdown = self.steps.breakdown(job.id, preempted[-1], now)
            log.info("job %d: recovered in %.1f s (%s)", job.id, recovery_s, breakdown)
        self.steps.forget(job.id)
        att = self.store.update_attempt(
            job.id, att.attempt, phase=AttemptPhase.RUNNING, cloud=launch.cloud,
            region=launch.region, zone=launch.zone, instance_type=launch.instance_type,
            num_nodes=launch.num_nodes, use_spot=launch.use_spot, node_price=launch.node_price,
            cluster_job_id=launch.cluster_job_id, checkpoint_dir=launch.checkpoint_dir,
            running_at=now, recovery_s=recovery_s, node_ids=launch.node_ids,
        )
        self.to_running(job, att, breakdown)

    def to_running(self, job: JobRow, att: AttemptRow, breakdown: str = "") -> None:
        """The job's RUNNING transition for attempt `att` (already recorded RUNNING; a
        restart that finds only the attempt's row written calls this alone)."""
        fields: dict[str, Any] = {}
        if job.started_at is None:
            fields["started_at"] = att.running_at or time.time()
        if att.recovery_s is not None:
            fields["last_recovery_s"] = att.recovery_s
        how = f" {att.recovery_s:.1f} s after the preemption" if att.recovery_s else ""
        if how and breakdown:
            how += f" ({breakdown})"
        self.store.transition(
            job.id, S.RUNNING,
            f"running on {att.where} ({att.instance_type}, cluster {att.cluster_name}){how}",
            attempt=att.attempt, **fields,
        )
        if job.deadline is not None:
            self.deadline.running(job, att)
        self.ctx.hit("running_recorded")
