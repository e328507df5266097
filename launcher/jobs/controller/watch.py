"""Watching a running attempt until it has an outcome: its output synced as it runs,
interruption notices, the cloud's view of its nodes (a loss), the agent's record of its
run (its end: success, failure, a restart or a recovery by exit code), and, for DEADLINE
jobs, the policy's tick.

The cloud's view and the notices come from the poller (poller.py: one query per cloud and
region per tick for every watched attempt), which wakes the watch as soon as a tick sees a
loss; the head's agent is asked by the watch itself, at an interval that grows while
nothing happens (the budget `max_polls_per_s` is shared by every job).

An unreachable head is never a preemption by itself: only the cloud's view (for SSH
pools: sshd unreachable on every probe of a confirmation window) confirms a loss. While
it does not, the poll backs off (to `unreachable_poll_max_s`); past
`head_unreachable_limit_s` the attempt is recovered anyway, with that reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from launcher.clouds.base import NodeState
from launcher.jobs.controller.context import Cancelled, Context, RecoverySteps
from launcher.jobs.controller.deadline import DeadlineDriver
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.poller import Watched
from launcher.jobs.controller.preemption import Recovery
from launcher.jobs.ops_interface import JobRun, RunState, TransientOpsError, lost_nodes
from launcher.jobs.recovery import ExitDecision, decide_exit
from launcher.jobs.store import AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")


def _forget(fut: asyncio.Future[Any]) -> None:
    """Stop caring about `fut` (a worker call whose answer no longer matters)."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


