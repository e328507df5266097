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

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.jobs.store import AttemptRow, JobRow, JobStore

# A column type of the job row, so defined beside it (store.py); re-exported here.
from launcher.jobs.store import DeadlineSpec as DeadlineSpec

# A job whose progress estimate reached its duration but which has not exited is this much
# short of done (it still needs a gang; it ends the job itself).
UNFINISHED_S = 1e-3
_PROGRESS_RE = re.compile(rb"LAUNCHER_PROGRESS=([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


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
    with store.write() as c:
        c.execute(f"INSERT INTO managed_job_deadline_log ({', '.join(_COLS)}) "
                  f"VALUES ({', '.join('?' * len(_COLS))})", values)


def log_rows(store: JobStore, job_id: int) -> list[DeadlineLogRow]:
    """The job's deadline log, oldest first."""
    out = []
    for r in store.rows(
            f"SELECT id, {', '.join(_COLS)} FROM managed_job_deadline_log WHERE job_id = ? "
            "ORDER BY id", (job_id,)):
        out.append(DeadlineLogRow(
            r["id"], r["job_id"], r["at"], r["kind"], r["tick"], r["mode"], r["current"],
            None if r["spot_available"] is None else bool(r["spot_available"]), r["done_s"],
            r["slack_s"], r["restart_overhead_s"], r["attempt"], r["reason"]))
    return out


def wall_progress_s(rows: list[DeadlineLogRow], now: float) -> float:
    """`progress: wall`: the seconds the job's gangs made progress, from each "running" row
    (its progress start) to its "stopped" row (or `now`)."""
    done = 0.0
    start: dict[int, float] = {}
    for r in rows:
        if r.kind == "running" and r.attempt is not None:
            start[r.attempt] = r.at
        elif r.kind == "stopped" and r.attempt in start:
            done += max(0.0, min(r.at, now) - start.pop(r.attempt))
    for s in start.values():
        done += max(0.0, now - s)
    return done


def reported_fraction(job_id: int, checkpoint_dirs: Sequence[str] = ()) -> float:
    """`progress: reported`: the largest fraction (0..1) the job reported: a line
    `LAUNCHER_PROGRESS=<fraction>` it printed in any attempt's log (kept by the controller's
    log sync), or a file `progress` holding the fraction in one of its `checkpoint_dirs`
    that is on this machine (the local cloud's, or a file:// checkpoint store's copy); 0
    before any report."""
    from launcher.jobs import paths

    best = 0.0
    folder = paths.attempt_log_path(job_id, 1).parent
    texts: list[bytes] = []
    for p in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            texts.append(p.read_bytes())
    for d in checkpoint_dirs:
        with contextlib.suppress(OSError, ValueError):
            texts.append(b"LAUNCHER_PROGRESS=" + Path(d, "progress").read_bytes().strip())
    for text in texts:
        for m in _PROGRESS_RE.finditer(text):
            with contextlib.suppress(ValueError):
                best = max(best, min(1.0, float(m.group(1))))
    return best


def local_checkpoint_dirs(attempts: Sequence[AttemptRow]) -> list[str]:
    """The checkpoint dirs of the attempts that ran on the local cloud (on this machine:
    the controller can read a `progress` file there; other clouds' are on their nodes)."""
    return sorted({a.checkpoint_dir for a in attempts
                   if a.cloud == "local" and a.checkpoint_dir})


def progress_s(job: JobRow, rows: list[DeadlineLogRow], now: float,
               checkpoint_dirs: Sequence[str] = ()) -> float:
    """The job's durable progress in seconds, capped `UNFINISHED_S` short of its work."""
    assert job.deadline is not None
    cap = max(0.0, job.deadline.work_s - UNFINISHED_S)
    if job.deadline.progress == "reported":
        return min(cap, reported_fraction(job.id, checkpoint_dirs) * job.deadline.work_s)
    return min(cap, wall_progress_s(rows, now))


@dataclass(frozen=True)
class DeadlineStatus:
    """What `launcher jobs queue` shows of a DEADLINE job (JSON: these names)."""

    deadline_at: float
    mode: str  # what runs now: spot | on_demand | idle
    decided: str | None  # the policy's last decision
    progress: float  # 0..1 of the work
    work_s: float
    projected_finish_at: float | None  # None once the job ended

    @property
    def on_track(self) -> bool:
        return self.projected_finish_at is None or self.projected_finish_at <= self.deadline_at


def deadline_status(job: JobRow, rows: list[DeadlineLogRow], now: float,
                    checkpoint_dirs: Sequence[str] = ()) -> DeadlineStatus:
    """The DEADLINE job's status at `now` from its log (see the module docstring)."""
    assert job.deadline is not None
    running: dict[int, DeadlineLogRow] = {}
    for r in rows:
        if r.kind == "running" and r.attempt is not None:
            running[r.attempt] = r
        elif r.kind == "stopped" and r.attempt is not None:
            running.pop(r.attempt, None)
    mode = "idle"
    progressing = False
    if running:
        last = running[max(running)]
        mode = last.mode or "idle"
        progressing = last.at <= now
    decisions = [r for r in rows if r.kind == "decision"]
    overhead = (decisions[-1].restart_overhead_s or 0.0) if decisions else 0.0
    done = (progress_s(job, rows, now, checkpoint_dirs) if not job.status.is_terminal
            else job.deadline.work_s)
    left = max(0.0, job.deadline.work_s - done)
    if job.status.is_terminal:
        finish = None
    elif progressing:
        finish = now + left
    elif running:
        finish = max(now, running[max(running)].at) + left
    else:
        finish = now + overhead + left
    return DeadlineStatus(job.deadline.deadline_at, mode if not job.status.is_terminal else "idle",
                          decisions[-1].mode if decisions else None,
                          round(done / job.deadline.work_s, 4) if job.deadline.work_s else 1.0,
                          job.deadline.work_s, finish)
