"""The reference driver of the deadline policies: replay spot traces through a policy.

Model (the same the controller follows; see launcher/spot/policy.py):
- Time advances in the traces' ticks; the policy decides at every tick.
- Spot is available at a tick when some zone has at least `n_nodes` instances (the whole gang).
  A spot gang stays in its zone while that zone is up; when the zone goes down the gang is
  preempted (the job is IDLE at once, progress kept) and the policy is asked again. A new spot gang
  starts in the cheapest available zone at that tick (every start is a restart).
- Starting a gang (SPOT or ON_DEMAND from anything else) costs `restart_overhead_s` of paid time
  with no progress; it may span several ticks. ON_DEMAND -> SPOT launches the spot gang while the
  on-demand gang keeps running (and progressing); the on-demand gang is torn down the moment the
  spot gang is up, and both are paid for the overlap. If the zone goes down before the spot gang
  is up, the launch is abandoned and the on-demand gang simply continues. While a spot launch is
  pending the policy sees `current=ON_DEMAND`; deciding SPOT again keeps the launch going.
- Mode SPOT while spot is unavailable means "wait for spot": nothing runs.
- Cost: per-node price x n_nodes per second a gang runs (its overhead included); the spot price
  is the trace's price at the tick (the zone's) when the trace has prices, else `spot_price_h`.
- Traces shorter than the simulated span are replayed cyclically (tick i uses i mod length).
- `deadline_s=math.inf` means no deadline: the policies then never need on-demand; the replay
  stops after `max_ticks` (default: ten times the work, at least one pass over the trace) and
  reports `finished=False` if the work is not done by then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.spot.policy import EPS_S, DeadlinePolicy, Mode, Observation, SpotHistory
from launcher.spot.traces import SpotTrace, align

DEFAULT_SPOT_RATIO = 1.0 / 3.0  # spot price / on-demand price when neither the trace nor the caller says


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision point where the decided mode changed (or a preemption happened)."""

    tick: int
    elapsed_s: float
    mode: Mode
    reason: str


@dataclass(frozen=True, slots=True)
class SimulationResult:
    policy: str
    cost: float
    on_demand_cost: float  # the same work on on-demand only (one start, no deadline issue)
    finished: bool
    finish_h: float | None
    deadline_h: float | None  # None: no deadline
    deadline_met: bool
    preemptions: int
    spot_hours: float
    on_demand_hours: float
    idle_hours: float
    restarts: int
    decisions: tuple[Decision, ...]

    @property
    def savings(self) -> float:
        """1 - cost / on_demand_cost (0.25 = 25% cheaper than on-demand only)."""
        return 1.0 - self.cost / self.on_demand_cost if self.on_demand_cost > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Prices:
    """Per-node $/h; `spot_h` is used at ticks where the trace has no price."""

    on_demand_h: float
    spot_h: float


@dataclass(slots=True)
class _Gang:
    mode: Mode
    zone: int  # -1 for on-demand
    overhead_left_s: float
    price_s: float  # $/s of this gang at the current tick (refreshed every tick for spot)


def _spot_price_s(trace: SpotTrace, tick: int, prices: Prices, n_nodes: int) -> float:
    per_node_h = trace.prices[tick] if trace.prices is not None else prices.spot_h
    return per_node_h * n_nodes / 3600.0


