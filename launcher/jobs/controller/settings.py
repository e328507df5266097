"""The controller's settings, and the deterministic per-attempt cluster names."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.jobs.controller.clock import DeadlineClock
from launcher.jobs.recovery import DEFAULT_COOLDOWN_S


@dataclass
class ControllerConfig:
    poll_min_s: float = 0.5  # watch interval right after a change
    poll_max_s: float = 2.0  # ... growing to this while nothing happens
    max_polls_per_s: float = 100.0  # head-agent status checks per second, across all jobs
    # The cloud's view of every running attempt is read this often, in one query per
    # cloud and region (poller.py): a preemption is seen within about this long, at any
    # number of jobs.
    cloud_poll_s: float = 1.0
    scan_s: float = 0.3  # how often the DB is scanned for new jobs and cancels
    idle_exit_s: float | None = 30.0  # exit after this long with no live job
    launch_workers: int = 8  # launches, teardowns and log fetches in flight at once
    # Of those, provisioning launches at once (config `jobs.controller.max_parallel_launches`)
    max_parallel_launches: int = 8
    watch_workers: int = 8  # head-agent checks and cloud queries in flight at once
    # Launches on a cloud that answered "rate limited" wait this long (doubling while it
    # goes on, to `rate_limit_backoff_max_s`; the cloud's own hint when longer).
    rate_limit_backoff_s: float = 2.0
    rate_limit_backoff_max_s: float = 120.0
    cooldown_s: float = DEFAULT_COOLDOWN_S
    failure_confirm_s: float = 1.0  # look at the cloud again before blaming user code
    max_drain_s: float = 120.0  # cap on waiting for a noticed node to finish its checkpoint
    backoff_min_s: float = 1.0
    backoff_max_s: float = 60.0
    max_no_capacity_retries: int = 30  # during recovery, before FAILED_NO_RESOURCE
    max_launch_errors: int = 3  # transient launch errors in a row before FAILED
    cluster_prefix: str = "mj"
    driver_restarts: int = 3  # a driver crashing with a bug is restarted this often
    # A head unreachable this long while the cloud's view never confirms a loss (e.g. an
    # SSH host cut off the network but answering TCP intermittently) is recovered anyway.
    head_unreachable_limit_s: float = 600.0
    unreachable_poll_max_s: float = 15.0  # the watch interval grows to this meanwhile
    # An attempt's log is fetched this many times at most (waiting log_fetch_backoff_s,
    # doubling, between tries) before its cluster is taken down without it.
    log_fetch_tries: int = 4
    # How long the last look at a lost attempt's job record may take (a vanished head
    # does not answer; see Watcher.ended_first).
    last_look_s: float = 5.0
    log_fetch_backoff_s: float = 1.0
    # The running attempt's new output is pulled into its log file this often (in the
    # background of the watch), so a node lost without notice loses at most this much.
    log_sync_s: float = 2.0
    # DEADLINE jobs: the policy decides at least this often (config `jobs.deadline_tick`),
    # on this clock (None: real time; tests inject one they drive by hand).
    deadline_tick_s: float = 60.0
    deadline_clock: DeadlineClock | None = None


def cluster_name_for(prefix: str, job_id: int, attempt: int) -> str:
    """Deterministic per-attempt cluster name (recorded before provisioning)."""
    return f"{prefix}-{job_id}-{attempt}"
