"""Building an attempt's LaunchRequest: where it may go (the placement tiers of its
recovery strategy, given the places its preemptions blocked), what it runs (the task,
its environment), and when it may submit its job (after the drains of earlier attempts,
unless the job was cancelled).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from launcher.jobs.controller.context import Context, RecoverySteps
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.logs import AttemptLogs
from launcher.jobs.ops_interface import LaunchRequest, Placed
from launcher.jobs.recovery import (
    DEADLINE,
    EAGER_NEXT_REGION,
    PlacementTier,
    Where,
    placement_tiers,
)
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")


def placement_strategy(strategy: str) -> str:
    """DEADLINE jobs search placements (and block preempted places) like EAGER_NEXT_REGION."""
    return EAGER_NEXT_REGION if strategy == DEADLINE else strategy


class LaunchRequests:
    """Makes LaunchRequests; records where an attempt was provisioned as soon as the
    cloud says (`on_provisioned`), so an attempt that ends during setup is billed and
    blocked where it ran."""

    def __init__(self, ctx: Context, finisher: Finisher, logs: AttemptLogs,
                 steps: RecoverySteps) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.finisher = finisher
        self.logs = logs
        self.steps = steps

    def tiers(self, job: JobRow, att: AttemptRow, attempts: list[AttemptRow],
              now: float) -> list[PlacementTier]:
        """The placement tiers of attempt `att`: the job's strategy applied to the places
        its preemptions block at `now`, from where its last placed attempt ran."""
        placed = [a for a in attempts if a.cloud is not None and a.attempt < att.attempt]
        last_where = None
        if placed:
            p = placed[-1]
            last_where = Where(p.cloud or "", p.region, p.zone)
        return placement_tiers(placement_strategy(job.strategy), self.store.blocks(job.id, now),
                               last_where, now, self.ctx.cfg.cooldown_s)

    def gang_run_number(self, job_id: int, att: AttemptRow, *, in_place: bool) -> int:
        """LAUNCHER_ATTEMPT of the gang run about to start for attempt `att`: 1 for the
        job's first gang run, one more for every later one, whatever restarted it (a
        recovery, a restart after an error, an in-place restart after nodes were
        replaced): the gang runs of earlier attempts that submitted their job, plus this
        attempt's runs so far when its gang is restarted in place."""
        earlier = sum(a.gang_runs for a in self.store.attempts(job_id)
                      if a.attempt < att.attempt and a.cluster_job_id is not None)
        return earlier + (att.gang_runs + 1 if in_place else 1)

    def build(self, job: JobRow, att: AttemptRow, attempts: list[AttemptRow], *,
              in_place: bool = False, market: str | None = None,
              before_run: Callable[[], bool] | None = None,
              drains: bool = True) -> LaunchRequest:
        """The attempt's LaunchRequest. `market` ("spot" / "on_demand") forces the market
        (DEADLINE jobs); `before_run` runs before the drains' gate; `drains=False` ignores
        earlier attempts still running (an ON_DEMAND -> SPOT switch keeps its on-demand
        gang until the spot gang is set up) and records no placement (no attempt row yet).
        Must be called on the event loop."""
        now = time.time()
        tiers = self.tiers(job, att, attempts, now)
        draining = [a for a in attempts if a.attempt < att.attempt and a.torn_down_at is None
                    and a.phase == AttemptPhase.RUNNING] if drains else []
        gate = threading.Event()
        if draining:
            waiters = [self.finisher.ensure_drain(job, a) for a in draining]
            loop = asyncio.get_running_loop()

            async def open_gate() -> None:
                await asyncio.gather(*waiters, return_exceptions=True)
                gate.set()

            loop.create_task(open_gate())
        else:
            gate.set()
        flag = self.ctx.cancels.flag(job.id)
        setup_log = self.logs.setup_sink(job.id, att.attempt)

        loop = asyncio.get_running_loop()

        def record_placed(p: Placed) -> None:  # on the event loop
            self.steps.mark(job.id, "provisioned")
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
            task=self.ctx.task_loader(job),
            tiers=tuple(tiers),
            task_id=job.task_id,
            job_name=job.name,
            env_extra={"LAUNCHER_MANAGED_JOB_ID": str(job.id),
                       "LAUNCHER_ATTEMPT": str(self.gang_run_number(job.id, att,
                                                                    in_place=in_place))},
            before_run=gated,
            on_output=setup_log.write,
            on_provisioned=on_provisioned,
            market=market,
        )
