"""The controller: one asyncio loop driving every live managed job through its parts
(see the package docstring for the parts and the crash-safety rules they keep).

The loop scans the DB for live jobs and cancel requests, runs one driver task per job,
restarts a driver that failed (a bug) from the DB state, and exits when idle. A job's
driver reads the job's rows and takes one step: apply an outcome not yet applied, start
a pipeline stage, launch an attempt, or watch the running one, until the job ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.jobs.controller.clock import WALL
from launcher.jobs.controller.context import Cancelled, Context, RecoverySteps
from launcher.jobs.controller.deadline import DeadlineDriver
from launcher.jobs.controller.deadline_events import DeadlineEvents
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.launch import AttemptLauncher
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions
from launcher.jobs.controller.placement import LaunchRequests
from launcher.jobs.controller.preemption import Recovery
from launcher.jobs.controller.running import RunningRecorder
from launcher.jobs.controller.settings import ControllerConfig
from launcher.jobs.controller.watch import Watcher
from launcher.jobs.crash import CrashPoints, SimulatedCrash
from launcher.jobs.ops_interface import ClusterOps
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, JobRow, JobStore, LeaseLostError
from launcher.state.store import StoreUnavailableError

if TYPE_CHECKING:
    from launcher.jobs.leases import Leases
    from launcher.task.model import Task

log = logging.getLogger("launcher.jobs.controller")


class Controller:
    """Drives all live managed jobs. Use `await run(stop_event)` in one event loop.

    The parts it is composed of are built here, each given what it uses; they share
    only `ctx` (the store, the ops, the pools, the cancel signals) and `steps`."""

    def __init__(
        self,
        ops: ClusterOps,
        task_loader: Callable[[JobRow], Task],
        *,
        db_path: Path | str | None = None,
        config: ControllerConfig | None = None,
        crash: CrashPoints | None = None,
    ) -> None:
        cfg = config or ControllerConfig()
        ctx = Context(ops, task_loader, JobStore(db_path), cfg, crash or CrashPoints())
        self.ctx = ctx
        self.steps = RecoverySteps()
        self.deadline_events = DeadlineEvents(ctx.store, cfg.deadline_clock or WALL)
        self.decisions = Decisions(ctx.store, on_decided=self.deadline_events.on_decided)
        self.loss = LossDetector(ctx)
        self.logs = AttemptLogs(ctx, self.loss)
        self.finisher = Finisher(ctx, self.logs, self.loss)
        self.requests = LaunchRequests(ctx, self.finisher, self.logs, self.steps)
        self.running = RunningRecorder(ctx, self.steps, self.deadline_events)
        self.recovery = Recovery(ctx, self.decisions, self.requests, self.logs, self.steps)
        self.deadline = DeadlineDriver(ctx, self.deadline_events.clock, self.deadline_events,
                                       self.decisions, self.finisher, self.requests,
                                       self.running, self.loss)
        self.launcher = AttemptLauncher(ctx, self.requests, self.decisions, self.recovery,
                                        self.loss, self.finisher, self.running, self.deadline,
                                        self.deadline_events, self.steps)
        self.watcher = Watcher(ctx, self.loss, self.logs, self.decisions, self.recovery,
                               self.deadline, self.steps)
        self._drivers: dict[int, asyncio.Task[None]] = {}
        self._driver_failures: dict[int, int] = {}
        # Server replicas on one database (launcher/jobs/leases.py): only leased jobs are
        # driven, and the store's fence refuses writes on a job whose lease was lost.
        self.leases: Leases | None = None

    @property
    def store(self) -> JobStore:
        return self.ctx.store

    @property
    def ops(self) -> ClusterOps:
        return self.ctx.ops

    @property
    def cfg(self) -> ControllerConfig:
        return self.ctx.cfg

    @property
    def crash(self) -> CrashPoints:
        return self.ctx.crash

    @property
    def stats_polls(self) -> int:
        """Status and cloud-view queries made so far."""
        return self.ctx.polls

    # ---- main loop ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set, or until idle for `idle_exit_s`. Re-raises a
        SimulatedCrash (tests) after abandoning everything, like a dead process."""
        ctx, cfg = self.ctx, self.ctx.cfg
        stop = stop or asyncio.Event()
        log.info("controller started")
        self._startup_sweep()
        idle_since: float | None = None
        try:
            while not stop.is_set():
                if ctx.crashed is not None:
                    raise ctx.crashed
                scanned = self._scan()
                if scanned is None:  # the state DB is away: try again a scan later
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=cfg.scan_s)
                    continue
                live, cancels = scanned
                for jid in live:
                    if jid not in self._drivers:
                        self._start_driver(jid)
                for jid in cancels:
                    if jid in self._drivers:
                        ctx.cancels.request(jid)
                self._reap_drivers()
                if live or self._drivers or ctx.background:
                    idle_since = None
                elif cfg.idle_exit_s is not None:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= cfg.idle_exit_s:
                        log.info("no live managed job for %.0f s: exiting", cfg.idle_exit_s)
                        break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=cfg.scan_s)
        finally:
            crashed = ctx.crashed is not None
            for t in [*self._drivers.values(), *ctx.background]:
                t.cancel()
            if not crashed:
                await asyncio.gather(*self._drivers.values(), *ctx.background,
                                     return_exceptions=True)
            await ctx.poller.stop()
            # A clean stop gives the leases back once no launch of ours is in flight, so
            # the other replicas take the jobs at once rather than after the expiry.
            leases = self.leases
            ctx.shutdown(crashed=crashed,
                         before_close=None if crashed or leases is None else leases.close)

    def _scan(self) -> tuple[list[int], set[int]] | None:
        """The live jobs to drive (with leases: those held) and the cancels asked for;
        None while the state DB cannot be reached (a database server's outage)."""
        try:
            live = self.ctx.store.live_job_ids()
            if self.leases is not None:
                live = self._leased(live)
            return live, self.ctx.store.cancel_requested_ids()
        except StoreUnavailableError as exc:
            log.warning("the state DB is unreachable: %s", exc)
            return None

    def _leased(self, live: list[int]) -> list[int]:
        """Renew and claim leases; stop the drivers of jobs whose lease was lost (their
        new holder resumes them from the DB). Returns the live jobs held."""
        assert self.leases is not None
        held = self.leases.refresh()
        for jid, task in self._drivers.items():
            if jid not in held:
                task.cancel()
        return [j for j in live if j in held]

    def _start_driver(self, job_id: int) -> None:
        self.ctx.cancels.event(job_id)
        self._drivers[job_id] = asyncio.ensure_future(self._drive(job_id))
        self.ctx.jobs_driven = len(self._drivers)

    def _reap_drivers(self) -> None:
        ctx = self.ctx
        for jid, t in list(self._drivers.items()):
            if not t.done():
                continue
            del self._drivers[jid]
            ctx.jobs_driven = len(self._drivers)
            exc = None if t.cancelled() else t.exception()
            if isinstance(exc, SimulatedCrash):
                ctx.crashed = exc
                raise exc
            if exc is None or isinstance(exc, LeaseLostError):  # lost: its new holder goes on
                ctx.cancels.forget(jid)
                continue
            if isinstance(exc, StoreUnavailableError):  # the DB, not the job: next scan
                log.warning("job %d: the state DB is unreachable: %s", jid, exc)
                continue
            n = self._driver_failures.get(jid, 0) + 1
            self._driver_failures[jid] = n
            log.error("job %d: driver error (%d): %r", jid, n, exc, exc_info=exc)
            if n > ctx.cfg.driver_restarts:
                job = ctx.store.job(jid)
                if not job.status.is_terminal:
                    ctx.store.transition(
                        jid, S.FAILED, f"controller error: {type(exc).__name__}: {exc}",
                        ended_at=time.time(), failure_reason=f"controller error: {exc}",
                    )
                    ctx.spawn(self.finisher.teardown_all(jid))
            # else: the next scan restarts the driver from the DB state

    def _startup_sweep(self) -> None:
        """Clean up after a crash: tear down clusters of attempts that can no longer be
        live, and resume the drains of noticed attempts of live jobs.

        The attempts are read before the jobs: other server replicas may be submitting
        and launching meanwhile, and an attempt (or job) newer than the snapshot taken
        first must not be mistaken for one of a job that is gone."""
        store = self.ctx.store
        not_torn_down = store.attempts_not_torn_down()
        last_attempt: dict[int, int] = {}
        for a in store.all_attempts():
            last_attempt[a.job_id] = a.attempt
        live = {j.id: j for j in store.jobs(live_only=True)}
        for a in not_torn_down:
            job = live.get(a.job_id)
            if job is not None and a.attempt == last_attempt.get(a.job_id, a.attempt) and not (
                a.outcome is not None and a.outcome_applied
            ):
                continue  # the job's driver owns its current, undecided attempt
            if job is not None and a.phase == AttemptPhase.RUNNING and a.drain_until:
                self.finisher.ensure_drain(job, a)
                continue
            self.finisher.finalize_bg(a, fetch_logs=a.phase == AttemptPhase.RUNNING)

    # ---- one job ----------------------------------------------------------------------

    async def _drive(self, job_id: int) -> None:
        store = self.ctx.store
        try:
            while True:
                job = store.job(job_id)
                if job.status.is_terminal:
                    return
                if job.cancel_requested or self.ctx.cancels.requested(job_id):
                    raise Cancelled
                attempts = store.attempts(job_id)
                last = attempts[-1] if attempts else None
                if last is not None and last.outcome is not None and not last.outcome_applied:
                    await self.finisher.apply_outcome(job, last)
                elif job.status == S.PENDING:
                    if await self._stage_ready(job):
                        store.transition(job_id, S.STARTING, "picked up by the controller")
                elif job.status in (S.STARTING, S.RECOVERING):
                    await self.launcher.launch(job, attempts)
                elif job.status == S.RUNNING:
                    assert last is not None
                    await self.watcher.watch(job, last)
        except Cancelled:
            await self.finisher.cancel(job_id)

    async def _stage_ready(self, job: JobRow) -> bool:
        """A pipeline stage starts once the stage before it SUCCEEDED. While that stage
        is live, wait (a scan interval; a cancel ends the wait); when it ended any other
        way, this stage is CANCELLED, not run, and False is returned. A plain job: True."""
        if job.after_job_id is None:
            return True
        store = self.ctx.store
        before = store.job(job.after_job_id)
        if before.status == S.SUCCEEDED:
            return True
        if before.status.is_terminal:
            n = (before.stage_index or 0) + 1
            reason = f"not run: stage {n} ({before.name}, job {before.id}) ended {before.status.value}"
            store.transition(job.id, S.CANCELLED, reason, expect=S.PENDING,
                             ended_at=time.time(), failure_reason=reason)
            return False
        await self.ctx.cancels.sleep(job.id, self.ctx.cfg.scan_s)
        return False
