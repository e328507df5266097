"""What happens to a DEADLINE job's gangs, written to its deadline log (deadline_store.py):
a gang running, a gang stopped, a spot launch refused. The driver's observation is
rebuilt from these rows only (see deadline.py), so they are written as things happen,
before anything is acted on.
"""

from __future__ import annotations

from launcher.jobs import deadline_store as dl
from launcher.jobs.controller.clock import DeadlineClock
from launcher.jobs.store import AttemptRow, JobRow, JobStore

# The markets (and IDLE: no gang) a DEADLINE job's policy chooses between.
SPOT, ON_DEMAND, IDLE = "spot", "on_demand", "idle"


class DeadlineEvents:
    """Writes a DEADLINE job's gang events, stamped by `clock`."""

    def __init__(self, store: JobStore, clock: DeadlineClock) -> None:
        self.store = store
        self.clock = clock

    def running(self, job: JobRow, att: AttemptRow) -> None:
        """Log that attempt `att`'s gang runs (once): its progress starts at the later of now
        and the deciding decision + the overhead (see deadline.py's docstring); a spot gang
        that took over from an on-demand one continues its progress."""
        rows = dl.log_rows(self.store, job.id)
        if any(r.kind == "running" and r.attempt == att.attempt for r in rows):
            return
        now = self.clock.now()
        start = now
        took_over = [r for r in rows if r.kind == "stopped" and r.reason == "switched to spot"]
        if att.cause == "switch" and took_over:
            start = took_over[-1].at  # continues the on-demand gang's progress
        else:
            decided = [r for r in rows if r.kind == "decision" and r.attempt == att.attempt]
            if decided:
                start = max(now, decided[-1].at + (decided[-1].restart_overhead_s or 0.0))
        dl.add_log(self.store, job.id, start, "running", f"attempt {att.attempt} up",
                   mode=att.market, attempt=att.attempt)

    def stopped(self, job: JobRow, att: AttemptRow, why: str, at: float | None = None) -> None:
        """Log that attempt `att`'s gang stopped making progress (once per attempt; only a
        gang logged running)."""
        rows = dl.log_rows(self.store, job.id)
        if not any(r.kind == "running" and r.attempt == att.attempt for r in rows):
            return
        if any(r.kind == "stopped" and r.attempt == att.attempt for r in rows):
            return
        dl.add_log(self.store, job.id, self.clock.now() if at is None else at, "stopped", why,
                   mode=att.market, attempt=att.attempt)

    def refused(self, job: JobRow, att: AttemptRow, reason: str) -> None:
        """Log that a spot launch for attempt `att` was refused (spot is down)."""
        dl.add_log(self.store, job.id, self.clock.now(), "refused", reason[:500], mode=SPOT,
                   attempt=att.attempt)

    def on_decided(self, job: JobRow, att: AttemptRow, outcome: str, reason: str) -> None:
        """An outcome of `att` is about to be recorded: its gang stops (DEADLINE jobs)."""
        if job.deadline is not None:
            self.stopped(job, att, f"{outcome}: {reason}"[:500])
