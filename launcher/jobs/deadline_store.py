"""The DEADLINE strategy's records in the managed-jobs DB (tables: store.py's migration v5).

`DeadlineSpec` is a job's settings (columns of `managed_jobs`). The deadline log
(`managed_job_deadline_log`) keeps, per job, every decision of the policy and every change
of what runs, stamped with the controller's deadline clock:

- kind "decision": the policy's answer at a decision point (`tick` = whole ticks since
  submission, `mode`, `current`, `spot_available`, progress `done_s`, `slack_s`, the
  `restart_overhead_s` used, `reason`);
- kind "running": a gang of attempt `attempt` started making progress (`mode` = its market);
- kind "stopped": that gang stopped (preempted, switched away, ended); `reason` says why;
- kind "refused": a spot launch was refused (no spot capacity in any placement);
- kind "progress": a progress report read from the job's output (`done_s`).

The controller rebuilds the policy's Observation from these rows and the attempt rows only,
so a controller restarted after kill -9 decides as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.jobs.store import JobStore


@dataclass(frozen=True)
class DeadlineSpec:
    """A DEADLINE job's settings, in seconds: the absolute deadline (epoch), the work the
    job needs, the restart overhead (None: estimated from the job's history), the progress
    source ("wall" | "reported") and the launcher.spot policy name."""

    deadline_at: float
    work_s: float
    restart_overhead_s: float | None = None
    progress: str = "wall"
    policy: str = "launcher"


@dataclass(frozen=True)
class DeadlineLogRow:
    id: int
    job_id: int
    at: float
    kind: str
    tick: int | None
    mode: str | None
    current: str | None
    spot_available: bool | None
    done_s: float | None
    slack_s: float | None
    restart_overhead_s: float | None
    attempt: int | None
    reason: str


_COLS = ("job_id", "at", "kind", "tick", "mode", "current", "spot_available", "done_s",
         "slack_s", "restart_overhead_s", "attempt", "reason")


def add_log(store: JobStore, job_id: int, at: float, kind: str, reason: str, *,
            tick: int | None = None, mode: str | None = None, current: str | None = None,
            spot_available: bool | None = None, done_s: float | None = None,
            slack_s: float | None = None, restart_overhead_s: float | None = None,
            attempt: int | None = None) -> None:
    """Append one row to the job's deadline log (one transaction)."""
    values = (job_id, at, kind, tick, mode, current,
              None if spot_available is None else int(spot_available), done_s, slack_s,
              restart_overhead_s, attempt, reason)
    with store._tx() as c:
        c.execute(f"INSERT INTO managed_job_deadline_log ({', '.join(_COLS)}) "
                  f"VALUES ({', '.join('?' * len(_COLS))})", values)


def log_rows(store: JobStore, job_id: int) -> list[DeadlineLogRow]:
    """The job's deadline log, oldest first."""
    out = []
    for r in store._conn.execute(
            f"SELECT id, {', '.join(_COLS)} FROM managed_job_deadline_log WHERE job_id = ? "
            "ORDER BY id", (job_id,)):
        out.append(DeadlineLogRow(
            r["id"], r["job_id"], r["at"], r["kind"], r["tick"], r["mode"], r["current"],
            None if r["spot_available"] is None else bool(r["spot_available"]), r["done_s"],
            r["slack_s"], r["restart_overhead_s"], r["attempt"], r["reason"]))
    return out
