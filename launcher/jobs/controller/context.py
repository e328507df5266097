"""What every part of the controller shares, passed to each explicitly: the store, the
cluster ops, the settings, the crash points, the worker pools, the background tasks,
the per-job cancel signals (`CancelSignals`) and the recovery's step times
(`RecoverySteps`).

Blocking calls (cloud, agent, teardown) run in bounded thread pools: one for
launches/teardowns (slow; how many provision at once is the launch gate's, `launches`),
one for head-agent checks (fast), so a burst of relaunches never delays preemption
detection; incremental log syncs have their own, so a dead head never takes a status
slot, and so does the batched cloud poll (`poller`), so it never queues behind agent checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from launcher.jobs.controller.launch_gate import LaunchGate
from launcher.jobs.controller.poller import CloudPoller
from launcher.jobs.controller.settings import ControllerConfig
from launcher.jobs.crash import CrashPoints, SimulatedCrash
from launcher.jobs.ops_interface import ClusterOps
from launcher.jobs.store import JobRow, JobStore
from launcher.state.store import STORAGE_ERRORS

if TYPE_CHECKING:
    from launcher.task.model import Task

log = logging.getLogger("launcher.jobs.controller")
T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside a job's driver once the user asked to cancel the job."""


class CancelSignals:
    """Per job: an asyncio.Event (what the job's coroutines wait on) and a threading.Event
    (what launch workers poll: a `before_run` refuses to submit once it is set)."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}
        self._flags: dict[int, threading.Event] = {}

    def event(self, job_id: int) -> asyncio.Event:
        ev = self._events.get(job_id)
        if ev is None:
            ev = self._events[job_id] = asyncio.Event()
            self._flags[job_id] = threading.Event()
        return ev

    def flag(self, job_id: int) -> threading.Event:
        self.event(job_id)
        return self._flags[job_id]

    def request(self, job_id: int) -> None:
        """The user asked to cancel the job: wake its coroutines, stop its workers."""
        self.event(job_id).set()
        self._flags[job_id].set()

    def requested(self, job_id: int) -> bool:
        return self.event(job_id).is_set()

    def forget(self, job_id: int) -> None:
        self._events.pop(job_id, None)
        self._flags.pop(job_id, None)

    async def sleep(self, job_id: int, seconds: float) -> None:
        """Sleep; raise Cancelled as soon as the job's cancel is requested."""
        ev = self.event(job_id)
        if ev.is_set():
            raise Cancelled
        try:
            await asyncio.wait_for(ev.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return
        raise Cancelled


class RecoverySteps:
    """Per job: when each step of the current recovery happened (epoch s), for the
    breakdown in the RUNNING event (in memory: a restart loses only the breakdown)."""

    STEPS = (("detect", "detected"), ("decide", "decided"), ("old cluster", "old_gone"),
             ("record", "attempt"), ("provision", "provisioned"),
             ("setup+submit", "submitted"))

    def __init__(self) -> None:
        self._marks: dict[int, dict[str, float]] = {}

    def mark(self, job_id: int, step: str, at: float | None = None) -> None:
        """Stamp a step of the job's current recovery ("detected" starts a new one)."""
        if step == "detected":
            self._marks[job_id] = {}
        self._marks.setdefault(job_id, {})[step] = time.time() if at is None else at

    def detected_once(self, job_id: int) -> None:
        """Stamp "detected" now unless this recovery has stamped it already."""
        self._marks.setdefault(job_id, {}).setdefault("detected", time.time())

    def forget(self, job_id: int) -> None:
        self._marks.pop(job_id, None)

    def breakdown(self, job_id: int, lost_at: float, now: float) -> str:
        """"detect 0.3 s, decide 0.1 s, ..." for the steps stamped since the loss (and
        forget them)."""
        marks = self._marks.pop(job_id, {})
        out, prev = [], lost_at
        for label, key in self.STEPS:
            t = marks.get(key)
            if t is None:
                continue
            out.append(f"{label} {max(0.0, t - prev):.1f} s")
            prev = t
        out.append(f"to running {max(0.0, now - prev):.1f} s")
        return ", ".join(out)


class Context:
    """The controller's shared plumbing (one per controller; see the module docstring).

    `crashed` is set once a crash point fired (tests: SimulatedCrash) anywhere: the loop
    then stops as a dead process would. `jobs_driven` is kept by the loop (the number of
    job drivers): the status-query budget is shared among them (`poll_cap`)."""

    def __init__(self, ops: ClusterOps, task_loader: Callable[[JobRow], Task],
                 store: JobStore, cfg: ControllerConfig, crash: CrashPoints) -> None:
        self.ops = ops
        self.task_loader = task_loader
        self.store = store
        self.cfg = cfg
        self.crash = crash
        self.cancels = CancelSignals()
        self.crashed: BaseException | None = None
        self.background: set[asyncio.Task[Any]] = set()
        self.jobs_driven = 0
        self.polls = 0
        self._launch_pool = ThreadPoolExecutor(
            max(cfg.launch_workers, cfg.max_parallel_launches), "mj-launch")
        self._watch_pool = ThreadPoolExecutor(cfg.watch_workers, "mj-watch")
        self._log_pool = ThreadPoolExecutor(cfg.watch_workers, "mj-logs")
        # the batched cloud poll has its own workers: it never queues behind agent checks
        self._poll_pool = ThreadPoolExecutor(2, "mj-poll")
        self.poller = CloudPoller(ops, cfg, self.poll_call)
        self.launches = LaunchGate(cfg)

    # ---- worker pools --------------------------------------------------------------

    async def launch_call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a launch worker (launches, teardowns, log fetches)."""
        return await asyncio.get_running_loop().run_in_executor(self._launch_pool, fn, *args)

    async def watch_call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a status worker (status and cloud-view queries)."""
        self.polls += 1
        return await asyncio.get_running_loop().run_in_executor(self._watch_pool, fn, *args)

    async def poll_call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a cloud-poll worker (poller.py's batched queries)."""
        self.polls += 1
        return await asyncio.get_running_loop().run_in_executor(self._poll_pool, fn, *args)

    def log_call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` in a log-sync worker; the future is the caller's to await or not."""
        return asyncio.get_running_loop().run_in_executor(self._log_pool, fn, *args)

    def shutdown(self, *, crashed: bool, before_close: Callable[[], None] | None = None) -> None:
        """Stop the pools (waiting for launches and queries unless crashed), call
        `before_close` (its store errors are logged, not raised) and close the store."""
        self._launch_pool.shutdown(wait=not crashed, cancel_futures=True)
        self._log_pool.shutdown(wait=False, cancel_futures=True)
        self._poll_pool.shutdown(wait=False, cancel_futures=True)
        self._watch_pool.shutdown(wait=not crashed, cancel_futures=True)
        if before_close is not None:
            try:
                before_close()
            except STORAGE_ERRORS as exc:
                log.warning("on shutdown: %s", exc)
        self.store.close()

    def poll_cap(self) -> float:
        """The cap of a watch's interval between head-agent checks: the budget of checks
        (`max_polls_per_s`) shared by every job. Only a run's end waits for it: losses and
        notices come from the batched cloud poll (poller.py) at any number of jobs."""
        n = max(1, self.jobs_driven)
        return max(self.cfg.poll_max_s, n / self.cfg.max_polls_per_s)

    def unreachable_cap(self) -> float:
        """The watch interval's cap while the head does not answer."""
        return max(self.poll_cap(), self.cfg.unreachable_poll_max_s)

    # ---- crash points and background tasks ---------------------------------------------

    def hit(self, point: str) -> None:
        """Mark reaching crash point `point` (see crash.py)."""
        try:
            self.crash.hit(point)
        except SimulatedCrash as exc:
            self.crashed = exc
            raise

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `coro` in the background (cancelled when the loop stops; its failure is
        logged, a crash point in it stops the loop)."""
        t: asyncio.Task[T] = asyncio.ensure_future(coro)
        self.background.add(t)
        t.add_done_callback(self._background_done)
        return t

    def _background_done(self, t: asyncio.Task[Any]) -> None:
        self.background.discard(t)
        if t.cancelled():
            return
        exc = t.exception()
        if isinstance(exc, SimulatedCrash):
            self.crashed = exc
        elif exc is not None:
            log.error("background task failed: %r", exc, exc_info=exc)

    # ---- cancellable launches -----------------------------------------------------------

    async def call_cancellable(self, job_id: int, cluster_name: str, what: str,
                               fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` (a launch-like call on `cluster_name`) in a launch worker, raced
        against the job's cancel event: a cancel aborts the launch (`abort_launch`
        terminates the cluster's nodes under it; the request's `before_run` refuses to
        submit) and raises Cancelled without waiting for the call to notice."""
        fut = asyncio.ensure_future(self.launch_call(fn, *args))
        cancelled = asyncio.ensure_future(self.cancels.event(job_id).wait())
        try:
            await asyncio.wait({fut, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not fut.done():
            log.info("job %d: cancelled during %s: aborting %s", job_id, what, cluster_name)
            await self.launch_call(self.ops.abort_launch, cluster_name)
            with contextlib.suppress(Exception):
                await fut
            raise Cancelled
        return fut.result()
