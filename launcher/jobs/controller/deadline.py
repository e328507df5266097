"""The DEADLINE strategy's driver: a launcher.spot policy decides, the driver acts (spot,
on-demand, or wait) and records every decision (crash-safety rule 4: before acting).

Decision points (`ControllerConfig.deadline_tick_s`, config `jobs.deadline_tick`): at every
tick since submission (tick k at `submitted_at + k * tick`), and at once after an event
(a preemption, a refused spot launch, a gang stopped). The `Observation` is rebuilt from the
DB only (the deadline log, see deadline_store.py, and the job row), so a controller restarted
after kill -9 decides as before:

- elapsed: clock - submitted_at; deadline: deadline_at - submitted_at;
- progress (`progress: wall`, the default): the sum over the job's gangs of the time each
  made progress, from the later of (its job running after setup, the decision that started
  it + the restart overhead: the overhead covers provisioning, setup and redoing the work
  since the last checkpoint) to when it stopped; a spot gang that takes over from a running
  on-demand gang continues its progress without a gap. `progress: reported`: the largest
  `LAUNCHER_PROGRESS=<fraction>` line the job printed (any attempt; the lines reach the
  controller through the log sync), times the work;
- restart overhead: the task's `restart_overhead`, else the mean (running_at - created_at)
  of the job's attempts that ran, plus their mean work lost, else DEFAULT_RESTART_OVERHEAD_S;
- current: the market of the running attempt (spot / on_demand), IDLE when none runs;
- spot availability: a running spot gang means available; otherwise it is found out when it
  matters: when the policy's answer with spot available (SPOT) differs from its answer
  without, the controller launches a spot gang (the probe): a refusal (NoCapacityError in
  every placement tier) means unavailable and the policy is asked again at once;
- history: spot time observed/available per tick decision, spot preemptions, spot gang time.

Acting: SPOT -> a new attempt with the market forced to spot (placement tiers as
EAGER_NEXT_REGION); ON_DEMAND -> forced on-demand; IDLE (or SPOT refused) -> wait for the
next tick. SPOT -> ON_DEMAND (or IDLE): the spot attempt ends (outcome SWITCHED), its
cluster is taken down, then the new one launches. ON_DEMAND -> SPOT: the spot gang is
launched while the on-demand one runs (`switch_to_spot`), and the on-demand gang is taken
down once the spot gang is set up, right before the spot job is submitted (it resumes from
the checkpoint); a refusal leaves the on-demand gang as it was.

Crash safety (on top of the controller's rules, in the package docstring): the switch's
second cluster name is written to the on-demand attempt (`switch_cluster`) before the cloud
is asked; a restart that finds it with the on-demand attempt still undecided abandons the
switch (tears that cluster down, `abandon_switch`); once the on-demand attempt is decided
SWITCHED, the next attempt takes that cluster name and adopts the spot cluster (or tears
down its leftovers and relaunches).

The gang events the observation is rebuilt from are written by deadline_events.py (they
happen in the launch, the watch and the finisher too); `restart_overhead_s` is a pure
function of the job's attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import threading
from typing import TYPE_CHECKING

from launcher.jobs import deadline_store as dl
from launcher.jobs.controller.clock import DeadlineClock
from launcher.jobs.controller.context import Cancelled, Context
from launcher.jobs.controller.deadline_events import IDLE, ON_DEMAND, SPOT, DeadlineEvents
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import Decisions, Outcome
from launcher.jobs.controller.placement import LaunchRequests
from launcher.jobs.controller.running import RunningRecorder
from launcher.jobs.controller.settings import cluster_name_for
from launcher.jobs.crash import SimulatedCrash
from launcher.jobs.ops_interface import AttemptLaunch, NoCapacityError, lost_nodes
from launcher.jobs.store import AttemptRow, JobRow

if TYPE_CHECKING:
    from launcher.spot.policy import Observation

log = logging.getLogger("launcher.jobs.controller")


@dataclasses.dataclass(frozen=True)
class Choice:
    """A decision: the mode, the spot availability it assumed, whether it is a probe (a
    spot launch will tell whether spot is there), and the observation it was made on."""

    mode: str
    spot_available: bool
    probe: bool
    obs: Observation
    reason: str


class DeadlineDriver:
    """Decides and acts for DEADLINE jobs (see the module docstring)."""

    def __init__(self, ctx: Context, clock: DeadlineClock, events: DeadlineEvents,
                 decisions: Decisions, finisher: Finisher, requests: LaunchRequests,
                 running: RunningRecorder, loss: LossDetector) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.cfg = ctx.cfg
        self.clock = clock
        self.events = events
        self.decisions = decisions
        self.finisher = finisher
        self.requests = requests
        self.running = running
        self.loss = loss
        # (job, attempt) -> the tick its watch last found nothing to do at (in memory, to
        # skip re-reading the deadline log on every poll within a tick).
        self._quiet: dict[tuple[int, int], int] = {}

    # ---- the observation ----------------------------------------------------------------

    def tick_of(self, job: JobRow, at: float) -> int:
        """The job's tick at time `at` (tick k begins at `submitted_at + k * tick`)."""
        return max(0, math.floor((at - job.submitted_at) / self.cfg.deadline_tick_s + 1e-9))

    def tick_at(self, job: JobRow, tick: int) -> float:
        """When the job's tick `tick` begins."""
        return job.submitted_at + tick * self.cfg.deadline_tick_s

    def observe(self, job: JobRow, current: str, spot_available: bool,
                rows: list[dl.DeadlineLogRow], now: float) -> Observation:
        """The policy's observation, rebuilt from the job's row, attempts and deadline
        log `rows` only (see the module docstring)."""
        from launcher.spot.policy import Mode, Observation, SpotHistory

        assert job.deadline is not None
        attempts = self.store.attempts(job.id)
        tick = self.cfg.deadline_tick_s
        observed = available = spot_run = 0.0
        last_tick: dict[int, bool] = {}
        for r in rows:
            if r.kind == "decision" and r.tick is not None and r.spot_available is not None:
                last_tick[r.tick] = r.spot_available
        for k, up in last_tick.items():
            if k < self.tick_of(job, now):
                observed += tick
                available += tick if up else 0.0
        preemptions = sum(1 for r in rows if r.kind == "stopped" and r.mode == SPOT
                          and r.reason.startswith(Outcome.PREEMPTED))
        spot_start: dict[int, float] = {}
        launched: dict[int, float] = {}
        for r in rows:  # a spot gang counts from the decision that launched it
            if r.kind == "decision" and r.mode == SPOT and r.attempt is not None:
                launched[r.attempt] = r.at
            elif r.kind == "running" and r.mode == SPOT and r.attempt is not None:
                spot_start[r.attempt] = launched.get(r.attempt, r.at)
            elif r.kind == "stopped" and r.attempt in spot_start:
                spot_run += max(0.0, r.at - spot_start.pop(r.attempt))
        spot_run += sum(max(0.0, now - s) for s in spot_start.values())
        return Observation(
            elapsed_s=now - job.submitted_at,
            deadline_s=job.deadline.deadline_at - job.submitted_at,
            work_s=job.deadline.work_s,
            done_s=dl.progress_s(job, rows, now, dl.local_checkpoint_dirs(attempts)),
            restart_overhead_s=restart_overhead_s(job, attempts),
            current=Mode(current),
            spot_available=spot_available,
            tick_s=tick,
            history=SpotHistory(observed, available, preemptions, spot_run),
        )

    def choose(self, job: JobRow, current: str, known: bool | None, why: str,
               rows: list[dl.DeadlineLogRow], now: float) -> Choice:
        """Ask the policy. `known`: spot availability when known (a spot gang runs: True;
        just preempted or refused: False); None: unknown - probed when it matters."""
        from launcher.spot.policy import Mode, policy_by_name

        assert job.deadline is not None
        policy = policy_by_name(job.deadline.policy)
        if known is not None:
            obs = self.observe(job, current, known, rows, now)
            return Choice(str(policy.decide(obs)), known, False, obs, why)
        with_spot = self.observe(job, current, True, rows, now)
        without = dataclasses.replace(with_spot, spot_available=False)
        m_with, m_without = policy.decide(with_spot), policy.decide(without)
        if m_with == m_without:
            return Choice(str(m_with), _last_seen(rows), False, with_spot, why)
        if m_with == Mode.SPOT:
            return Choice(SPOT, True, True, with_spot,
                          why + "; spot wanted if available: trying it")
        seen = _last_seen(rows)
        obs = with_spot if seen else without
        return Choice(str(policy.decide(obs)), seen, False, obs, why)

    def record_choice(self, job: JobRow, c: Choice, now: float, attempt: int | None) -> None:
        """Log decision `c` (before it is acted on; `attempt`: the attempt it launches)."""
        obs = c.obs
        slack = obs.slack_s
        dl.add_log(self.store, job.id, now, "decision", c.reason, tick=self.tick_of(job, now),
                   mode=c.mode, current=str(obs.current), spot_available=c.spot_available,
                   done_s=obs.done_s, slack_s=slack, restart_overhead_s=obs.restart_overhead_s,
                   attempt=attempt)
        log.info("job %d: deadline tick %d: %s -> %s (%s; progress %.0f/%.0f s, slack %.0f s, "
                 "spot %s%s)", job.id, self.tick_of(job, now), obs.current, c.mode, c.reason,
                 obs.done_s, obs.work_s, slack, "up" if c.spot_available else "down",
                 ", probing" if c.probe else "")

    # ---- before a new attempt -------------------------------------------------------------

    async def market(self, job: JobRow, attempts: list[AttemptRow]) -> str | None:
        """The market of the next attempt (spot / on_demand); None after waiting for the
        next tick (IDLE: the driver loop comes back). Decides when a tick began or an event
        happened since the last decision; a decision taken but not yet launched (a crash
        in between) is launched as decided."""
        now = self.clock.now()
        rows = dl.log_rows(self.store, job.id)
        n = attempts[-1].attempt + 1 if attempts else 1
        last = _last_decision(rows)
        tick = self.tick_of(job, now)
        event = last is not None and any(
            r.id > last.id and (r.kind == "refused" or (
                r.kind == "stopped" and not r.reason.startswith("switched to")))
            for r in rows)  # a gang stopped by the decision itself is no new event
        if last is not None and not event and last.tick == tick:
            if last.mode in (SPOT, ON_DEMAND) and last.attempt == n and not (
                    last.mode == SPOT and not last.spot_available):
                return last.mode
            self.clock.settled(job.id, tick)
            cancel = self.ctx.cancels.event(job.id)
            await self.clock.sleep_until(self.tick_at(job, tick + 1), cancel)
            if cancel.is_set():
                raise Cancelled
            return None
        known = False if event and _last_event_says_down(rows, last) else None
        why = ("spot launch refused" if event and rows[-1].kind == "refused" else
               "preempted" if event and known is False else
               "gang stopped" if event else "tick")
        c = self.choose(job, IDLE, known, why, rows, now)
        self.record_choice(job, c, now, n)
        self.ctx.hit("deadline_decided")
        if c.mode == ON_DEMAND or (c.mode == SPOT and c.spot_available):
            return c.mode
        return None  # IDLE, or waiting for spot: the next call waits for the next tick

    # ---- while an attempt runs ------------------------------------------------------------

    async def tick(self, job: JobRow, att: AttemptRow) -> bool:
        """Called on every pass of the watch: decide when a new tick began (or act on this
        tick's decision when a restart came between deciding and acting). True when the
        attempt was decided (the watch returns and the driver applies it)."""
        now = self.clock.now()
        tick = self.tick_of(job, now)
        key = (job.id, att.attempt)
        if self._quiet.get(key) == tick:
            self.clock.settled(job.id, tick)
            return False
        self._quiet.pop(key, None)
        acted = await self._tick_now(job, att, now, tick)
        if not acted:
            self._quiet[key] = tick
        return acted

    async def _tick_now(self, job: JobRow, att: AttemptRow, now: float,
                        tick: int) -> bool:
        rows = dl.log_rows(self.store, job.id)
        last = _last_decision(rows)
        current = att.market or (SPOT if att.use_spot else ON_DEMAND)
        if last is not None and last.tick is not None and last.tick >= tick:
            if current == ON_DEMAND and last.mode == SPOT and any(
                    r.kind == "refused" and r.id > last.id for r in rows):
                return await self._after_refused_switch(job, att, tick)
            unacted = (last.mode != current and last.attempt == att.attempt + 1
                       and not (last.mode == SPOT and not last.spot_available))
            if not unacted:
                self.clock.settled(job.id, tick)
                return False
            return await self._act(job, att, current, last.mode or IDLE, last.reason, tick)
        if current == SPOT:  # a loss seen now is the watch's to handle, not a decision's
            with contextlib.suppress(Exception):
                view = await self.ctx.watch_call(self.ctx.ops.cloud_view, att.cluster_name)
                if lost_nodes(view, att.node_ids):
                    return False
        c = self.choose(job, current, True if current == SPOT else None, "tick", rows, now)
        self.record_choice(job, c, now, att.attempt + 1 if c.mode != current else None)
        self.ctx.hit("deadline_decided")
        if c.mode == current or (c.mode == SPOT and not c.spot_available
                                 and current == ON_DEMAND):
            self.clock.settled(job.id, tick)
            return False
        return await self._act(job, att, current, c.mode, c.reason, tick)

    async def _act(self, job: JobRow, att: AttemptRow, current: str, mode: str, reason: str,
                   tick: int) -> bool:
        """Move the running attempt `att` (market `current`) to `mode`."""
        if current == ON_DEMAND and mode == SPOT:
            switched = await self.switch_to_spot(job, att)
            if switched is None:  # the on-demand run ended meanwhile: the watch applies it
                return False
            if switched:
                return True
            return await self._after_refused_switch(job, att, tick)
        return self._stop_for(job, att, current, mode, reason)

    async def _after_refused_switch(self, job: JobRow, att: AttemptRow, tick: int) -> bool:
        """A switch to spot was refused: ask again at once, spot known down."""
        now = self.clock.now()
        rows = dl.log_rows(self.store, job.id)
        c = self.choose(job, ON_DEMAND, False, "spot launch refused", rows, now)
        self.record_choice(job, c, now, att.attempt + 1 if c.mode == IDLE else None)
        if c.mode in (ON_DEMAND, SPOT):  # SPOT while down = wait: keep what runs
            self.clock.settled(job.id, tick)
            return False
        return self._stop_for(job, att, ON_DEMAND, c.mode, c.reason)

    def _stop_for(self, job: JobRow, att: AttemptRow, current: str, mode: str,
                  reason: str) -> bool:
        """End `att` (SWITCHED) so the driver launches `mode` next (or waits: IDLE)."""
        what = "on-demand" if mode == ON_DEMAND else "nothing (waiting for spot)"
        self.events.stopped(job, att, f"switched to {mode}")
        self.decisions.decide(job, att, Outcome.SWITCHED, reason=f"deadline policy: moving "
                              f"from {current.replace('_', '-')} to {what} ({reason})")
        return True

    # ---- ON_DEMAND -> SPOT ----------------------------------------------------------------

    async def switch_to_spot(self, job: JobRow, od: AttemptRow) -> bool | None:
        """Launch a spot gang while the on-demand attempt `od` runs; once it is set up, end
        `od` (SWITCHED, its cluster down) and run the job on the spot gang. True when
        switched; False when the spot launch failed (`od` goes on untouched); None when
        `od`'s run ended meanwhile (the spot gang is torn down, `od`'s result stands)."""
        n = od.attempt + 1
        name = cluster_name_for(self.cfg.cluster_prefix, job.id, n)
        od = self.store.update_attempt(job.id, od.attempt, switch_cluster=name)  # intent
        self.ctx.hit("switch_intent_recorded")
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        proceed = threading.Event()
        dead = threading.Event()  # this controller died meanwhile (tests: SimulatedCrash)
        flag = self.ctx.cancels.flag(job.id)

        def before_run() -> bool:  # launch worker: the spot gang is set up
            loop.call_soon_threadsafe(ready.set)
            while not proceed.wait(0.05):
                if flag.is_set() or dead.is_set():
                    return False
            return not flag.is_set() and not dead.is_set()

        attempts = self.store.attempts(job.id)
        nxt = dataclasses.replace(od, attempt=n, cluster_name=name, cause="switch",
                                  market=SPOT, gang_runs=1, cloud=None)
        req = self.requests.build(job, nxt, attempts, market=SPOT, before_run=before_run,
                                  drains=False)
        fut = asyncio.ensure_future(self.ctx.launch_call(self.ctx.ops.provision_and_start,
                                                         req))
        try:
            return await self._hand_over(job, od, n, name, fut, ready, proceed, dead)
        except BaseException:
            dead.set()
            raise

    async def _hand_over(self, job: JobRow, od: AttemptRow, n: int, name: str,
                         fut: asyncio.Future[AttemptLaunch], ready: asyncio.Event,
                         proceed: threading.Event, dead: threading.Event) -> bool | None:
        """The rest of `switch_to_spot`: wait for the spot gang, then hand over."""
        nxt = dataclasses.replace(od, attempt=n, cluster_name=name, cause="switch",
                                  market=SPOT, gang_runs=1, cloud=None)
        ready_wait = asyncio.ensure_future(ready.wait())
        cancel_wait = asyncio.ensure_future(self.ctx.cancels.event(job.id).wait())
        waits: set[asyncio.Future[object]] = {fut, ready_wait, cancel_wait}  # type: ignore[arg-type]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready_wait.cancel()
            cancel_wait.cancel()
        if self.ctx.cancels.event(job.id).is_set():
            proceed.set()
            await self.ctx.launch_call(self.ctx.ops.abort_launch, name)
            with contextlib.suppress(Exception):
                await fut
            await self.abandon_switch(job, od)
            raise Cancelled
        if not ready.is_set():  # the launch ended before its gang was set up: refused/failed
            try:
                fut.result()
                reason = "the spot launch ended before its job ran"
            except NoCapacityError as exc:
                reason = str(exc)
                self.events.refused(job, nxt, reason)
            except (SimulatedCrash, Cancelled):
                raise
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
                self.events.refused(job, nxt, reason)
            log.info("job %d: switch to spot failed (%s): staying on on-demand", job.id, reason)
            await self.abandon_switch(job, od)
            return False
        if await self.loss.run_ended(od):  # the job finished on on-demand meanwhile: keep that
            log.info("job %d: the on-demand run ended during the switch to spot: the spot "
                     "gang is not used", job.id)
            dead.set()
            await self.ctx.launch_call(self.ctx.ops.abort_launch, name)
            with contextlib.suppress(Exception):
                await fut
            await self.abandon_switch(job, od)
            return None
        # The spot gang is up: hand over. The on-demand gang's progress ends where the spot
        # gang's starts.
        rows = dl.log_rows(self.store, job.id)
        decided = [r for r in rows if r.kind == "decision" and r.attempt == n]
        now = self.clock.now()
        at = max(now, decided[-1].at + (decided[-1].restart_overhead_s or 0.0)) if decided else now
        self.events.stopped(job, od, "switched to spot", at)
        self.decisions.decide(job, od, Outcome.SWITCHED, reason="deadline policy: the spot "
                              "gang is up: moving from on-demand to spot")
        self.ctx.hit("switch_decided")
        try:
            od_now = self.store.attempt(job.id, od.attempt)
            await self.finisher.finalize_attempt(od_now, fetch_logs=True)
            self.ctx.hit("switch_old_down")
        finally:
            proceed.set()
        try:
            launch = await fut
        except (SimulatedCrash, Cancelled):
            raise
        except Exception as exc:  # the driver applies SWITCHED and relaunches by policy
            log.warning("job %d: the spot gang failed after set-up: %r", job.id, exc)
            return True
        await self.finisher.apply_outcome(self.store.job(job.id),
                                          self.store.attempt(job.id, od.attempt))
        att = self.store.add_attempt(job.id, n, name, "switch", market=SPOT)
        self.ctx.hit("switch_attempt_recorded")
        self.running.record(self.store.job(job.id), att, launch)
        return True

    async def abandon_switch(self, job: JobRow, od: AttemptRow) -> None:
        """Tear down an ON_DEMAND -> SPOT switch's cluster (partial or whole) and clear the
        intent; the on-demand attempt goes on."""
        if od.switch_cluster:
            await self.ctx.launch_call(self.ctx.ops.teardown, od.switch_cluster)
        self.store.update_attempt(job.id, od.attempt, switch_cluster=None)

    async def resume_switch(self, job: JobRow, last: AttemptRow) -> bool:
        """After a crash: an on-demand attempt decided SWITCHED with its spot cluster named
        gets the next attempt under that name (PROVISIONING: the driver adopts the cluster
        or tears its leftovers down and relaunches it). True when done."""
        if last.outcome != Outcome.SWITCHED or not last.switch_cluster:
            return False
        n = last.attempt + 1
        if last.switch_cluster != cluster_name_for(self.cfg.cluster_prefix, job.id, n):
            return False
        self.store.add_attempt(job.id, n, last.switch_cluster, "switch", market=SPOT)
        self.store.update_attempt(job.id, last.attempt, switch_cluster=None)
        log.info("job %d: resuming the switch to spot on %s", job.id, last.switch_cluster)
        return True


