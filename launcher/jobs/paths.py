"""Where managed-job files live under LAUNCHER_HOME (default ~/.launcher).

    state.db                          the shared state DB (our tables: see store.py)
    managed_jobs/controller.lock      fcntl lock + pid of the running controller
    managed_jobs/controller.log       the controller's own log
    managed_jobs/<id>/attempt-<n>.log each attempt's job output, kept after its cluster is gone
    managed_jobs/<id>/attempt-<n>.run-<k>.log  gang run k's output when nodes were replaced
    checkpoints/<id>/                 LAUNCHER_CHECKPOINT_DIR of managed job <id> (local cloud)
"""

from __future__ import annotations

from pathlib import Path


def launcher_home() -> Path:
    """LAUNCHER_HOME, or ~/.launcher. Not created here."""
    from launcher.config.settings import launcher_home as home

    return home()


def state_db_path() -> Path:
    return launcher_home() / "state.db"


def jobs_dir() -> Path:
    return launcher_home() / "managed_jobs"


def job_dir(job_id: int) -> Path:
    return jobs_dir() / str(job_id)


def attempt_log_path(job_id: int, attempt: int) -> Path:
    return job_dir(job_id) / f"attempt-{attempt}.log"


def gang_run_log_path(job_id: int, attempt: int, run: int) -> Path:
    """The saved output of an earlier gang run of an attempt (before an in-place
    replacement restarted the gang); the last run's output is `attempt_log_path`."""
    return job_dir(job_id) / f"attempt-{attempt}.run-{run}.log"


def controller_lock_path() -> Path:
    return jobs_dir() / "controller.lock"


def controller_log_path() -> Path:
    return jobs_dir() / "controller.log"


def local_checkpoint_dir(job_id: int) -> Path:
    """The durable checkpoint dir of a managed job whose nodes are on this machine."""
    return launcher_home() / "checkpoints" / str(job_id)
