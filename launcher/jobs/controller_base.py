"""The controller's plumbing: its state, thread pools, crash points, cancel events.

`Controller` (controller.py) is `ControllerBase` + `FinishMixin` (outcomes, drains,
teardown, logs: controller_finish.py) + `RecoveryMixin` (preemption handling and
in-place node replacement: controller_recovery.py) + the per-job driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from launcher.jobs.cluster_ops import ClusterOps
from launcher.jobs.controller_types import ControllerConfig
from launcher.jobs.crash import CrashPoints, SimulatedCrash
from launcher.jobs.log_sync import LogSync
from launcher.jobs.store import JobRow, JobStore

if TYPE_CHECKING:
    from launcher.task import Task

log = logging.getLogger("launcher.jobs.controller")
T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside a job's driver once the user asked to cancel the job."""


class ControllerBase:
    """State and plumbing shared by the controller's parts."""

    def __init__(
        self,
        ops: ClusterOps,
        task_loader: Callable[[JobRow], Task],
        *,
        db_path: Path | str | None = None,
        config: ControllerConfig | None = None,
        crash: CrashPoints | None = None,
    ) -> None:
        self.ops = ops
        self.task_loader = task_loader
        self.cfg = config or ControllerConfig()
        self.crash = crash or CrashPoints()
        self.store = JobStore(db_path)
        self._launch_pool = ThreadPoolExecutor(self.cfg.launch_workers, "mj-launch")
        self._watch_pool = ThreadPoolExecutor(self.cfg.watch_workers, "mj-watch")
        # Incremental log syncs: their own pool, so a dead head never takes a status slot.
        self._log_pool = ThreadPoolExecutor(self.cfg.watch_workers, "mj-logs")
        self._log_syncs: dict[tuple[int, int], LogSync] = {}
        self._drivers: dict[int, asyncio.Task[None]] = {}
        self._driver_failures: dict[int, int] = {}
        self._cancel_events: dict[int, asyncio.Event] = {}
        self._cancel_flags: dict[int, threading.Event] = {}
        self._drains: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._finalizing: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._crashed: BaseException | None = None
        self.stats_polls = 0
        # Per job: when each step of the current recovery happened (epoch s), for the
        # breakdown in the RUNNING event (in memory: a restart loses only the breakdown).
        self._marks: dict[int, dict[str, float]] = {}
        # DEADLINE jobs: (job, attempt) -> the tick its watch last found nothing to do at
        # (in memory, to skip re-reading the deadline log on every poll within a tick).
        self._deadline_quiet: dict[tuple[int, int], int] = {}

    # ---- plumbing -----------------------------------------------------------------

    async def _launch_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._launch_pool, fn, *args)

    async def _watch_call(self, fn: Callable[..., T], *args: Any) -> T:
        self.stats_polls += 1
        return await asyncio.get_running_loop().run_in_executor(self._watch_pool, fn, *args)

    def _hit(self, point: str) -> None:
        try:
            self.crash.hit(point)
        except SimulatedCrash as exc:
            self._crashed = exc
            raise

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        t: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._background.add(t)
        t.add_done_callback(self._background_done)
        return t

    def _background_done(self, t: asyncio.Task[Any]) -> None:
        self._background.discard(t)
        if t.cancelled():
            return
        exc = t.exception()
        if isinstance(exc, SimulatedCrash):
            self._crashed = exc
        elif exc is not None:
            log.error("background task failed: %r", exc, exc_info=exc)

    def _cancel_event(self, job_id: int) -> asyncio.Event:
        ev = self._cancel_events.get(job_id)
        if ev is None:
            ev = self._cancel_events[job_id] = asyncio.Event()
            self._cancel_flags[job_id] = threading.Event()
        return ev

    async def _sleep_or_cancel(self, job_id: int, seconds: float) -> None:
        """Sleep; raise Cancelled as soon as the job's cancel is requested."""
        ev = self._cancel_event(job_id)
        if ev.is_set():
            raise Cancelled
        try:
            await asyncio.wait_for(ev.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return
        raise Cancelled

    async def _call_cancellable(self, job_id: int, cluster_name: str, what: str,
                                fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` (a launch-like call on `cluster_name`) in a launch worker, raced
        against the job's cancel event: a cancel aborts the launch (`abort_launch`
        terminates the cluster's nodes under it; the request's `before_run` refuses to
        submit) and raises Cancelled without waiting for the call to notice."""
        fut = asyncio.ensure_future(self._launch_call(fn, *args))
        cancelled = asyncio.ensure_future(self._cancel_event(job_id).wait())
        try:
            await asyncio.wait({fut, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not fut.done():
            log.info("job %d: cancelled during %s: aborting %s", job_id, what, cluster_name)
            await self._launch_call(self.ops.abort_launch, cluster_name)
            with contextlib.suppress(Exception):
                await fut
            raise Cancelled
        return fut.result()

    def _mark(self, job_id: int, step: str, at: float | None = None) -> None:
        """Stamp a step of the job's current recovery ("detected" starts a new one)."""
        if step == "detected":
            self._marks[job_id] = {}
        self._marks.setdefault(job_id, {})[step] = time.time() if at is None else at

    def _recovery_breakdown(self, job_id: int, lost_at: float, now: float) -> str:
        """"detect 0.3 s, decide 0.1 s, ..." for the steps stamped since the loss."""
        marks = self._marks.pop(job_id, {})
        steps = [("detect", "detected"), ("decide", "decided"), ("old cluster", "old_gone"),
                 ("record", "attempt"), ("provision", "provisioned"),
                 ("setup+submit", "submitted")]
        out, prev = [], lost_at
        for label, key in steps:
            t = marks.get(key)
            if t is None:
                continue
            out.append(f"{label} {max(0.0, t - prev):.1f} s")
            prev = t
        out.append(f"to running {max(0.0, now - prev):.1f} s")
        return ", ".join(out)

    def _poll_cap(self) -> float:
        n = max(1, len(self._drivers))
        return max(self.cfg.poll_max_s, 2.0 * n / self.cfg.max_polls_per_s)
