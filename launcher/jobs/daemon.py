"""The controller process: `python -m launcher.jobs.daemon` (started by `jobs launch`).

Only one runs per LAUNCHER_HOME: it holds an exclusive `fcntl.flock` on
managed_jobs/controller.lock (released by the kernel however it dies, so a
`kill -9` never leaves a stale lock) and writes its pid into that file.
SIGTERM stops it gracefully: jobs keep running on their clusters and the next
controller picks them up from the DB. It exits by itself after
`idle_exit_s` with no live managed job.

Settings (environment, for tests and benchmarks; defaults in ControllerConfig):
LAUNCHER_JOBS_POLL_MIN_S, LAUNCHER_JOBS_POLL_MAX_S, LAUNCHER_JOBS_IDLE_EXIT_S,
LAUNCHER_JOBS_LAUNCH_WORKERS, LAUNCHER_JOBS_WATCH_WORKERS, LAUNCHER_JOBS_CONFIRM_S,
LAUNCHER_JOBS_COOLDOWN_S, LAUNCHER_JOBS_MAX_POLLS_PER_S, LAUNCHER_JOBS_HEAD_UNREACHABLE_S,
LAUNCHER_JOBS_NO_CAPACITY_RETRIES, LAUNCHER_JOBS_BACKOFF_MAX_S, LAUNCHER_JOBS_LOG_SYNC_S,
LAUNCHER_JOBS_DEADLINE_TICK_S (over the config's `jobs.deadline_tick`),
LAUNCHER_JOBS_MAX_PARALLEL_LAUNCHES, LAUNCHER_JOBS_CLOUD_POLL_S (over the config's
`jobs.controller` section: max_parallel_launches, agent_check_workers -> watch_workers,
cloud_poll_interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import IO

from launcher.jobs import paths
from launcher.jobs.controller import Controller, ControllerConfig
from launcher.jobs.store import JobRow, JobStore

_ENV = {
    "poll_min_s": "LAUNCHER_JOBS_POLL_MIN_S",
    "poll_max_s": "LAUNCHER_JOBS_POLL_MAX_S",
    "idle_exit_s": "LAUNCHER_JOBS_IDLE_EXIT_S",
    "launch_workers": "LAUNCHER_JOBS_LAUNCH_WORKERS",
    "watch_workers": "LAUNCHER_JOBS_WATCH_WORKERS",
    "failure_confirm_s": "LAUNCHER_JOBS_CONFIRM_S",
    "cooldown_s": "LAUNCHER_JOBS_COOLDOWN_S",
    "max_polls_per_s": "LAUNCHER_JOBS_MAX_POLLS_PER_S",
    "head_unreachable_limit_s": "LAUNCHER_JOBS_HEAD_UNREACHABLE_S",
    "max_no_capacity_retries": "LAUNCHER_JOBS_NO_CAPACITY_RETRIES",
    "backoff_max_s": "LAUNCHER_JOBS_BACKOFF_MAX_S",
    "log_sync_s": "LAUNCHER_JOBS_LOG_SYNC_S",
    "deadline_tick_s": "LAUNCHER_JOBS_DEADLINE_TICK_S",
    "max_parallel_launches": "LAUNCHER_JOBS_MAX_PARALLEL_LAUNCHES",
    "cloud_poll_s": "LAUNCHER_JOBS_CLOUD_POLL_S",
}


def config_from_env() -> ControllerConfig:
    """ControllerConfig from the config file's `jobs:` section, then the environment."""
    cfg = ControllerConfig()
    with contextlib.suppress(Exception):  # a broken config file is reported where it is used
        from launcher.config.settings import load_config

        jobs = load_config().jobs
        if jobs.deadline_tick is not None:
            cfg.deadline_tick_s = jobs.deadline_tick
        if jobs.max_parallel_launches is not None:
            cfg.max_parallel_launches = jobs.max_parallel_launches
        if jobs.agent_check_workers is not None:
            cfg.watch_workers = jobs.agent_check_workers
        if jobs.cloud_poll_interval is not None:
            cfg.cloud_poll_s = jobs.cloud_poll_interval
    types = {f.name: f.type for f in fields(ControllerConfig)}
    for attr, var in _ENV.items():
        raw = os.environ.get(var)
        if raw is None or raw == "":
            continue
        kind = types[attr]
        value: object = int(raw) if kind == "int" else float(raw)
        setattr(cfg, attr, value)
    return cfg


