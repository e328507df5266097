"""Deadline-aware spot policies: pure decision rules shared by the simulator and the controller.

Contract (issue 13, shared by `launcher/spot/simulate.py` and the managed-jobs controller):
`decide(obs)` is a pure function of the `Observation` (no hidden state, no I/O, stdlib only), so
the simulator and the live controller decide the same on the same observations, and a controller
restarted after kill -9 decides as before.

Progress model: the job needs `work_s` seconds of healthy running; `done_s` of it is durable.
Starting a gang (into SPOT or ON_DEMAND from anything else) costs `restart_overhead_s` of paid
time with no progress. ON_DEMAND -> SPOT keeps the on-demand gang running (and progressing) until
the spot gang is up, so that switch costs money (the overlap) but no slack. Decisions are taken at
least every `tick_s`.

Slack = (deadline - elapsed) - (work - done): the time the job may still lose. Idling loses slack
at rate 1, running loses none after its overhead, a restart loses `restart_overhead_s`.

The deadline guarantee, common to every deadline policy here (`_must_run_on_demand`): whenever the
slack is below `restart_overhead_s + tick_s` (plus a tiny epsilon), the decision is ON_DEMAND.
Induction: if a decision point has slack >= overhead, either the rule fires (on-demand from here
costs at most one overhead, so the job finishes by the deadline and never leaves on-demand again:
its slack stays below the threshold), or slack >= overhead + tick, and whatever happens until the
next decision point (at most one tick of idling, or of a gang's overhead, or a preemption) loses
at most one tick, so the next decision point has slack >= overhead again. At submission the slack
is `deadline - work`, so `work + overhead <= deadline` is enough.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

EPS_S = 1e-6


class Mode(enum.StrEnum):
    IDLE = "idle"  # nothing running (waiting for spot)
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class SpotHistory:
    """What has been observed of spot so far. Every field is computable by the controller from its
    own records (attempt rows and availability probes), so a restarted controller decides the same.

    observed_s: seconds of spot availability observed (up or down).
    available_s: of which spot was available.
    preemptions: spot losses seen so far (a running spot gang lost).
    spot_run_s: seconds a spot gang actually ran (overhead included); added for `Ours`, default 0.
    """

    observed_s: float = 0.0
    available_s: float = 0.0
    preemptions: int = 0
    spot_run_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Observation:
    """One decision point. All times in seconds; `elapsed_s` and `deadline_s` count from submission.

    `current` is what runs right now (IDLE after a preemption); `spot_available` says a spot gang
    can run now; `tick_s` is the longest time until the next decision point.
    """

    elapsed_s: float
    deadline_s: float
    work_s: float
    done_s: float
    restart_overhead_s: float
    current: Mode
    spot_available: bool
    tick_s: float
    history: SpotHistory = field(default_factory=SpotHistory)

    @property
    def remaining_work_s(self) -> float:
        return max(0.0, self.work_s - self.done_s)

    @property
    def remaining_time_s(self) -> float:
        return self.deadline_s - self.elapsed_s

    @property
    def slack_s(self) -> float:
        """Time the job may still lose and finish by the deadline (negative: already late)."""
        return self.remaining_time_s - self.remaining_work_s


class DeadlinePolicy(Protocol):
    name: str

    def decide(self, obs: Observation) -> Mode: ...


def _finished(obs: Observation) -> bool:
    return obs.remaining_work_s <= EPS_S


def _must_run_on_demand(obs: Observation) -> bool:
    """The shared safety net: the slack can no longer absorb another tick plus a restart."""
    return obs.slack_s < obs.restart_overhead_s + obs.tick_s + EPS_S


class OnDemandOnly:
    """Always on-demand: the reference cost (no spot at all)."""

    name = "on_demand"

    def decide(self, obs: Observation) -> Mode:
        if _finished(obs):
            return Mode.IDLE
        return Mode.ON_DEMAND


class Greedy:
    """Spot whenever available, idle otherwise; once the slack runs out (the shared safety net),
    on-demand to the end (its slack never recovers, so it never leaves on-demand)."""

    name = "greedy"

    def decide(self, obs: Observation) -> Mode:
        if _finished(obs):
            return Mode.IDLE
        if _must_run_on_demand(obs):
            return Mode.ON_DEMAND
        if obs.current == Mode.ON_DEMAND:
            return Mode.ON_DEMAND
        return Mode.SPOT if obs.spot_available else Mode.IDLE


class UniformProgress:
    """Uniform Progress, from Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under
    Deadlines", NSDI 2024 (the rule as stated in the paper and in the authors' simulator,
    skypilot-org/sky_spot's uniform-progress strategy). With C0 = work, D = deadline, d = restart
    overhead, cp(t) = durable progress, ep(t) = t * C0 / D (the uniform-progress line):

    1. Uniform progress: idle and cp(t) < ep(t) -> on-demand, to catch up.
    2. Taking risks / exploitation: spot whenever it is available (even when behind); stay on
       spot until preempted.
    3. Hysteresis: on on-demand, stay on it until cp(t) >= ep(t + 2d).
    4. Safety net: when R(t) < C(t) + 2d (remaining time vs remaining work), on-demand to the end.

    Here the safety net also covers the tick granularity (threshold max(2d, d + tick)), which is
    the shared guarantee of this module; with d >= tick it is the paper's 2d.
    """

    name = "uniform_progress"

    def decide(self, obs: Observation) -> Mode:
        if _finished(obs):
            return Mode.IDLE
        d = obs.restart_overhead_s
        if _must_run_on_demand(obs) or obs.slack_s < 2 * d:
            return Mode.ON_DEMAND
        rate = obs.work_s / obs.deadline_s if obs.deadline_s > 0 else 1.0
        if obs.current == Mode.ON_DEMAND and obs.done_s < (obs.elapsed_s + 2 * d) * rate:
            return Mode.ON_DEMAND
        if obs.spot_available:
            return Mode.SPOT
        if obs.done_s < obs.elapsed_s * rate:
            return Mode.ON_DEMAND
        return Mode.IDLE


class Ours:
    """The default ("launcher") policy: keep enough slack for the restarts still to come, spend
    the rest waiting for spot, and bridge outages on on-demand once the slack reaches that reserve.

    - Spot whenever it is available and the slack is above the shared safety net (from on-demand
      too: that switch costs only the overlap, no slack).
    - Spot unavailable: idle while the slack is above the reserve, else on-demand (which holds the
      slack constant while it runs); once on on-demand, stay there until spot returns (stopping
      it to wait would cost another restart, in money and slack).
    - Reserve = one restart overhead + two ticks (enough to fall back to on-demand after one more
      preemption) + `beta` x overhead x the expected number of future preemptions, estimated as
      the observed preemption rate of spot gangs (with a prior of `prior_preemptions` per
      `prior_spot_h` hours) times the remaining work.
    """

    name = "launcher"

    def __init__(
        self,
        beta: float = 2.0,
        prior_preemptions: float = 1.0,
        prior_spot_h: float = 4.0,
    ) -> None:
        self.beta = beta
        self.prior_preemptions = prior_preemptions
        self.prior_spot_h = prior_spot_h

    def preemption_rate_per_s(self, history: SpotHistory) -> float:
        return (history.preemptions + self.prior_preemptions) / (
            history.spot_run_s + self.prior_spot_h * 3600.0
        )

    def reserve_s(self, obs: Observation) -> float:
        d = obs.restart_overhead_s
        future = self.preemption_rate_per_s(obs.history) * obs.remaining_work_s
        return d + 2 * obs.tick_s + self.beta * d * future

    def decide(self, obs: Observation) -> Mode:
        if _finished(obs):
            return Mode.IDLE
        if _must_run_on_demand(obs):
            return Mode.ON_DEMAND
        if obs.spot_available:
            return Mode.SPOT
        if obs.current == Mode.ON_DEMAND or obs.slack_s < self.reserve_s(obs):
            # on-demand holds the slack; stopping it to wait would cost a restart later
            return Mode.ON_DEMAND
        return Mode.IDLE


POLICIES: dict[str, type[OnDemandOnly] | type[Greedy] | type[UniformProgress] | type[Ours]] = {
    OnDemandOnly.name: OnDemandOnly,
    Greedy.name: Greedy,
    UniformProgress.name: UniformProgress,
    Ours.name: Ours,
}
DEFAULT_POLICY = Ours.name


def policy_by_name(name: str) -> DeadlinePolicy:
    """The policy called `name` ("on_demand", "greedy", "uniform_progress", "launcher"; "ours" is
    an alias of "launcher"). Raises ValueError naming the known policies."""
    key = name.strip().lower().replace("-", "_")
    if key == "ours":
        key = Ours.name
    cls = POLICIES.get(key)
    if cls is None:
        raise ValueError(f"unknown spot policy {name!r}; known policies: {', '.join(POLICIES)}")
    return cls()
