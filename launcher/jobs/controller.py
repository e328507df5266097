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
   after an interruption notice, and while a DEADLINE job's spot gang is set up to
   take over from its on-demand one (its name is written on the on-demand attempt,
   `switch_cluster`, before the cloud is asked: see controller_deadline.py); every
   attempt not yet torn down is torn down by the driver or by the startup sweep (an
   abandoned switch's spot cluster by the driver). A new attempt is provisioned only once the
   earlier attempts' clusters are torn down (`_old_clusters_gone`) - except a
   preempted attempt's: its teardown runs in the background meanwhile, tracked by its
   row (outcome applied, `torn_down_at` NULL), which the startup sweep finishes.
4. A DEADLINE job's decisions are logged (deadline_store.py) before they are acted
   on, and its policy's observation is rebuilt from the DB only, so a restarted
   controller decides as before and acts on a decision it logged but had not acted on.
5. An in-place node replacement writes its intent (lost nodes, time, reason) before
   the cloud is asked and clears it with the new gang's job id; a restart that finds
   the intent recovers with a full relaunch (`_abandon_replace`).

Blocking calls (cloud, agent, teardown) run in two bounded thread pools: one for
launches/teardowns (slow), one for status queries (fast), so a burst of
relaunches never delays preemption detection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from launcher.jobs import log_sync, paths
from launcher.jobs.cluster_ops import (
    AttemptLaunch,
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
from launcher.jobs.controller_base import Cancelled
from launcher.jobs.controller_deadline import SPOT, DeadlineMixin
from launcher.jobs.controller_types import (
    CAUSE_AFTER,
    ControllerConfig,
    Outcome,
    cluster_name_for,
)
from launcher.jobs.crash import SimulatedCrash
from launcher.jobs.log_sync import LogSync
from launcher.jobs.recovery import (
    ExitDecision,
    decide_exit,
)
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

if TYPE_CHECKING:
    from collections.abc import Mapping

    from launcher.clouds.base import NodeState

log = logging.getLogger("launcher.jobs.controller")


def _forget(fut: asyncio.Future[Any]) -> None:
    """Stop caring about `fut` (a worker call whose answer no longer matters)."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())

__all__ = ["Controller", "ControllerConfig"]


class Controller(DeadlineMixin):
    """Drives all live managed jobs. Use `await run(stop_event)` in one event loop."""

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
            self._log_pool.shutdown(wait=False, cancel_futures=True)
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
            self._finalize_bg(a, fetch_logs=a.phase == AttemptPhase.RUNNING)

    # ---- one job ----------------------------------------------------------------------

    async def _drive(self, job_id: int) -> None:
        try:
            while True:
                job = self.store.job(job_id)
                if job.status.is_terminal:
                    return
                if job.cancel_requested or self._cancel_event(job_id).is_set():
                    raise Cancelled
                attempts = self.store.attempts(job_id)
                last = attempts[-1] if attempts else None
                if last is not None and last.outcome is not None and not last.outcome_applied:
                    await self._apply_outcome(job, last)
                elif job.status == S.PENDING:
                    if await self._stage_ready(job):
                        self.store.transition(job_id, S.STARTING, "picked up by the controller")
                elif job.status in (S.STARTING, S.RECOVERING):
                    await self._launch(job, attempts)
                elif job.status == S.RUNNING:
                    assert last is not None
                    await self._watch(job, last)
        except Cancelled:
            await self._cancel(job_id)

    async def _stage_ready(self, job: JobRow) -> bool:
        """A pipeline stage starts once the stage before it SUCCEEDED. While that stage
        is live, wait (a scan interval; a cancel ends the wait); when it ended any other
        way, this stage is CANCELLED, not run, and False is returned. A plain job: True."""
        if job.after_job_id is None:
            return True
        before = self.store.job(job.after_job_id)
        if before.status == S.SUCCEEDED:
            return True
        if before.status.is_terminal:
            n = (before.stage_index or 0) + 1
            reason = f"not run: stage {n} ({before.name}, job {before.id}) ended {before.status.value}"
            self.store.transition(job.id, S.CANCELLED, reason, expect=S.PENDING,
                                  ended_at=time.time(), failure_reason=reason)
            return False
        await self._sleep_or_cancel(job.id, self.cfg.scan_s)
        return False

    async def _launch(self, job: JobRow, attempts: list[AttemptRow]) -> None:
        last = attempts[-1] if attempts else None
        if last is not None and last.outcome is None and last.replacing:
            self._abandon_replace(job, last)  # crashed while replacing nodes in place
            return
        if last is not None and last.outcome is None and last.phase == AttemptPhase.RUNNING:
            # Crash window: attempt recorded RUNNING, job transition lost.
            self._to_running(job, last)
            return
        if last is not None and last.outcome is None and last.phase == AttemptPhase.PROVISIONING:
            adopted = await self._launch_call(self.ops.adopt, last.cluster_name)
            log_sync.note_controller_restart(last, adopted=adopted is not None)
            if adopted is not None:
                log.info("job %d: adopted cluster %s", job.id, last.cluster_name)
                self._record_running(job, last, adopted)
                return
            await self._launch_call(self.ops.teardown, last.cluster_name)  # partial leftovers
            att = last
        else:
            deadline = job.deadline is not None
            if deadline and last is not None and await self._resume_switch(job, last):
                return  # the next pass adopts the switch's spot cluster
            if last is not None and last.outcome in (Outcome.NO_RESOURCE_RETRY,
                                                     Outcome.LAUNCH_ERROR) and not (
                    deadline and last.market == SPOT):  # a refused spot launch: by ticks
                await self._sleep_or_cancel(job.id, self._backoff(attempts))
            market = None
            if deadline:
                market = await self._deadline_market(job, attempts)
                if market is None:
                    return  # waited for the next tick: decide again
                self._mark(job.id, "decided")  # (a recovery's breakdown: waiting is deciding)
            await self._old_clusters_gone(attempts)
            self._mark(job.id, "old_gone")
            n = last.attempt + 1 if last else 1
            att = self.store.add_attempt(
                job.id, n, cluster_name_for(self.cfg.cluster_prefix, job.id, n),
                self._cause_after(attempts), market=market,
            )
            self._hit("attempt_recorded")
        self._mark(job.id, "attempt")
        req = self._launch_request(job, att, attempts, market=att.market)
        try:
            launch = await self._launch_cancellable(job.id, att, req)
        except LaunchAbortedError:
            raise Cancelled from None
        except NoCapacityError as exc:
            if job.deadline is not None and att.market == SPOT:  # spot is down: by ticks
                self._deadline_refused(job, att, str(exc))
                self._decide(job, att, Outcome.NO_RESOURCE_RETRY,
                             reason=f"no spot capacity: {exc}")
                return
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
        except (Cancelled, SimulatedCrash):
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
        self._mark(job.id, "submitted")
        if self._cancel_event(job.id).is_set():
            self.store.update_attempt(job.id, att.attempt, phase=AttemptPhase.RUNNING,
                                      cluster_job_id=launch.cluster_job_id)
            raise Cancelled
        self._record_running(job, att, launch)

    async def _launch_cancellable(self, job_id: int, att: AttemptRow, req: LaunchRequest
                                  ) -> AttemptLaunch:
        """provision_and_start in a worker thread; a cancel meanwhile aborts it at once
        (its nodes are terminated under it) instead of waiting for setup to end."""
        return await self._call_cancellable(job_id, att.cluster_name, "launch",
                                            self.ops.provision_and_start, req)

    def _record_running(self, job: JobRow, att: AttemptRow, launch: AttemptLaunch) -> None:
        now = time.time()
        recovery_s = None
        prev = [a for a in self.store.attempts(job.id) if a.attempt < att.attempt]
        preempted = [a.preempted_at for a in prev if a.preempted_at is not None]
        breakdown = ""
        if att.cause == "preemption" and preempted:
            recovery_s = now - preempted[-1]
            breakdown = self._recovery_breakdown(job.id, preempted[-1], now)
            log.info("job %d: recovered in %.1f s (%s)", job.id, recovery_s, breakdown)
        self._marks.pop(job.id, None)
        att = self.store.update_attempt(
            job.id, att.attempt, phase=AttemptPhase.RUNNING, cloud=launch.cloud,
            region=launch.region, zone=launch.zone, instance_type=launch.instance_type,
            num_nodes=launch.num_nodes, use_spot=launch.use_spot, node_price=launch.node_price,
            cluster_job_id=launch.cluster_job_id, checkpoint_dir=launch.checkpoint_dir,
            running_at=now, recovery_s=recovery_s, node_ids=launch.node_ids,
        )
        self._to_running(job, att, breakdown)

    def _to_running(self, job: JobRow, att: AttemptRow, breakdown: str = "") -> None:
        fields: dict[str, Any] = {}
        if job.started_at is None:
            fields["started_at"] = att.running_at or time.time()
        if att.recovery_s is not None:
            fields["last_recovery_s"] = att.recovery_s
        how = f" {att.recovery_s:.1f} s after the preemption" if att.recovery_s else ""
        if how and breakdown:
            how += f" ({breakdown})"
        self.store.transition(
            job.id, S.RUNNING,
            f"running on {att.where} ({att.instance_type}, cluster {att.cluster_name}){how}",
            attempt=att.attempt, **fields,
        )
        if job.deadline is not None:
            self._deadline_running(job, att)
        self._hit("running_recorded")

    # ---- watching a running attempt -------------------------------------------------------

    async def _watch(self, job: JobRow, att: AttemptRow) -> None:
        """Return once the attempt has an outcome (or a recovery happened in place).

        An unreachable head is never a preemption by itself: only the cloud's view (for
        SSH pools: sshd unreachable on every probe of a confirmation window) confirms a
        loss. While it does not, the poll backs off (to `unreachable_poll_max_s`); past
        `head_unreachable_limit_s` the attempt is recovered anyway, with that reason."""
        assert att.cluster_job_id is not None
        if job.deadline is not None and att.switch_cluster and att.outcome is None:
            await self._abandon_switch(job, att)  # a switch to spot cut short by a crash
        interval = self.cfg.poll_min_s
        watch_start = time.time()
        sync = self._log_sync(att)
        pulling: asyncio.Future[int] | None = None
        next_pull = 0.0
        last_ok: float | None = None  # when the agent last answered this controller
        unreachable = 0
        while True:
            await self._sleep_or_cancel(job.id, interval)
            if (not unreachable and (pulling is None or pulling.done())
                    and time.monotonic() >= next_pull):
                # Keep the output as it runs (never awaited: it holds up nothing).
                next_pull = time.monotonic() + self.cfg.log_sync_s
                pulling = asyncio.get_running_loop().run_in_executor(
                    self._log_pool, sync.pull, self.ops.fetch_log_since, att.cluster_name)
                _forget(pulling)
            if not unreachable:  # while backing off, keep the grown interval (see below)
                interval = min(interval * 1.5, self._poll_cap())
            try:
                notices = await self._watch_call(self.ops.notices, att.cluster_name)
            except Exception as exc:
                log.warning("job %d: notices unreadable: %r", job.id, exc)
                notices = []
            if notices:
                self._mark(job.id, "detected")
                first = min(notices, key=lambda n: n.received_at)
                if await self._ended_first(job, att, first.received_at):
                    return
                await self._on_preemption(
                    job, att, (first.node_id,),
                    f"interruption notice for {first.node_id} (grace {first.grace_s:.0f} s)",
                    first.received_at, draining=True, grace_s=max(n.grace_s for n in notices))
                return
            # The agent is asked while the cloud is: a head that died answers nothing for
            # seconds, and the cloud's view is re-read meanwhile (wake on what comes first).
            status = asyncio.ensure_future(self._watch_call(
                self.ops.job_status, att.cluster_name, att.cluster_job_id))
            try:
                view, lost = await self._view_until(job, att, status, interval)
            except BaseException:
                _forget(status)
                raise
            if lost:
                _forget(status)
                assert view is not None
                self._mark(job.id, "detected")
                head_lost = bool(att.node_ids) and att.node_ids[0] in lost
                if await self._ended_first(job, att, None, head_lost=head_lost):
                    return
                states = ", ".join(f"{n} {view.get(n, 'missing')}" for n in lost)
                await self._on_preemption(job, att, lost, f"cloud reports {states}",
                                          await self._loss_time(att, last_ok), draining=False)
                return
            try:
                run = await status
            except TransientOpsError as exc:
                unreachable += 1
                down_s = time.time() - (last_ok or watch_start)
                seen = ("unavailable" if view is None else ", ".join(
                    f"{n} {view.get(n, 'missing')}" for n in att.node_ids) or "no nodes")
                if down_s >= self.cfg.head_unreachable_limit_s:
                    head = att.node_ids[0] if att.node_ids else att.cluster_name
                    await self._on_preemption(
                        job, att, (head,),
                        f"head node {head} unreachable for {down_s:.0f} s (limit "
                        f"{self.cfg.head_unreachable_limit_s:.0f} s); the cloud's view never "
                        f"confirmed a loss ({seen}): recovering",
                        await self._loss_time(att, last_ok), draining=False)
                    return
                log.info("job %d: head unreachable (%d in a row, %.0f s: %s); the cloud's view "
                         "does not confirm a loss (%s): not a preemption yet", job.id,
                         unreachable, down_s, exc, seen)
                interval = min(max(interval, self.cfg.poll_min_s) * 1.5, self._unreachable_cap())
                continue
            unreachable = 0
            last_ok = time.time()
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
            if job.deadline is not None and await self._deadline_tick(job, att):
                return

    def _log_sync(self, att: AttemptRow) -> LogSync:
        """The incremental log copy of the attempt's current gang run (see log_sync)."""
        assert att.cluster_job_id is not None
        key = (att.job_id, att.attempt)
        sync = self._log_syncs.get(key)
        if sync is None or sync.closed or sync.cluster_job_id != att.cluster_job_id:
            sync = LogSync(paths.attempt_log_path(att.job_id, att.attempt), att.cluster_job_id)
            self._log_syncs[key] = sync
        return sync

    async def _view_until(self, job: JobRow, att: AttemptRow, status: asyncio.Future[JobRun],
                          interval: float) -> tuple[Mapping[str, NodeState] | None,
                                                    tuple[str, ...]]:
        """Read the cloud's view of the attempt's nodes now, and again every `interval`
        while `status` (the agent's answer) is outstanding; return (the last view, the
        nodes it reports lost) as soon as some are lost, or once `status` is done.
        A view that cannot be read is no loss (None)."""
        view: Mapping[str, NodeState] | None = None
        while True:
            try:
                view = await self._watch_call(self.ops.cloud_view, att.cluster_name)
            except TransientOpsError as exc:
                log.info("job %d: cloud view unavailable (%s); not a preemption", job.id, exc)
                view = None
            lost = lost_nodes(view, att.node_ids) if view is not None else ()
            if lost or status.done():
                return view, lost
            await asyncio.wait({status}, timeout=max(interval, self.cfg.poll_min_s))
            if status.done():
                return view, ()

    async def _ended_first(self, job: JobRow, att: AttemptRow, lost_at: float | None, *,
                           head_lost: bool = False) -> bool:
        """Before a loss of the attempt's nodes is acted on: if the agent's record (still
        readable where the node's disk outlives it, e.g. the local cloud) shows the run
        had already ended by itself, the job's own result stands (it is applied here and
        True returned); a finished job is never run again. SUCCEEDED and CANCELLED always
        stand; a failure stands when the agent recorded it before the loss (`lost_at`,
        else the cloud's record of it); otherwise the loss may have caused the failure,
        and it is treated as a preemption (False). When the head node itself is lost
        (`head_lost`) and its record went with it (`records_survive_loss`), nothing is
        asked: a dead address would only hold up the recovery."""
        assert att.cluster_job_id is not None
        if head_lost and not await self._records_survive(att):
            return False
        try:
            run = await asyncio.wait_for(
                self._watch_call(self.ops.job_status, att.cluster_name, att.cluster_job_id),
                timeout=self.cfg.last_look_s)
        except Exception:
            return False  # the record went with the node: only what was seen counts
        if not run.status.is_terminal or run.notice is not None:
            return False
        if run.status == RunState.FAILED and not await self._failed_before_loss(att, run,
                                                                                lost_at):
            return False
        log.info("job %d: the run on %s had already ended (%s, exit %s) when its node(s) "
                 "were lost: its own result stands", job.id, att.cluster_name,
                 run.status.value, run.exit_code)
        self._hit("job_finished")
        await self._on_run_end(job, att, run, loss_checked=True)
        return True

    async def _failed_before_loss(self, att: AttemptRow, run: JobRun,
                                  lost_at: float | None) -> bool:
        """True when the agent recorded the run's end before its nodes were lost."""
        if lost_at is None:
            try:
                lost_at = await self._watch_call(self.ops.lost_since, att.cluster_name)
            except Exception:
                lost_at = None
        return run.ended_at is not None and lost_at is not None and run.ended_at < lost_at

    async def _on_run_end(self, job: JobRow, att: AttemptRow, run: JobRun, *,
                          loss_checked: bool = False) -> None:
        """Apply the end of the attempt's run. A failure on a node the cloud reports lost
        is a preemption unless the run ended before the loss (`loss_checked`: known)."""
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
        lost = () if loss_checked else await self._confirm_lost(att.cluster_name, att.node_ids)
        if lost and await self._failed_before_loss(att, run, None):
            log.info("job %d: the run failed (exit %s) before node(s) %s were lost: its own "
                     "result stands", job.id, run.exit_code, ", ".join(lost))
            lost = ()
        if lost:
            await self._on_preemption(job, att, lost, f"node(s) {', '.join(lost)} preempted "
                                      f"(job exit {run.exit_code})",
                                      await self._loss_time(att, None), draining=False)
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
            exit_code_recoveries=sum(1 for a in self.store.attempts(job.id)
                                     if a.outcome == Outcome.EXIT_CODE),
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

    # ---- helpers ----------------------------------------------------------------------

    def _unreachable_cap(self) -> float:
        """The watch interval's cap while the head does not answer."""
        return max(self._poll_cap(), self.cfg.unreachable_poll_max_s)

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