class Watcher:
    """Watches running attempts (see the module docstring): a loss goes to `recovery`,
    an end of the run is decided here (`on_run_end`), a DEADLINE tick to `deadline`."""

    def __init__(self, ctx: Context, loss: LossDetector, logs: AttemptLogs,
                 decisions: Decisions, recovery: Recovery, deadline: DeadlineDriver,
                 steps: RecoverySteps) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.loss = loss
        self.logs = logs
        self.decisions = decisions
        self.recovery = recovery
        self.deadline = deadline
        self.steps = steps

    async def watch(self, job: JobRow, att: AttemptRow) -> None:
        """Return once the attempt has an outcome (or a recovery happened in place)."""
        assert att.cluster_job_id is not None
        if job.deadline is not None and att.switch_cluster and att.outcome is None:
            await self.deadline.abandon_switch(job, att)  # a switch cut short by a crash
        watched = self.ctx.poller.watch(att.cluster_name, att.cloud, att.region, att.node_ids)
        try:
            await self._watch(job, att, watched)
        finally:
            self.ctx.poller.unwatch(watched)

    async def _watch(self, job: JobRow, att: AttemptRow, watched: Watched) -> None:
        assert att.cluster_job_id is not None
        cfg, ops = self.ctx.cfg, self.ctx.ops
        interval = cfg.poll_min_s
        watch_start = time.time()
        sync = self.logs.sync_for(att)
        pulling: asyncio.Future[int] | None = None
        next_pull = 0.0
        last_ok: float | None = None  # when the agent last answered this controller
        unreachable = 0
        while True:
            await self._pause(job.id, watched, interval)
            if (not unreachable and (pulling is None or pulling.done())
                    and time.monotonic() >= next_pull):
                # Keep the output as it runs (never awaited: it holds up nothing).
                next_pull = time.monotonic() + cfg.log_sync_s
                pulling = self.ctx.log_call(sync.pull, ops.fetch_log_since, att.cluster_name)
                _forget(pulling)
            if not unreachable:  # while backing off, keep the grown interval (see below)
                interval = min(interval * 1.5, self.ctx.poll_cap())
            notices = watched.notices  # read by the poller's last tick
            if notices:
                self.steps.mark(job.id, "detected")
                first = min(notices, key=lambda n: n.received_at)
                if await self.ended_first(job, att, first.received_at):
                    return
                await self.recovery.on_preemption(
                    job, att, (first.node_id,),
                    f"interruption notice for {first.node_id} (grace {first.grace_s:.0f} s)",
                    first.received_at, draining=True, grace_s=max(n.grace_s for n in notices))
                return
            # The agent is asked while the cloud is: a head that died answers nothing for
            # seconds, and the cloud's view is re-read meanwhile (wake on what comes first).
            status = asyncio.ensure_future(self.ctx.watch_call(
                ops.job_status, att.cluster_name, att.cluster_job_id))
            try:
                view, lost = await self._view_until(job, att, watched, status, interval)
            except BaseException:
                _forget(status)
                raise
            if lost:
                _forget(status)
                assert view is not None
                self.steps.mark(job.id, "detected")
                head_lost = bool(att.node_ids) and att.node_ids[0] in lost
                if await self.ended_first(job, att, None, head_lost=head_lost):
                    return
                states = ", ".join(f"{n} {view.get(n, 'missing')}" for n in lost)
                await self.recovery.on_preemption(
                    job, att, lost, f"cloud reports {states}",
                    await self.loss.loss_time(att, last_ok), draining=False)
                return
            try:
                run = await status
            except TransientOpsError as exc:
                unreachable += 1
                down_s = time.time() - (last_ok or watch_start)
                seen = ("unavailable" if view is None else ", ".join(
                    f"{n} {view.get(n, 'missing')}" for n in att.node_ids) or "no nodes")
                if down_s >= cfg.head_unreachable_limit_s:
                    head = att.node_ids[0] if att.node_ids else att.cluster_name
                    await self.recovery.on_preemption(
                        job, att, (head,),
                        f"head node {head} unreachable for {down_s:.0f} s (limit "
                        f"{cfg.head_unreachable_limit_s:.0f} s); the cloud's view never "
                        f"confirmed a loss ({seen}): recovering",
                        await self.loss.loss_time(att, last_ok), draining=False)
                    return
                log.info("job %d: head unreachable (%d in a row, %.0f s: %s); the cloud's view "
                         "does not confirm a loss (%s): not a preemption yet", job.id,
                         unreachable, down_s, exc, seen)
                interval = min(max(interval, cfg.poll_min_s) * 1.5, self.ctx.unreachable_cap())
                continue
            unreachable = 0
            last_ok = time.time()
            if run.health is not None and run.notice is None:
                await self.on_unhealthy(job, att, run)
                return
            if run.notice is not None and not run.status.is_terminal:
                n = run.notice
                await self.recovery.on_preemption(
                    job, att, (n.node_id,),
                    f"interruption notice for {n.node_id} (grace {n.grace_s:.0f} s)",
                    n.received_at, draining=True, grace_s=n.grace_s)
                return
            if run.status.is_terminal:
                self.ctx.hit("job_finished")
                await self.on_run_end(job, att, run)
                return
            if job.deadline is not None and await self.deadline.tick(job, att):
                return

    async def on_unhealthy(self, job: JobRow, att: AttemptRow, run: JobRun) -> None:
        """The agent's health watch failed a node and stopped the job (docs/health.md):
        exclude the node (never reused; an SSH pool host is quarantined) and replace it
        like a lost one: in place where the cloud can, else by relaunching the gang, which
        resumes from its checkpoint."""
        h = run.health
        assert h is not None
        self.steps.mark(job.id, "detected")
        reason = f"node {h.rank} ({h.node_id}) failed the health watch: {h.finding}"
        done = await self.ctx.watch_call(self.ctx.ops.exclude_nodes, att.cluster_name,
                                         (h.node_id,), reason)
        log.info("job %d: %s; excluded: %s", job.id, reason, done)
        await self.recovery.on_preemption(job, att, (h.node_id,), f"{reason}; excluded: {done}",
                                          h.detected_at, draining=False)

    async def _pause(self, job_id: int, watched: Watched, seconds: float) -> None:
        """Wait `seconds`, or less when the poller saw a loss or a notice for the attempt
        (`watched.changed`); raise Cancelled as soon as the job's cancel is requested."""
        cancel = self.ctx.cancels.event(job_id)
        if not cancel.is_set() and not watched.changed.is_set():
            waits = {asyncio.ensure_future(cancel.wait()),
                     asyncio.ensure_future(watched.changed.wait())}
            try:
                await asyncio.wait(waits, timeout=max(0.0, seconds),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        if cancel.is_set():
            raise Cancelled

    async def _view_until(self, job: JobRow, att: AttemptRow, watched: Watched,
                          status: asyncio.Future[JobRun], interval: float
                          ) -> tuple[Mapping[str, NodeState] | None, tuple[str, ...]]:
        """The cloud's view of the attempt's nodes from the poller (the tick that woke the
        watch, else the next tick), and the next ones while `status` (the agent's answer)
        is outstanding; return (the last view, the nodes it reports lost) as soon as some
        are lost, or once `status` is done. A view that cannot be read is no loss (None)."""
        view: Mapping[str, NodeState] | None = None
        while True:
            if watched.changed.is_set() and watched.view is not None:
                view = watched.view  # the tick that saw the loss: no need to wait for another
            else:
                try:
                    view = await self.ctx.poller.fresh(watched)
                except TransientOpsError as exc:
                    log.info("job %d: cloud view unavailable (%s); not a preemption", job.id,
                             exc)
                    view = None
            watched.changed.clear()
            lost = lost_nodes(view, att.node_ids) if view is not None else ()
            if lost or status.done():
                return view, lost
            await asyncio.wait({status}, timeout=max(interval, self.ctx.cfg.poll_min_s))
            if status.done():
                return view, ()

    async def ended_first(self, job: JobRow, att: AttemptRow, lost_at: float | None, *,
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
        if head_lost and not await self.loss.records_survive(att):
            return False
        try:
            run = await asyncio.wait_for(
                self.ctx.watch_call(self.ctx.ops.job_status, att.cluster_name,
                                    att.cluster_job_id),
                timeout=self.ctx.cfg.last_look_s)
        except Exception:
            return False  # the record went with the node: only what was seen counts
        if not run.status.is_terminal or run.notice is not None:
            return False
        if run.status == RunState.FAILED and not await self.loss.failed_before_loss(
                att, run, lost_at):
            return False
        log.info("job %d: the run on %s had already ended (%s, exit %s) when its node(s) "
                 "were lost: its own result stands", job.id, att.cluster_name,
                 run.status.value, run.exit_code)
        self.ctx.hit("job_finished")
        await self.on_run_end(job, att, run, loss_checked=True)
        return True

    async def on_run_end(self, job: JobRow, att: AttemptRow, run: JobRun, *,
                         loss_checked: bool = False) -> None:
        """Decide the end of the attempt's run. A failure on a node the cloud reports lost
        is a preemption unless the run ended before the loss (`loss_checked`: known);
        otherwise the exit code decides (recover_on_exit_codes, restarts on errors)."""
        decide = self.decisions.decide
        if run.status == RunState.SUCCEEDED:
            decide(job, att, Outcome.SUCCEEDED, exit_code=0, reason="job succeeded")
            return
        if run.status == RunState.CANCELLED:
            decide(job, att, Outcome.CANCELLED, reason="cancelled on the cluster")
            return
        if run.notice is not None:
            n = run.notice
            self.recovery.decide_preempted(
                job, att, f"interruption notice for {n.node_id} (job exit {run.exit_code} "
                "after SIGTERM)", n.received_at, draining=False)
            return
        lost = () if loss_checked else await self.loss.confirm_lost(att.cluster_name,
                                                                    att.node_ids)
        if lost and await self.loss.failed_before_loss(att, run, None):
            log.info("job %d: the run failed (exit %s) before node(s) %s were lost: its own "
                     "result stands", job.id, run.exit_code, ", ".join(lost))
            lost = ()
        if lost:
            await self.recovery.on_preemption(
                job, att, lost, f"node(s) {', '.join(lost)} preempted (job exit "
                f"{run.exit_code})", await self.loss.loss_time(att, None), draining=False)
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
            decide(job, att, Outcome.EXIT_CODE, exit_code=run.exit_code,
                   reason=f"job ended with {what} (listed in recover_on_exit_codes)")
        elif decision == ExitDecision.RESTART:
            decide(job, att, Outcome.ERROR_RESTART, exit_code=run.exit_code,
                   reason=f"job failed with {what}; restart {job.restarts_on_errors + 1} "
                   f"of {job.max_restarts_on_errors}")
        else:
            decide(job, att, Outcome.FAILED, exit_code=run.exit_code,
                   reason=f"job failed with {what}")
