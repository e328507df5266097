"""Preemption handling: confirming a loss with the cloud's view, blocking, and replacing
lost nodes of a multi-node cluster in place."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from launcher.jobs import accounting, paths
from launcher.jobs.cluster_ops import LaunchAbortedError, LaunchRequest, Placed, lost_nodes
from launcher.jobs.controller_base import Cancelled
from launcher.jobs.controller_finish import FinishMixin, _LineSink
from launcher.jobs.controller_types import Outcome
from launcher.jobs.crash import SimulatedCrash
from launcher.jobs.recovery import (
    DEADLINE,
    EAGER_NEXT_REGION,
    Where,
    blocks_after_preemption,
    placement_tiers,
)
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")
# Attempt fields that clear an in-place replacement intent.
_NO_INTENT: dict[str, object] = {"replace_lost": None, "replace_at": None,
                                 "replace_reason": None}


def _placement_strategy(strategy: str) -> str:
    """DEADLINE jobs search placements (and block preempted places) like EAGER_NEXT_REGION."""
    return EAGER_NEXT_REGION if strategy == DEADLINE else strategy


class RecoveryMixin(FinishMixin):
    def _gang_run_number(self, job_id: int, att: AttemptRow, *, in_place: bool) -> int:
        """LAUNCHER_ATTEMPT of the gang run about to start for attempt `att`: 1 for the
        job's first gang run, one more for every later one, whatever restarted it (a
        recovery, a restart after an error, an in-place restart after nodes were
        replaced): the gang runs of earlier attempts that submitted their job, plus this
        attempt's runs so far when its gang is restarted in place."""
        earlier = sum(a.gang_runs for a in self.store.attempts(job_id)
                      if a.attempt < att.attempt and a.cluster_job_id is not None)
        return earlier + (att.gang_runs + 1 if in_place else 1)

    def _launch_request(self, job: JobRow, att: AttemptRow, attempts: list[AttemptRow], *,
                        in_place: bool = False, market: str | None = None,
                        before_run: Callable[[], bool] | None = None,
                        drains: bool = True) -> LaunchRequest:
        """The attempt's LaunchRequest. `market` ("spot" / "on_demand") forces the market
        (DEADLINE jobs); `before_run` runs before the drains' gate; `drains=False` ignores
        earlier attempts still running (an ON_DEMAND -> SPOT switch keeps its on-demand
        gang until the spot gang is set up) and records no placement (no attempt row yet)."""
        placed = [a for a in attempts if a.cloud is not None and a.attempt < att.attempt]
        last_where = None
        if placed:
            p = placed[-1]
            last_where = Where(p.cloud or "", p.region, p.zone)
        now = time.time()
        tiers = placement_tiers(_placement_strategy(job.strategy), self.store.blocks(job.id, now),
                                last_where, now, self.cfg.cooldown_s)
        draining = [a for a in attempts if a.attempt < att.attempt and a.torn_down_at is None
                    and a.phase == AttemptPhase.RUNNING] if drains else []
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

        loop = asyncio.get_running_loop()

        def record_placed(p: Placed) -> None:  # on the event loop
            self._mark(job.id, "provisioned")
            cur = self.store.attempt(job.id, att.attempt)
            if cur.cloud is None:
                self.store.update_attempt(
                    job.id, att.attempt, cloud=p.cloud, region=p.region, zone=p.zone,
                    instance_type=p.instance_type, num_nodes=p.num_nodes, use_spot=p.use_spot,
                    node_price=p.node_price)

        def on_provisioned(p: Placed) -> None:  # in the launch worker thread
            if drains:
                loop.call_soon_threadsafe(record_placed, p)

        def gated() -> bool:
            if before_run is not None and not before_run():
                return False
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
                       "LAUNCHER_ATTEMPT": str(self._gang_run_number(job.id, att,
                                                                     in_place=in_place))},
            before_run=gated,
            on_output=setup_log.write,
            on_provisioned=on_provisioned,
            market=market,
        )

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

    async def _loss_time(self, att: AttemptRow, last_heard: float | None) -> float:
        """Best estimate of when the attempt's nodes were lost: the cloud's record when it
        keeps one, else the last time the controller heard from the job, else now;
        never before the attempt ran nor in the future."""
        now = time.time()
        try:
            t = await self._watch_call(self.ops.lost_since, att.cluster_name)
        except Exception:
            t = None
        if t is None:
            t = last_heard if last_heard is not None else now
        return min(now, max(att.running_at or att.created_at, t))

    async def _on_preemption(self, job: JobRow, att: AttemptRow, lost: tuple[str, ...],
                             reason: str, at: float, *, draining: bool,
                             grace_s: float = 0.0) -> None:
        if (not draining and att.num_nodes and att.num_nodes > 1 and len(lost) < att.num_nodes
                and att.cluster_job_id is not None and self.ops.can_replace_nodes(att.cluster_name)):
            if await self._replace_in_place(job, att, lost, reason, at):
                return
            job = self.store.job(job.id)
            reason += "; they could not be replaced in place: relaunching the whole cluster"
        self._decide_preempted(job, att, reason, at, draining=draining, grace_s=grace_s)

    def _decide_preempted(self, job: JobRow, att: AttemptRow, reason: str, at: float, *,
                          draining: bool, grace_s: float = 0.0) -> None:
        self._marks.setdefault(job.id, {}).setdefault("detected", time.time())
        self._mark(job.id, "decided")
        att = self.store.attempt(att.job_id, att.attempt)  # where it was provisioned, if known
        if att.cloud is not None:
            for b in blocks_after_preemption(_placement_strategy(job.strategy), Where(att.cloud, att.region, att.zone),
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
        """Multi-node: replace only the lost nodes when the cloud can. True if done.

        Crash safety: the intent (lost nodes, preemption time, reason: the attempt's
        `replace_*` columns) is written with the RECOVERING transition before the cloud
        is asked; it is
        cleared in the same transaction that records the new gang job. A controller
        restarted in between finds the intent (`_abandon_replace`) and recovers with a
        full relaunch: the cluster (and whatever the interrupted replacement started on
        it) is torn down, so no duplicate gang can run. The old gang run's output is
        saved before the nodes are replaced (`attempt-<n>.run-<k>.log`).

        A cancel meanwhile aborts the replacement like a launch (`_call_cancellable`:
        the cluster's nodes are terminated under it, `before_run` refuses to submit)."""
        req = self._launch_request(job, att, [att], in_place=True)
        lost_s = accounting.work_lost_s(att.checkpoint_dir, att.running_at, at)
        self.store.transition(
            job.id, S.RECOVERING, f"{reason}; replacing only those nodes",
            attempt=att.attempt, recoveries=job.recoveries + 1,
            attempt_fields={"replace_lost": lost, "replace_at": at, "replace_reason": reason,
                            "preempted_at": at,
                            "work_lost_s": (att.work_lost_s or 0.0) + lost_s})
        self._hit("replace_intent_recorded")
        header = (f"=== gang run {att.gang_runs} ended: node(s) {', '.join(lost)} lost; gang "
                  f"restarted after the node(s) were replaced ===")
        await self._save_logs_retrying(
            att, paths.gang_run_log_path(job.id, att.attempt, att.gang_runs), header)
        try:
            launch = await self._call_cancellable(
                job.id, att.cluster_name, "node replacement", self.ops.replace_nodes,
                att.cluster_name, lost, req)
        except LaunchAbortedError:
            raise Cancelled from None
        except (Cancelled, SimulatedCrash):
            raise
        except Exception as exc:
            log.warning("job %d: in-place replacement failed: %r", job.id, exc)
            launch = None
        if launch is None:
            # Fall back to a full relaunch: the recovery is already counted.
            job = self.store.job(job.id)
            self.store.update_job(job.id, recoveries=job.recoveries - 1)
            self.store.update_attempt(job.id, att.attempt, **_NO_INTENT,
                                      work_lost_s=att.work_lost_s)
            return False
        self._hit("nodes_replaced")
        now = time.time()
        self.store.transition(
            job.id, S.RUNNING, f"replaced {len(lost)} node(s) in place; gang restarted "
            f"{now - at:.1f} s after the preemption", attempt=att.attempt,
            last_recovery_s=now - at,
            attempt_fields={"cluster_job_id": launch.cluster_job_id,
                            "node_ids": ",".join(launch.node_ids), "recovery_s": now - at,
                            **_NO_INTENT, "gang_runs": att.gang_runs + 1,
                            "node_price": launch.node_price})
        return True

    def _abandon_replace(self, job: JobRow, att: AttemptRow) -> None:
        """A replacement interrupted by a controller crash: recover by a full relaunch
        (see `_replace_in_place`). The recovery was counted with the intent."""
        at = att.replace_at or att.preempted_at or time.time()
        reason = att.replace_reason or (
            f"node(s) {', '.join(att.replace_lost)} lost" if att.replace_lost else "node(s) lost")
        self.store.update_job(job.id, recoveries=max(0, job.recoveries - 1))
        self.store.update_attempt(job.id, att.attempt, **_NO_INTENT)
        job = self.store.job(job.id)
        self._decide_preempted(job, att, f"{reason} (in-place replacement interrupted by a "
                               "controller restart: relaunching)", at, draining=False)