def simulate(
    traces: Sequence[SpotTrace],
    policy: DeadlinePolicy,
    *,
    work_s: float,
    deadline_s: float,
    restart_overhead_s: float,
    prices: Prices,
    n_nodes: int = 1,
    start_tick: int = 0,
    max_ticks: int | None = None,
) -> SimulationResult:
    """Replay `traces` (one per zone, same tick length) from `start_tick` through `policy`."""
    if not traces:
        raise ValueError("at least one trace is needed")
    if work_s <= 0:
        raise ValueError(f"work_s must be > 0, got {work_s}")
    if restart_overhead_s < 0:
        raise ValueError(f"restart_overhead_s must be >= 0, got {restart_overhead_s}")
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    zones = align(traces)
    g = zones[0].gap_s
    length = zones[0].n_ticks
    od_price_s = prices.on_demand_h * n_nodes / 3600.0
    if max_ticks is None:
        if math.isfinite(deadline_s):
            max_ticks = math.ceil((max(deadline_s, 0.0) + work_s + 2 * restart_overhead_s) / g) + 2
        else:
            max_ticks = max(length, math.ceil(10 * (work_s + restart_overhead_s) / g))

    done = 0.0
    cost = 0.0
    spot_s = od_s = idle_s = 0.0
    preemptions = restarts = 0
    hist_obs = hist_avail = spot_run = 0.0
    running: _Gang | None = None
    pending: _Gang | None = None  # a spot gang being launched while on-demand runs
    decisions: list[Decision] = []
    last_mode: Mode | None = None
    finish_s: float | None = None

    for k in range(max_ticks):
        tick = (start_tick + k) % length
        t = k * g
        up = [z.available(tick, n_nodes) for z in zones]
        any_up = any(up)
        reason = ""
        if running is not None and running.mode == Mode.SPOT and not up[running.zone]:
            running = None
            preemptions += 1
            reason = "preempted"
        if pending is not None and not up[pending.zone]:
            pending = None
            reason = reason or "spot launch lost"
        current = running.mode if running is not None else Mode.IDLE
        history = SpotHistory(hist_obs, hist_avail, preemptions, spot_run)
        obs = Observation(
            elapsed_s=t,
            deadline_s=deadline_s,
            work_s=work_s,
            done_s=done,
            restart_overhead_s=restart_overhead_s,
            current=current,
            spot_available=any_up,
            tick_s=g,
            history=history,
        )
        mode = policy.decide(obs)
        if mode != last_mode or reason:
            decisions.append(Decision(k, t, mode, reason or _reason(mode, current, any_up)))
            last_mode = mode

        def cheapest_zone(tick: int = tick, up: list[bool] = up) -> int:
            cands = [i for i, ok in enumerate(up) if ok]
            return min(cands, key=lambda i: (_spot_price_s(zones[i], tick, prices, n_nodes), i))

        # apply the decision
        if mode == Mode.IDLE or (mode == Mode.SPOT and not any_up):
            running = pending = None
        elif mode == Mode.SPOT:
            if running is None:
                running = _Gang(Mode.SPOT, cheapest_zone(), restart_overhead_s, 0.0)
                restarts += 1
            elif running.mode == Mode.ON_DEMAND and pending is None:
                pending = _Gang(Mode.SPOT, cheapest_zone(), restart_overhead_s, 0.0)
                restarts += 1
        else:  # ON_DEMAND
            pending = None
            if running is None or running.mode != Mode.ON_DEMAND:
                running = _Gang(Mode.ON_DEMAND, -1, restart_overhead_s, od_price_s)
                restarts += 1
        for gang in (running, pending):
            if gang is not None and gang.mode == Mode.SPOT:
                gang.price_s = _spot_price_s(zones[gang.zone], tick, prices, n_nodes)

        # advance one tick: segments [a, b) of each gang; progress from the productive one
        hist_obs += g
        hist_avail += g if any_up else 0.0
        if running is None:
            idle_s += g
            continue
        handover = g
        if pending is not None and pending.overhead_left_s < g:
            handover = pending.overhead_left_s  # spot up mid-tick: on-demand torn down then
        segments: list[tuple[_Gang, float, float]] = [(running, 0.0, handover)]
        if pending is not None:
            segments.append((pending, 0.0, g))
        # productive intervals, in time order
        prod: list[tuple[float, float]] = []
        r_start = min(running.overhead_left_s, handover)
        if r_start < handover:
            prod.append((r_start, handover))
        if pending is not None and handover < g:
            prod.append((handover, g))
        remaining = work_s - done
        end = g
        for a, b in prod:
            if b - a >= remaining - EPS_S:
                end = a + remaining
                done = work_s
                remaining = 0.0
                break
            done += b - a
            remaining -= b - a
        for gang, a, b in segments:
            b = min(b, end)
            if b <= a:
                continue
            cost += gang.price_s * (b - a)
            if gang.mode == Mode.SPOT:
                spot_s += b - a
                spot_run += b - a
            else:
                od_s += b - a
        running.overhead_left_s = max(0.0, running.overhead_left_s - handover)
        if pending is not None:
            pending.overhead_left_s = max(0.0, pending.overhead_left_s - g)
            if handover < g or pending.overhead_left_s <= EPS_S:
                running, pending = pending, None
                running.overhead_left_s = 0.0
        if remaining <= EPS_S:
            finish_s = t + end
            decisions.append(Decision(k, finish_s, Mode.IDLE, "finished"))
            break

    finished = finish_s is not None
    deadline_met = finished and (finish_s or 0.0) <= deadline_s + EPS_S
    return SimulationResult(
        policy=policy.name,
        cost=cost,
        on_demand_cost=od_price_s * (work_s + restart_overhead_s),
        finished=finished,
        finish_h=finish_s / 3600.0 if finish_s is not None else None,
        deadline_h=deadline_s / 3600.0 if math.isfinite(deadline_s) else None,
        deadline_met=deadline_met,
        preemptions=preemptions,
        spot_hours=spot_s / 3600.0,
        on_demand_hours=od_s / 3600.0,
        idle_hours=idle_s / 3600.0,
        restarts=restarts,
        decisions=tuple(decisions),
    )


