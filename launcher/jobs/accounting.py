"""Cost and time accounting of managed jobs, computed from the attempt rows.

An attempt is billed from the moment it was recorded (just before provisioning)
until its cluster was torn down (or now, while it lives), for all its nodes, at
the per-node price of the placement it launched on. Attempts that never got a
placement cost nothing. Recovery time is preemption (first sign: notice or
cloud view) -> the job running again. Work lost is the time between the last
checkpoint write before the preemption (or the attempt's start) and the preemption.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from launcher.jobs.deadline_store import DeadlineStatus
from launcher.jobs.store import AttemptRow, JobRow


@dataclass(frozen=True)
class AttemptCost:
    attempt: int
    node_hours: float
    cost: float


def attempt_cost(a: AttemptRow, now: float | None = None) -> AttemptCost:
    if not a.num_nodes or a.node_price is None:
        return AttemptCost(a.attempt, 0.0, 0.0)
    end = a.torn_down_at or a.ended_at or (time.time() if now is None else now)
    hours = max(0.0, end - a.created_at) / 3600.0 * a.num_nodes
    return AttemptCost(a.attempt, hours, hours * a.node_price)


def newest_mtime(path: str | None, limit: int = 10_000) -> float | None:
    """Newest modification time under `path` (a local directory), or None.

    Looks at no more than `limit` entries: checkpoint dirs are small, and this
    must stay cheap for the controller."""
    if not path or not os.path.isdir(path):
        return None
    newest: float | None = None
    seen = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            seen += 1
            if seen > limit:
                return newest
            try:
                m = os.stat(os.path.join(root, name)).st_mtime
            except OSError:
                continue
            newest = m if newest is None or m > newest else newest
    return newest


def work_lost_s(checkpoint_dir: str | None, running_at: float | None, preempted_at: float) -> float:
    """Seconds of work an attempt lost to its preemption (estimate).

    The last checkpoint write is read from the checkpoint dir's newest mtime when
    that dir is on this machine; otherwise everything since the attempt started
    counts as lost (an upper bound)."""
    start = running_at if running_at is not None else preempted_at
    last = newest_mtime(checkpoint_dir)
    since = max(start, last) if last is not None else start
    return max(0.0, preempted_at - since)


@dataclass(frozen=True)
class JobSummary:
    """One row of `launcher jobs queue` (also its --json shape)."""

    id: int
    name: str
    status: str
    cluster: str | None
    cloud: str | None
    region: str | None
    zone: str | None
    recoveries: int
    restarts_on_errors: int
    attempts: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    duration_s: float | None
    node_hours: float
    cost_so_far: float
    last_recovery_s: float | None
    work_lost_s: float
    failure_reason: str | None
    # a pipeline stage (issue 12): the pipeline's id (its first stage's job id) and
    # name, this stage's 1-based number of `stages`; all None for a plain managed job
    pipeline_id: int | None = None
    pipeline: str | None = None
    stage: int | None = None
    stages: int | None = None
    # a DEADLINE job (issue 13): its deadline (epoch), what runs now (spot | on_demand |
    # idle), the policy's last decision, progress (0..1 of the work) and the projected
    # finish (epoch; None once ended); all None for other jobs
    deadline_at: float | None = None
    mode: str | None = None
    decided: str | None = None
    progress: float | None = None
    projected_finish_at: float | None = None

    @property
    def display_name(self) -> str:
        """`name`, or for a stage `pipeline[k/n] name`."""
        if self.pipeline_id is None:
            return self.name
        return f"{self.pipeline or 'pipeline'}[{self.stage}/{self.stages}] {self.name}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(job: JobRow, attempts: Sequence[AttemptRow], now: float | None = None,
              deadline: DeadlineStatus | None = None) -> JobSummary:
    """The job's queue row; `deadline`: a DEADLINE job's status (deadline_store)."""
    t = time.time() if now is None else now
    current = attempts[-1] if attempts else None
    placed = [a for a in attempts if a.cloud is not None]
    where = placed[-1] if placed else None
    costs = [attempt_cost(a, t) for a in attempts]
    duration = None
    if job.started_at is not None:
        duration = (job.ended_at or t) - job.started_at
    live_cluster = None
    if current is not None and not job.status.is_terminal:
        live_cluster = current.cluster_name
    elif where is not None:
        live_cluster = where.cluster_name
    return JobSummary(
        id=job.id,
        name=job.name,
        status=job.status.value,
        cluster=live_cluster,
        cloud=where.cloud if where else None,
        region=where.region if where else None,
        zone=where.zone if where else None,
        recoveries=job.recoveries,
        restarts_on_errors=job.restarts_on_errors,
        attempts=len(attempts),
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        ended_at=job.ended_at,
        duration_s=None if duration is None else round(duration, 3),
        node_hours=round(sum(c.node_hours for c in costs), 6),
        cost_so_far=round(sum(c.cost for c in costs), 6),
        last_recovery_s=None if job.last_recovery_s is None else round(job.last_recovery_s, 3),
        work_lost_s=round(sum(a.work_lost_s or 0.0 for a in attempts), 3),
        failure_reason=job.failure_reason,
        pipeline_id=job.pipeline_id,
        pipeline=job.pipeline_name,
        stage=None if job.stage_index is None else job.stage_index + 1,
        stages=job.stage_count,
        deadline_at=deadline.deadline_at if deadline else None,
        mode=deadline.mode if deadline else None,
        decided=deadline.decided if deadline else None,
        progress=deadline.progress if deadline else None,
        projected_finish_at=deadline.projected_finish_at if deadline else None,
    )
