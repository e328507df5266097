"""The managed-jobs controller: one asyncio loop driving every live managed job.

Crash-safety rules (a `kill -9` may hit between any two lines):
1. An attempt's cluster name is written to the DB before the cloud is asked for
   anything, so a restarted controller finds the cluster (adopts it or tears it down).
2. A decision about an attempt (its `outcome`) is written before its side effects
   (log fetch, teardown); the status transition that applies it is written with
   `outcome_applied = 1` in the same transaction. On restart, an outcome not yet
   applied is applied again; side effects are idempotent.
3. A new attempt is created only once the previous one has an outcome, so there
   is never more than one live cluster per job except while a preempted one drains
   after an interruption notice; every attempt not yet torn down is torn down by
   the driver or by the startup sweep.

Blocking calls (cloud, agent, teardown) run in two bounded thread pools: one for
launches/teardowns (slow), one for status queries (fast), so a burst of
relaunches never delays preemption detection.
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

from launcher.jobs import accounting, paths
from launcher.jobs.cluster_ops import (
    AttemptLaunch,
    ClusterOps,
    JobRun,
    LaunchAbortedError,
    LaunchRequest,
    NoCapacityError,
    PermanentLaunchError,
    RunState,
    SetupFailedError,
    TransientOpsError,
    lost_nodes,
)
from launcher.jobs.controller_types import (
    CAUSE_AFTER,
    FINAL_STATUS,
    ControllerConfig,
    Outcome,
    cluster_name_for,
)
from launcher.jobs.crash import CrashPoints, SimulatedCrash
from launcher.jobs.recovery import (
    ExitDecision,
    Where,
    blocks_after_preemption,
    decide_exit,
    placement_tiers,
)
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow, JobStore

if TYPE_CHECKING:
    from launcher.task import Task

log = logging.getLogger("launcher.jobs.controller")
T = TypeVar("T")


class _Cancelled(Exception):
    pass


class Controller:
    """Drives all live managed jobs. Use `await run(stop_event)` in one event loop."""

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
        self._drivers: dict[int, asyncio.Task[None]] = {}
        self._driver_failures: dict[int, int] = {}
        self._cancel_events: dict[int, asyncio.Event] = {}
        self._cancel_flags: dict[int, threading.Event] = {}
        self._drains: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._crashed: BaseException | None = None
        self.stats_polls = 0

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
        """Sleep; raise _Cancelled as soon as the job's cancel is requested."""
        ev = self._cancel_event(job_id)
        if ev.is_set():
            raise _Cancelled
        try:
            await asyncio.wait_for(ev.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return
        raise _Cancelled

    def _poll_cap(self) -> float:
        n = max(1, len(self._drivers))
        return max(self.cfg.poll_max_s, 2.0 * n / self.cfg.max_polls_per_s)

    # ---- main loop ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set, or until idle for `idle_exit_s`. Re-raises a
        SimulatedCrash (tests) after abandoning everything, like a dead process."""
        stop = stop or asyncio.Event()
        log.info("controller started")
        self._startup_sweep()
        idle_since: float | None = None
        try:
            while not stop.is_set():
                if self._crashed is not None:
                    raise self._crashed
                live = self.store.live_job_ids()
                for jid in live:
                    if jid not in self._drivers:
                        self._start_driver(jid)
                for jid in self.store.cancel_requested_ids():
                    if jid in self._drivers:
                        self._cancel_event(jid).set()
                        self._cancel_flags[jid].set()
                self._reap_drivers()
                if live or self._drivers or self._background:
                    idle_since = None
                elif self.cfg.idle_exit_s is not None:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= self.cfg.idle_exit_s:
                        log.info("no live managed job for %.0f s: exiting", self.cfg.idle_exit_s)
                        break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.cfg.scan_s)
        finally:
            crashed = self._crashed is not None
            for t in [*self._drivers.values(), *self._background]:
                t.cancel()
            if not crashed:
                await asyncio.gather(*self._drivers.values(), *self._background,
                                     return_exceptions=True)
            self._launch_pool.shutdown(wait=not crashed, cancel_futures=True)
            self._watch_pool.shutdown(wait=not crashed, cancel_futures=True)
            self.store.close()

    def _start_driver(self, job_id: int) -> None:
        self._cancel_event(job_id)
        self._drivers[job_id] = asyncio.ensure_future(self._drive(job_id))

    def _reap_drivers(self) -> None:
        for jid, t in list(self._drivers.items()):
            if not t.done():
                continue
            del self._drivers[jid]
            exc = None if t.cancelled() else t.exception()
            if isinstance(exc, SimulatedCrash):
                self._crashed = exc
                raise exc
            if exc is None:
                self._cancel_events.pop(jid, None)
                self._cancel_flags.pop(jid, None)
                continue
            n = self._driver_failures.get(jid, 0) + 1
            self._driver_failures[jid] = n
            log.error("job %d: driver error (%d): %r", jid, n, exc, exc_info=exc)
            if n > self.cfg.driver_restarts:
                job = self.store.job(jid)
                if not job.status.is_terminal:
                    self.store.transition(
                        jid, S.FAILED, f"controller error: {type(exc).__name__}: {exc}",
                        ended_at=time.time(), failure_reason=f"controller error: {exc}",
                    )
                    self._spawn(self._teardown_all(jid))
            # else: the next scan restarts the driver from the DB state

    def _startup_sweep(self) -> None:
        """Clean up after a crash: tear down clusters of attempts that can no longer be
        live, and resume the drains of noticed attempts of live jobs."""
        live = {j.id: j for j in self.store.jobs(live_only=True)}
        last_attempt: dict[int, int] = {}
        for a in self.store.all_attempts():
            last_attempt[a.job_id] = a.attempt
        for a in self.store.attempts_not_torn_down():
            job = live.get(a.job_id)
            if job is not None and a.attempt == last_attempt[a.job_id] and not (
                a.outcome is not None and a.outcome_applied
            ):
                continue  # the job's driver owns its current, undecided attempt
            if job is not None and a.phase == AttemptPhase.RUNNING and a.drain_until:
                self._ensure_drain(job, a)
                continue
            self._spawn(self._finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING))

    # ---- one job ----------------------------------------------------------------------

    async def _drive(self, job_id: int) -> None:
        try:
            while True:
                job = self.store.job(job_id)
                if job.status.is_terminal:
                    return
                if job.cancel_requested or self._cancel_event(job_id).is_set():
                    raise _Cancelled
                attempts = self.store.attempts(job_id)
                last = attempts[-1] if attempts else None
                if last is not None and last.outcome is not None and not last.outcome_applied:
                    await self._apply_outcome(job, last)
                elif job.status == S.PENDING:
                    self.store.transition(job_id, S.STARTING, "picked up by the controller")
                elif job.status in (S.STARTING, S.RECOVERING):
                    await self._launch(job, attempts)
                elif job.status == S.RUNNING:
                    assert last is not None
                    await self._watch(job, last)
        except _Cancelled:
            await self._cancel(job_id)

    async def _launch(self, job: JobRow, attempts: list[AttemptRow]) -> None:
        last = attempts[-1] if attempts else None
        if last is not None and last.outcome is None and last.phase == AttemptPhase.RUNNING:
            # Crash window: attempt recorded RUNNING, job transition lost.
            self._to_running(job, last)
            return
        if last is not None and last.outcome is None and last.phase == AttemptPhase.PROVISIONING:
            adopted = await self._launch_call(self.ops.adopt, last.cluster_name)
            if adopted is not None:
                log.info("job %d: adopted cluster %s", job.id, last.cluster_name)
                self._record_running(job, last, adopted)
                return
            await self._launch_call(self.ops.teardown, last.cluster_name)  # partial leftovers
            att = last
        else:
            if last is not None and last.outcome in (Outcome.NO_RESOURCE_RETRY,
                                                     Outcome.LAUNCH_ERROR):
                await self._sleep_or_cancel(job.id, self._backoff(attempts))
            n = last.attempt + 1 if last else 1
            att = self.store.add_attempt(
                job.id, n, cluster_name_for(self.cfg.cluster_prefix, job.id, n),
                self._cause_after(attempts),
            )
            self._hit("attempt_recorded")
        req = self._launch_request(job, att, attempts)
        try:
            launch = await self._launch_cancellable(job.id, att, req)
        except LaunchAbortedError:
            raise _Cancelled from None
        except NoCapacityError as exc:
            final = att.cause == "initial" or self._tail_count(
                attempts, Outcome.NO_RESOURCE_RETRY) + 1 >= self.cfg.max_no_capacity_retries
            self._decide(job, att, Outcome.NO_RESOURCE if final else Outcome.NO_RESOURCE_RETRY,
                         reason=str(exc))
            return
        except PermanentLaunchError as exc:
            self._decide(job, att, Outcome.LAUNCH_FAILED, reason=str(exc))
            return
        except SetupFailedError as exc:
            lost = await self._confirm_lost(att.cluster_name, ())
            if lost:
                self._decide_preempted(job, att, f"node(s) {', '.join(lost)} preempted during "
                                       "setup", time.time(), draining=False)
            else:
                self._decide(job, att, Outcome.SETUP_FAILED, reason=str(exc))
            return
        except (_Cancelled, SimulatedCrash):
            raise
        except Exception as exc:  # transient or unexpected: the cloud decides what it was
            lost = await self._confirm_lost(att.cluster_name, ())
            if lost:
                self._decide_preempted(job, att, f"node(s) {', '.join(lost)} preempted during "
                                       "launch", time.time(), draining=False)
                return
            errors = self._tail_count(attempts, Outcome.LAUNCH_ERROR) + 1
            outcome = Outcome.LAUNCH_FAILED if errors >= self.cfg.max_launch_errors else (
                Outcome.LAUNCH_ERROR)
            log.warning("job %d: launch error %d: %r", job.id, errors, exc)
            self._decide(job, att, outcome, reason=f"launch error: {type(exc).__name__}: {exc}")
            return
        self._hit("provisioned")
        if self._cancel_event(job.id).is_set():
            self.store.update_attempt(job.id, att.attempt, phase=AttemptPhase.RUNNING,
                                      cluster_job_id=launch.cluster_job_id)
            raise _Cancelled
        self._record_running(job, att, launch)

    async def _launch_cancellable(self, job_id: int, att: AttemptRow, req: LaunchRequest
                                  ) -> AttemptLaunch:
        """provision_and_start in a worker thread; a cancel meanwhile aborts it at once
        (its nodes are terminated under it) instead of waiting for setup to end."""
        fut = asyncio.ensure_future(self._launch_call(self.ops.provision_and_start, req))
        cancelled = asyncio.ensure_future(self._cancel_event(job_id).wait())
        await asyncio.wait({fut, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        if not fut.done():
            log.info("job %d: cancelled during launch: aborting %s", job_id, att.cluster_name)
            await self._launch_call(self.ops.abort_launch, att.cluster_name)
            with contextlib.suppress(Exception):
                await fut
            raise _Cancelled
        cancelled.cancel()
        return fut.result()

    def _launch_request(self, job: JobRow, att: AttemptRow, attempts: list[AttemptRow]
                        ) -> LaunchRequest:
        placed = [a for a in attempts if a.cloud is not None and a.attempt < att.attempt]
        last_where = None
        if placed:
            p = placed[-1]
            last_where = Where(p.cloud or "", p.region, p.zone)
        tiers = placement_tiers(job.strategy, self.store.blocks(job.id), last_where)
        draining = [a for a in attempts if a.attempt < att.attempt and a.torn_down_at is None
                    and a.phase == AttemptPhase.RUNNING]
        gate = threading.Event()
        if draining:
            waiters = [self._ensure_drain(job, a) for a in draining]
            loop = asyncio.get_running_loop()

            async def open_gate() -> None:
                await asyncio.gather(*waiters, return_exceptions=True)
                gate.set()

            loop.create_task(open_gate())
        else:
            gate.set()
        flag = self._cancel_flags[job.id]
        log_path = paths.attempt_log_path(job.id, att.attempt).with_suffix(".setup.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        setup_log = _LineSink(log_path)

        def before_run() -> bool:
            while not gate.wait(0.05):
                if flag.is_set():
                    return False
            return not flag.is_set()

        return LaunchRequest(
            job_id=job.id,
            attempt=att.attempt,
            cluster_name=att.cluster_name,
            task=self.task_loader(job),
            tiers=tuple(tiers),
            task_id=job.task_id,
            job_name=job.name,
            env_extra={"LAUNCHER_MANAGED_JOB_ID": str(job.id),
                       "LAUNCHER_ATTEMPT": str(att.attempt)},
            before_run=before_run,
            on_output=setup_log.write,
        )

    def _record_running(self, job: JobRow, att: AttemptRow, launch: AttemptLaunch) -> None:
        now = time.time()
        recovery_s = None
        prev = [a for a in self.store.attempts(job.id) if a.attempt < att.attempt]
        preempted = [a.preempted_at for a in prev if a.preempted_at is not None]
        if att.cause == "preemption" and preempted:
            recovery_s = now - preempted[-1]
        att = self.store.update_attempt(
            job.id, att.attempt, phase=AttemptPhase.RUNNING, cloud=launch.cloud,
            region=launch.region, zone=launch.zone, instance_type=launch.instance_type,
            num_nodes=launch.num_nodes, use_spot=launch.use_spot, node_price=launch.node_price,
            cluster_job_id=launch.cluster_job_id, checkpoint_dir=launch.checkpoint_dir,
            running_at=now, recovery_s=recovery_s, node_ids=launch.node_ids,
        )
        self._to_running(job, att)

    def _to_running(self, job: JobRow, att: AttemptRow) -> None:
        fields: dict[str, Any] = {}
        if job.started_at is None:
            fields["started_at"] = att.running_at or time.time()
        if att.recovery_s is not None:
            fields["last_recovery_s"] = att.recovery_s
        how = f" {att.recovery_s:.1f} s after the preemption" if att.recovery_s else ""
        self.store.transition(
            job.id, S.RUNNING,
            f"running on {att.where} ({att.instance_type}, cluster {att.cluster_name}){how}",
            attempt=att.attempt, **fields,
        )
        self._hit("running_recorded")

    # ---- watching a running attempt -------------------------------------------------------

    async def _watch(self, job: JobRow, att: AttemptRow) -> None:
        """Return once the attempt has an outcome (or a recovery happened in place)."""
        assert att.cluster_job_id is not None
        interval = self.cfg.poll_min_s
        transient = 0
        while True:
            await self._sleep_or_cancel(job.id, interval)
            interval = min(interval * 1.5, self._poll_cap())
            try:
                notices = await self._watch_call(self.ops.notices, att.cluster_name)
            except Exception as exc:
                log.warning("job %d: notices unreadable: %r", job.id, exc)
                notices = []
            if notices:
                first = min(notices, key=lambda n: n.received_at)
                await self._on_preemption(
                    job, att, (first.node_id,),
                    f"interruption notice for {first.node_id} (grace {first.grace_s:.0f} s)",
                    first.received_at, draining=True, grace_s=max(n.grace_s for n in notices))
                return
            try:
                view = await self._watch_call(self.ops.cloud_view, att.cluster_name)
            except TransientOpsError as exc:
                log.info("job %d: cloud view unavailable (%s); not a preemption", job.id, exc)
                view = None
            if view is not None:
                lost = lost_nodes(view, att.node_ids)
                if lost:
                    states = ", ".join(f"{n} {view.get(n, 'missing')}" for n in lost)
                    await self._on_preemption(job, att, lost, f"cloud reports {states}",
                                              time.time(), draining=False)
                    return
            try:
                run = await self._watch_call(self.ops.job_status, att.cluster_name,
                                             att.cluster_job_id)
            except TransientOpsError as exc:
                transient += 1
                log.info("job %d: head unreachable (%d in a row: %s); the cloud says the nodes "
                         "are up, so this is not a preemption", job.id, transient, exc)
                interval = self.cfg.poll_min_s
                continue
            transient = 0
            if run.notice is not None and not run.status.is_terminal:
                n = run.notice
                await self._on_preemption(
                    job, att, (n.node_id,),
                    f"interruption notice for {n.node_id} (grace {n.grace_s:.0f} s)",
                    n.received_at, draining=True, grace_s=n.grace_s)
                return
            if run.status.is_terminal:
                self._hit("job_finished")
                await self._on_run_end(job, att, run)
                return

    async def _confirm_lost(self, cluster: str, expected: tuple[str, ...],
                            wait_s: float | None = None) -> tuple[str, ...]:
        """Nodes the cloud confirms lost, looking twice `wait_s` apart (a kill and the
        cloud's report of it are not simultaneous). () when the cloud can't be asked."""
        wait = self.cfg.failure_confirm_s if wait_s is None else wait_s
        for i in range(2):
            try:
                view = await self._watch_call(self.ops.cloud_view, cluster)
                notices = await self._watch_call(self.ops.notices, cluster)
            except Exception as exc:
                log.info("cloud view of %s unavailable: %r", cluster, exc)
                view, notices = None, []
            if notices:
                return tuple(n.node_id for n in notices)
            if view is not None:
                lost = lost_nodes(view, expected)
                if lost:
                    return lost
            if i == 0 and wait > 0:
                await asyncio.sleep(wait)
        return ()

    async def _on_run_end(self, job: JobRow, att: AttemptRow, run: JobRun) -> None:
        if run.status == RunState.SUCCEEDED:
            self._decide(job, att, Outcome.SUCCEEDED, exit_code=0, reason="job succeeded")
            return
        if run.status == RunState.CANCELLED:
            self._decide(job, att, Outcome.CANCELLED, reason="cancelled on the cluster")
            return
        if run.notice is not None:
            n = run.notice
            self._decide_preempted(job, att, f"interruption notice for {n.node_id} (job exit "
                                   f"{run.exit_code} after SIGTERM)", n.received_at,
                                   draining=False)
            return
        lost = await self._confirm_lost(att.cluster_name, att.node_ids)
        if lost:
            await self._on_preemption(job, att, lost, f"node(s) {', '.join(lost)} preempted "
                                      f"(job exit {run.exit_code})", time.time(), draining=False)
            return
        what = f"exit code {run.exit_code}"
        if run.failed_rank is not None:
            what += f" on rank {run.failed_rank}"
        if run.reason:
            what += f": {run.reason}"
        decision = decide_exit(
            run.exit_code if run.exit_code != 0 else None,
            recover_on_exit_codes=job.recover_on_exit_codes,
            restarts_on_errors=job.restarts_on_errors,
            max_restarts_on_errors=job.max_restarts_on_errors,
        )
        if decision == ExitDecision.RECOVER:
            self._decide(job, att, Outcome.EXIT_CODE, exit_code=run.exit_code,
                         reason=f"job ended with {what} (listed in recover_on_exit_codes)")
        elif decision == ExitDecision.RESTART:
            self._decide(job, att, Outcome.ERROR_RESTART, exit_code=run.exit_code,
                         reason=f"job failed with {what}; restart {job.restarts_on_errors + 1} "
                         f"of {job.max_restarts_on_errors}")
        else:
            self._decide(job, att, Outcome.FAILED, exit_code=run.exit_code,
                         reason=f"job failed with {what}")

    async def _on_preemption(self, job: JobRow, att: AttemptRow, lost: tuple[str, ...],
                             reason: str, at: float, *, draining: bool,
                             grace_s: float = 0.0) -> None:
        if (not draining and att.num_nodes and att.num_nodes > 1 and len(lost) < att.num_nodes
                and att.cluster_job_id is not None):
            if await self._replace_in_place(job, att, lost, reason, at):
                return
            job = self.store.job(job.id)
        self._decide_preempted(job, att, reason, at, draining=draining, grace_s=grace_s)

    def _decide_preempted(self, job: JobRow, att: AttemptRow, reason: str, at: float, *,
                          draining: bool, grace_s: float = 0.0) -> None:
        if att.cloud is not None:
            for b in blocks_after_preemption(job.strategy, Where(att.cloud, att.region, att.zone),
                                             at, self.cfg.cooldown_s):
                self.store.add_block(job.id, b.cloud, b.region, b.zone, b.until, b.reason)
        lost_s = accounting.work_lost_s(att.checkpoint_dir, att.running_at, at)
        fields: dict[str, object] = {"preempted_at": at, "work_lost_s": lost_s}
        if draining:
            # Recovery starts now; the old cluster keeps running until its job has
            # written its last checkpoint (see _ensure_drain).
            fields["drain_until"] = at + min(grace_s + 5.0, self.cfg.max_drain_s)
        self._decide(job, att, Outcome.PREEMPTED, reason=reason, attempt_fields=fields)

    async def _replace_in_place(self, job: JobRow, att: AttemptRow, lost: tuple[str, ...],
                                reason: str, at: float) -> bool:
        """Multi-node: replace only the lost nodes when the cloud can. True if done."""
        req = self._launch_request(job, att, [att])
        self.store.transition(job.id, S.RECOVERING, f"{reason}; replacing only those nodes",
                              attempt=att.attempt, recoveries=job.recoveries + 1)
        try:
            launch = await self._launch_call(self.ops.replace_nodes, att.cluster_name, lost, req)
        except (_Cancelled, SimulatedCrash):
            raise
        except Exception as exc:
            log.warning("job %d: in-place replacement failed: %r", job.id, exc)
            launch = None
        if launch is None:
            # Fall back to a full relaunch: the recovery is already counted.
            job = self.store.job(job.id)
            self.store.update_job(job.id, recoveries=job.recoveries - 1)
            return False
        now = time.time()
        self.store.update_attempt(job.id, att.attempt, cluster_job_id=launch.cluster_job_id,
                                  node_ids=launch.node_ids, recovery_s=now - at)
        self.store.transition(job.id, S.RUNNING, f"replaced {len(lost)} node(s) in place; gang "
                              f"restarted {now - at:.1f} s after the preemption",
                              attempt=att.attempt, last_recovery_s=now - at)
        return True

    # ---- outcomes ---------------------------------------------------------------------

    def _decide(self, job: JobRow, att: AttemptRow, outcome: str, *, reason: str,
                exit_code: int | None = None,
                attempt_fields: dict[str, object] | None = None) -> None:
        """Record the attempt's outcome (before any side effect). `_drive` applies it."""
        self.store.update_attempt(job.id, att.attempt, outcome=outcome, exit_code=exit_code,
                                  outcome_reason=reason, **(attempt_fields or {}))

    async def _apply_outcome(self, job: JobRow, att: AttemptRow) -> None:
        """Apply a recorded, not yet applied outcome. Idempotent side effects first for
        final outcomes; for recoveries the old cluster is cleaned up in the background."""
        outcome = att.outcome
        assert outcome is not None
        reason = att.outcome_reason or f"attempt {outcome.lower()}"
        now = time.time()
        final = FINAL_STATUS.get(outcome)
        if final is not None:
            await self._finalize_attempt(att, fetch_logs=att.phase == AttemptPhase.RUNNING)
            self._hit("teardown_done")
            self.store.transition(
                job.id, final, reason, attempt=att.attempt,
                attempt_fields={"phase": AttemptPhase.ENDED, "ended_at": att.ended_at or now,
                                "outcome_applied": 1},
                ended_at=now, exit_code=att.exit_code,
                failure_reason=None if final == S.SUCCEEDED else reason,
            )
            return
        draining = att.drain_until is not None and att.phase == AttemptPhase.RUNNING
        afields: dict[str, object] = {"outcome_applied": 1}
        if not draining:
            afields.update(phase=AttemptPhase.ENDED, ended_at=att.ended_at or now)
        jfields: dict[str, Any] = {}
        if outcome in (Outcome.PREEMPTED, Outcome.EXIT_CODE):
            jfields["recoveries"] = job.recoveries + 1
        elif outcome == Outcome.ERROR_RESTART:
            jfields["restarts_on_errors"] = job.restarts_on_errors + 1
        target = S.RECOVERING if job.status in (S.RUNNING, S.STARTING) else None
        if outcome in (Outcome.NO_RESOURCE_RETRY, Outcome.LAUNCH_ERROR):
            target = None
        self.store.transition(job.id, target, reason, attempt=att.attempt,
                              attempt_fields=afields, **jfields)
        if outcome == Outcome.PREEMPTED:
            self._hit("preemption_recorded")
        if not draining:
            self._spawn(self._finalize_attempt(self.store.attempt(job.id, att.attempt),
                                               fetch_logs=att.phase == AttemptPhase.RUNNING))

    def _ensure_drain(self, job: JobRow, att: AttemptRow) -> asyncio.Task[None]:
        key = (job.id, att.attempt)
        t = self._drains.get(key)
        if t is None or t.done():
            until = att.drain_until or (att.preempted_at or time.time()) + self.cfg.max_drain_s
            t = asyncio.ensure_future(self._drain(att, until))
            self._drains[key] = t
            self._background.add(t)
            t.add_done_callback(self._background_done)
        return t

    async def _drain(self, att: AttemptRow, until: float) -> None:
        """Wait for a noticed attempt's job to end (its checkpoint written) or its nodes
        to go, or the deadline; then end it and tear its cluster down."""
        while time.time() < until and att.cluster_job_id is not None:
            try:
                run = await self._watch_call(self.ops.job_status, att.cluster_name,
                                             att.cluster_job_id)
                if run.status.is_terminal:
                    break
                view = await self._watch_call(self.ops.cloud_view, att.cluster_name)
                if lost_nodes(view, att.node_ids):
                    break
            except Exception:
                pass
            await asyncio.sleep(min(0.25, max(0.0, until - time.time())))
        self.store.update_attempt(att.job_id, att.attempt, phase=AttemptPhase.ENDED,
                                  ended_at=time.time())
        await self._finalize_attempt(self.store.attempt(att.job_id, att.attempt), fetch_logs=True)

    async def _finalize_attempt(self, att: AttemptRow, *, fetch_logs: bool) -> None:
        """Save the attempt's logs locally (best effort), then tear its cluster down."""
        if att.torn_down_at is not None:
            return
        if fetch_logs and att.cluster_job_id is not None:
            await self._launch_call(self._save_logs, att)
        for delay in (1.0, 2.0, 4.0, 8.0, None):
            try:
                await self._launch_call(self.ops.teardown, att.cluster_name)
                break
            except Exception as exc:
                if delay is None:
                    raise  # left for the next controller's startup sweep
                log.warning("teardown of %s failed (%r); retrying in %.0f s",
                            att.cluster_name, exc, delay)
                await asyncio.sleep(delay)
        self.store.update_attempt(att.job_id, att.attempt, torn_down_at=time.time())

    def _save_logs(self, att: AttemptRow) -> None:
        assert att.cluster_job_id is not None
        path = paths.attempt_log_path(att.job_id, att.attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".log.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                self.ops.fetch_logs(att.cluster_name, att.cluster_job_id,
                                    lambda line: _write_line(f, line), False)
        except Exception as exc:
            log.info("logs of %s not fetched: %r", att.cluster_name, exc)
            if path.exists():
                tmp.unlink(missing_ok=True)
                return
        tmp.replace(path)

    async def _teardown_all(self, job_id: int) -> None:
        for a in self.store.attempts(job_id):
            await self._finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING)

    async def _cancel(self, job_id: int) -> None:
        job = self.store.job(job_id)
        if job.status.is_terminal:
            return
        for a in self.store.attempts(job_id):
            if a.torn_down_at is not None:
                continue
            if a.phase == AttemptPhase.RUNNING and a.cluster_job_id is not None:
                try:
                    await self._launch_call(self.ops.cancel_job, a.cluster_name, a.cluster_job_id)
                except Exception as exc:
                    log.info("job %d: cancel on %s failed: %r", job_id, a.cluster_name, exc)
            if a.outcome is None:
                self.store.update_attempt(job_id, a.attempt, outcome=Outcome.CANCELLED,
                                          outcome_applied=1, phase=AttemptPhase.ENDED,
                                          ended_at=time.time())
            await self._finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING)
        self.store.transition(job_id, S.CANCELLED, "cancelled by the user",
                              ended_at=time.time(), failure_reason="cancelled")

    # ---- helpers ----------------------------------------------------------------------

    @staticmethod
    def _tail_count(attempts: list[AttemptRow], outcome: str) -> int:
        n = 0
        for a in reversed(attempts):
            if a.outcome != outcome:
                break
            n += 1
        return n

    def _backoff(self, attempts: list[AttemptRow]) -> float:
        tail = self._tail_count(attempts, attempts[-1].outcome or "") if attempts else 0
        return min(self.cfg.backoff_max_s, self.cfg.backoff_min_s * 2 ** max(0, tail - 1))

    @staticmethod
    def _cause_after(attempts: list[AttemptRow]) -> str:
        for a in reversed(attempts):
            cause = CAUSE_AFTER.get(a.outcome or "")
            if cause:
                return cause
            if a.outcome in (Outcome.NO_RESOURCE_RETRY, Outcome.LAUNCH_ERROR):
                return a.cause  # a retry of the same (re)launch
        return "initial"


class _LineSink:
    """Append lines to a file, opened lazily (called from worker threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line.rstrip("\n") + "\n")


def _write_line(f: Any, line: str) -> None:
    f.write(line.rstrip("\n") + "\n")