def _reason(mode: Mode, current: Mode, spot_up: bool) -> str:
    if mode == Mode.SPOT:
        return "spot available" if spot_up else "waiting for spot"
    if mode == Mode.ON_DEMAND:
        return "stay on on-demand" if current == Mode.ON_DEMAND else "slack low: on-demand"
    return "waiting for spot" if not spot_up else "idle"


@dataclass(frozen=True, slots=True)
class SpotEvent:
    """Spot availability changes to `available` at `at_s` seconds after submission."""

    at_s: float
    available: bool


def trace_from_events(
    events: Sequence[SpotEvent], tick_s: float, horizon_s: float, *, initially: bool = True, zone: str = "events"
) -> SpotTrace:
    """A one-zone trace from an availability event sequence (e.g. a preemption schedule): tick i
    is available when the latest event at or before i * tick_s says so (`initially` before any)."""
    if tick_s <= 0:
        raise ValueError(f"tick_s must be > 0, got {tick_s}")
    n = max(1, math.ceil(horizon_s / tick_s))
    ordered = sorted(events, key=lambda e: e.at_s)
    avail: list[int] = []
    state = initially
    j = 0
    for i in range(n):
        while j < len(ordered) and ordered[j].at_s <= i * tick_s + EPS_S:
            state = ordered[j].available
            j += 1
        avail.append(1 if state else 0)
    return SpotTrace(zone=zone, gap_s=tick_s, availability=tuple(avail), source=zone)


def decisions_for_events(
    policy: DeadlinePolicy,
    events: Sequence[SpotEvent],
    *,
    tick_s: float,
    work_s: float,
    deadline_s: float,
    restart_overhead_s: float,
    horizon_s: float | None = None,
    initially: bool = True,
) -> tuple[Decision, ...]:
    """The decision sequence `simulate` produces for an availability event sequence: what the live
    controller must decide on the same events (decisions listed where the mode changes)."""
    horizon = horizon_s if horizon_s is not None else (
        deadline_s if math.isfinite(deadline_s) else 10 * work_s
    ) + work_s + 2 * restart_overhead_s
    trace = trace_from_events(events, tick_s, horizon, initially=initially)
    result = simulate(
        [trace],
        policy,
        work_s=work_s,
        deadline_s=deadline_s,
        restart_overhead_s=restart_overhead_s,
        prices=Prices(on_demand_h=3.0, spot_h=1.0),
        max_ticks=trace.n_ticks,
    )
    return result.decisions


def with_spot_ratio(prices: Prices | None, on_demand_h: float, ratio: float = DEFAULT_SPOT_RATIO) -> Prices:
    """Prices with the spot price defaulting to `ratio` x on-demand."""
    if prices is not None:
        return prices
    return Prices(on_demand_h, on_demand_h * ratio)
