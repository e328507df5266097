"""Finishing: applying a recorded outcome (the job's transition), draining an attempt
after an interruption notice, saving its logs, tearing its cluster down, cancelling.

Crash safety (controller rules 2 and 3): a final outcome's side effects (log fetch,
teardown) run before the terminal transition, which is written with `outcome_applied = 1`
in the same transaction; all of them are idempotent, so an outcome applied again after a
restart does no harm. An attempt's `torn_down_at` is written only once its cluster is
gone; the startup sweep finishes every teardown a dead controller left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from launcher.jobs.controller.context import Context
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import FINAL_STATUS, Outcome
from launcher.jobs.ops_interface import lost_nodes
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")


class Finisher:
    """Applies outcomes and takes attempts' clusters down (see the module docstring).
    Each attempt is drained, and finalized, by at most one task at a time."""

    def __init__(self, ctx: Context, logs: AttemptLogs, loss: LossDetector) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.logs = logs
        self.loss = loss
        self._drains: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._finalizing: dict[tuple[int, int], asyncio.Task[None]] = {}

    async def apply_outcome(self, job: JobRow, att: AttemptRow) -> None:
        """Apply a recorded, not yet applied outcome. Idempotent side effects first for
        final outcomes; for recoveries the old cluster is cleaned up in the background."""
        outcome = att.outcome
        assert outcome is not None
        reason = att.outcome_reason or f"attempt {outcome.lower()}"
        now = time.time()
        final = FINAL_STATUS.get(outcome)
        if final is not None:
            await self.finalize_attempt(att, fetch_logs=att.phase == AttemptPhase.RUNNING)
            self.ctx.hit("teardown_done")
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
            self.ctx.hit("preemption_recorded")
        if not draining:
            self.finalize_bg(self.store.attempt(job.id, att.attempt),
                             fetch_logs=att.phase == AttemptPhase.RUNNING)

    # ---- draining a noticed attempt -------------------------------------------------------

    def ensure_drain(self, job: JobRow, att: AttemptRow) -> asyncio.Task[None]:
        """The drain of noticed attempt `att` (started unless one is running): it ends
        once its job ends or its nodes go, or at its `drain_until`."""
        key = (job.id, att.attempt)
        t = self._drains.get(key)
        if t is None or t.done():
            cfg = self.ctx.cfg
            until = att.drain_until or (att.preempted_at or time.time()) + cfg.max_drain_s
            t = self.ctx.spawn(self._drain(att, until))
            self._drains[key] = t
        return t

    async def _drain(self, att: AttemptRow, until: float) -> None:
        """Wait for a noticed attempt's job to end (its checkpoint written) or its nodes
        to go, or the deadline; then end it and tear its cluster down."""
        ops = self.ctx.ops
        while time.time() < until and att.cluster_job_id is not None:
            try:
                run = await self.ctx.watch_call(ops.job_status, att.cluster_name,
                                                att.cluster_job_id)
                if run.status.is_terminal:
                    break
                view = await self.ctx.watch_call(ops.cloud_view, att.cluster_name)
                if lost_nodes(view, att.node_ids):
                    break
            except Exception:
                pass
            await asyncio.sleep(min(0.25, max(0.0, until - time.time())))
        self.store.update_attempt(att.job_id, att.attempt, phase=AttemptPhase.ENDED,
                                  ended_at=time.time())
        self.ctx.hit("drain_ended")
        await self.finalize_attempt(self.store.attempt(att.job_id, att.attempt),
                                    fetch_logs=True)

    # ---- taking clusters down ---------------------------------------------------------------

    def finalize_bg(self, att: AttemptRow, *, fetch_logs: bool) -> asyncio.Task[None]:
        """`finalize_attempt` in the background, at most once at a time per attempt."""
        key = (att.job_id, att.attempt)
        t = self._finalizing.get(key)
        if t is None or t.done():
            t = self.ctx.spawn(self.finalize_attempt(att, fetch_logs=fetch_logs))
            self._finalizing[key] = t
            t.add_done_callback(lambda _t: self._finalizing.pop(key, None))
        return t

    async def old_clusters_gone(self, attempts: list[AttemptRow]) -> None:
        """Before a new attempt is provisioned: make sure every earlier attempt's cluster
        is being torn down (starting that where nobody has) and wait for it, so a job
        never has two clusters at once - except a preempted one whose every node the
        cloud reports lost (nothing can run there; a partly lost cluster, or one an
        interrupted in-place replacement may have restarted, is waited for): its teardown
        runs in the background while the next attempt provisions (its DB row tracks it:
        outcome PREEMPTED applied, `torn_down_at` still NULL, so a restarted
        controller's startup sweep finishes it), and one draining after an interruption
        notice, by design."""
        waits = []
        for a in attempts:
            if (a.torn_down_at is not None or a.outcome is None
                    or (a.phase == AttemptPhase.RUNNING and a.drain_until)):
                continue  # gone, undecided, or draining (its drain tears it down)
            t = self.finalize_bg(a, fetch_logs=a.phase == AttemptPhase.RUNNING)
            if not (a.outcome == Outcome.PREEMPTED and a.outcome_applied
                    and await self.loss.all_nodes_lost(a)):
                waits.append(t)  # a cluster whose every node is lost goes in the background
        for result in await asyncio.gather(*waits, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("an earlier cluster was not torn down (%r): launching anyway",
                            result)

    async def finalize_attempt(self, att: AttemptRow, *, fetch_logs: bool) -> None:
        """Save the attempt's logs locally (retried, see `AttemptLogs.save_retrying`),
        then tear its cluster down: only once the logs are safe or the tries are spent."""
        if att.torn_down_at is not None:
            return
        if fetch_logs and att.cluster_job_id is not None:
            saved = await self.logs.save_retrying(att)
            log.info("job %d: taking %s down (%s)", att.job_id, att.cluster_name,
                     "its logs are saved" if saved else "its logs could not be fetched")
        for delay in (1.0, 2.0, 4.0, 8.0, None):
            try:
                await self.ctx.launch_call(self.ctx.ops.teardown, att.cluster_name)
                break
            except Exception as exc:
                if delay is None:
                    raise  # left for the next controller's startup sweep
                log.warning("teardown of %s failed (%r); retrying in %.0f s",
                            att.cluster_name, exc, delay)
                await asyncio.sleep(delay)
        self.store.update_attempt(att.job_id, att.attempt, torn_down_at=time.time())

    async def teardown_all(self, job_id: int) -> None:
        """Take every attempt of the job down (a driver that kept failing)."""
        for a in self.store.attempts(job_id):
            await self.finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING)

    async def cancel(self, job_id: int) -> None:
        """The user's cancel: stop the job's runs, end and take down every attempt, then
        write CANCELLED (last: a restart finds the cancel request and does it again)."""
        job = self.store.job(job_id)
        if job.status.is_terminal:
            return
        for a in self.store.attempts(job_id):
            if a.torn_down_at is not None:
                continue
            if a.phase == AttemptPhase.RUNNING and a.cluster_job_id is not None:
                try:
                    await self.ctx.launch_call(self.ctx.ops.cancel_job, a.cluster_name,
                                               a.cluster_job_id)
                except Exception as exc:
                    log.info("job %d: cancel on %s failed: %r", job_id, a.cluster_name, exc)
            if a.outcome is None:
                self.store.update_attempt(job_id, a.attempt, outcome=Outcome.CANCELLED,
                                          outcome_applied=1, phase=AttemptPhase.ENDED,
                                          ended_at=time.time())
            await self.finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING)
        self.ctx.hit("cancel_attempts_ended")
        self.store.transition(job_id, S.CANCELLED, "cancelled by the user",
                              ended_at=time.time(), failure_reason="cancelled")