def load_task(job: JobRow, store: JobStore | None = None) -> object:
    """The job's Task, from the JSON (YAML-shaped) stored at submission and its secret
    values (kept apart, see job_secrets.py). Raises LauncherError when the values of a
    secret are gone (the job cannot be relaunched as submitted)."""
    from launcher.errors import LauncherError
    from launcher.task.model import Task

    data = json.loads(job.task_yaml)
    wanted = [k for k, v in (data.get("secrets") or {}).items() if v is None]
    values: dict[str, str] = {}
    if wanted:
        own = store if store is not None else JobStore()
        try:
            values = own.secrets(job.id) or {}
        finally:
            if store is None:
                own.close()
        missing = [k for k in wanted if k not in values]
        if missing:
            raise LauncherError(
                f"The value of secret {missing[0]!r} of managed job {job.id} is no longer "
                "stored (its secrets file is gone); cancel the job and submit it again."
            )
    return Task.from_dict(data, source=f"managed job {job.id}", secret_overrides=values)


@dataclass(frozen=True)
class ControllerInfo:
    running: bool
    pid: int | None
    lock_path: str
    log_path: str


def _read_pid(f: IO[str]) -> int | None:
    f.seek(0)
    text = f.read().strip()
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def probe() -> ControllerInfo:
    """Is a controller running (someone holds the lock)? Never blocks."""
    lock = paths.controller_lock_path()
    info = ControllerInfo(False, None, str(lock), str(paths.controller_log_path()))
    if not lock.exists():
        return info
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return ControllerInfo(True, _read_pid(f), info.lock_path, info.log_path)
        fcntl.flock(f, fcntl.LOCK_UN)
    return info


@contextlib.contextmanager
def hold_lock() -> Iterator[bool]:
    """Try to take the controller lock; yields whether we got it."""
    lock = paths.controller_lock_path()
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> int:
    from launcher.state import files as state_files

    state_files.private_umask()  # its logs and the local nodes' files stay private
    state_files.secure_home()
    paths.jobs_dir().mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        handlers=[logging.FileHandler(paths.controller_log_path())],
    )
    log = logging.getLogger("launcher.jobs.controller")
    _dump_stacks_on_sigusr1()
    from launcher.jobs.cluster_ops import RealClusterOps

    while True:
        with hold_lock() as got:
            if not got:
                log.info("another controller holds the lock: exiting (pid %d)", os.getpid())
                return 0
            log.info("controller pid %d", os.getpid())
            store = JobStore()
            try:
                for jid in store.forget_ended_secrets():
                    log.info("job %d: deleted the secrets file it left behind", jid)
            finally:
                store.close()
            stopped = _run_once(RealClusterOps())
        if stopped:
            return 0
        # Idle exit: a job submitted while we were letting go would find the lock
        # still held and not start a controller; look once more after releasing.
        store = JobStore()
        try:
            if not store.live_job_ids():
                return 0
        finally:
            store.close()


_STACKS_FILE: list[IO[str]] = []  # kept open: faulthandler writes to its descriptor


def _dump_stacks_on_sigusr1() -> None:
    """SIGUSR1 appends every thread's stack to controller.log (what a stuck
    controller is waiting on); `jobs_controller_stop` sends it before giving up."""
    import faulthandler

    f = open(paths.controller_log_path(), "a")  # noqa: SIM115 - lives as long as the process
    _STACKS_FILE.append(f)
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)


def _run_once(ops: object) -> bool:
    """Run the controller until idle or SIGTERM. True when stopped by a signal."""
    stop_requested = False

    async def runner() -> None:
        nonlocal stop_requested
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            nonlocal stop_requested
            stop_requested = True
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        ctrl = Controller(ops, load_task, config=config_from_env())  # type: ignore[arg-type]
        await ctrl.run(stop)

    asyncio.run(runner())
    return stop_requested


if __name__ == "__main__":
    sys.exit(main())