def restart_overhead_s(job: JobRow, attempts: list[AttemptRow]) -> float:
    """The restart overhead the policy assumes for DEADLINE job `job`: its task's
    `restart_overhead`, else the mean provisioning + setup time of its attempts that ran
    plus their mean work lost, else DEFAULT_RESTART_OVERHEAD_S."""
    from launcher.task.policies import DEFAULT_RESTART_OVERHEAD_S

    assert job.deadline is not None
    if job.deadline.restart_overhead_s is not None:
        return job.deadline.restart_overhead_s
    # (a switch's spot attempt is recorded once its gang is up: it says nothing)
    ran = [a for a in attempts if a.running_at is not None and a.cause != "switch"]
    if not ran:
        return DEFAULT_RESTART_OVERHEAD_S
    start = sum(max(0.0, (a.running_at or 0.0) - a.created_at) for a in ran) / len(ran)
    lost = [a.work_lost_s for a in ran if a.work_lost_s is not None]
    return start + (sum(lost) / len(lost) if lost else 0.0)


def _last_decision(rows: list[dl.DeadlineLogRow]) -> dl.DeadlineLogRow | None:
    for r in reversed(rows):
        if r.kind == "decision":
            return r
    return None


def _last_seen(rows: list[dl.DeadlineLogRow]) -> bool:
    """Spot availability as last seen: a refusal or a preemption says down, a spot gang
    running says up; True before any evidence (so spot is tried first)."""
    for r in reversed(rows):
        if r.kind == "refused":
            return False
        if r.kind == "stopped" and r.mode == SPOT and r.reason.startswith(Outcome.PREEMPTED):
            return False
        if r.kind == "running" and r.mode == SPOT:
            return True
    return True


def _last_event_says_down(rows: list[dl.DeadlineLogRow], last: dl.DeadlineLogRow | None
                          ) -> bool:
    after = [r for r in rows if last is None or r.id > last.id]
    return any(r.kind == "refused" or (r.kind == "stopped" and r.mode == SPOT
                                       and r.reason.startswith(Outcome.PREEMPTED))
               for r in after)
