"""Detecting a loss: what the cloud's view (and the head node's agent) says about an
attempt's nodes and its run. Only the cloud's view confirms a loss: an unreachable head
is never a preemption by itself.

Every question goes through the status workers (`Context.watch_call`); a question the
cloud cannot answer just now is answered "no loss" (or "not known"), never raised.
"""

from __future__ import annotations

import asyncio
import logging
import time

from launcher.jobs.controller.context import Context
from launcher.jobs.ops_interface import JobRun, lost_nodes
from launcher.jobs.store import AttemptRow

log = logging.getLogger("launcher.jobs.controller")


class LossDetector:
    """Questions about an attempt's nodes, asked of `ctx.ops` in status workers."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def confirm_lost(self, cluster: str, expected: tuple[str, ...],
                           wait_s: float | None = None) -> tuple[str, ...]:
        """Nodes the cloud confirms lost, looking twice `wait_s` apart (a kill and the
        cloud's report of it are not simultaneous); nodes with an interruption notice
        count as lost. () when the cloud can't be asked."""
        ops = self.ctx.ops
        wait = self.ctx.cfg.failure_confirm_s if wait_s is None else wait_s
        for i in range(2):
            try:
                view = await self.ctx.watch_call(ops.cloud_view, cluster)
                notices = await self.ctx.watch_call(ops.notices, cluster)
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

    async def loss_time(self, att: AttemptRow, last_heard: float | None) -> float:
        """Best estimate of when the attempt's nodes were lost: the cloud's record when it
        keeps one, else the last time the controller heard from the job, else now;
        never before the attempt ran nor in the future."""
        now = time.time()
        try:
            t = await self.ctx.watch_call(self.ctx.ops.lost_since, att.cluster_name)
        except Exception:
            t = None
        if t is None:
            t = last_heard if last_heard is not None else now
        return min(now, max(att.running_at or att.created_at, t))

    async def all_nodes_lost(self, att: AttemptRow) -> bool:
        """True when the cloud reports every node of the attempt lost."""
        if not att.node_ids:
            return False
        try:
            view = await self.ctx.watch_call(self.ctx.ops.cloud_view, att.cluster_name)
        except Exception:
            return False
        return set(att.node_ids) <= set(lost_nodes(view, att.node_ids))

    async def head_gone(self, att: AttemptRow) -> bool:
        """True when the cloud reports the attempt's head node gone (no log to wait for)."""
        if not att.node_ids:
            return False
        try:
            view = await self.ctx.watch_call(self.ctx.ops.cloud_view, att.cluster_name)
        except Exception:
            return False
        return att.node_ids[0] in lost_nodes(view, att.node_ids[:1])

    async def records_survive(self, att: AttemptRow) -> bool:
        """True when the head's job record and logs outlive its node (see ClusterOps)."""
        try:
            return bool(await self.ctx.watch_call(self.ctx.ops.records_survive_loss,
                                                  att.cluster_name))
        except Exception:
            return False

    async def failed_before_loss(self, att: AttemptRow, run: JobRun,
                                 lost_at: float | None) -> bool:
        """True when the agent recorded the run's end before its nodes were lost
        (`lost_at`; None: the cloud's record of the loss, when it keeps one)."""
        if lost_at is None:
            try:
                lost_at = await self.ctx.watch_call(self.ctx.ops.lost_since, att.cluster_name)
            except Exception:
                lost_at = None
        return run.ended_at is not None and lost_at is not None and run.ended_at < lost_at

    async def run_ended(self, att: AttemptRow) -> bool:
        """True when the agent reports `att`'s run ended (False when it cannot be asked)."""
        if att.cluster_job_id is None:
            return False
        try:
            run = await self.ctx.watch_call(self.ctx.ops.job_status, att.cluster_name,
                                            att.cluster_job_id)
        except Exception:
            return False
        return run.status.is_terminal
