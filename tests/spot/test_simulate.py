"""The reference simulator: costs, overheads, zones, gangs, and the decision sequence the
controller must reproduce."""

from __future__ import annotations

import math

import pytest

from launcher.spot.policy import Greedy, Mode, Observation, OnDemandOnly, Ours
from launcher.spot.simulate import (
    Prices,
    SpotEvent,
    decisions_for_events,
    simulate,
    trace_from_events,
)
from tests.spot.conftest import H, trace

PRICES = Prices(on_demand_h=3.0, spot_h=1.0)


def test_preemption_keeps_progress_and_restart_costs_the_overhead() -> None:
    # up 5 h, down 2 h, up again; 6 h of work, no deadline pressure
    r = simulate([trace("11111001111111")], Greedy(), work_s=6 * H, deadline_s=math.inf,
                 restart_overhead_s=1 * H, prices=PRICES)
    # 1 h overhead + 4 h work, preempted, idle 2 h, 1 h overhead + 2 h work
    assert r.finished and r.finish_h == pytest.approx(10.0)
    assert r.preemptions == 1 and r.restarts == 2
    assert r.spot_hours == pytest.approx(8.0) and r.idle_hours == pytest.approx(2.0)
    assert r.cost == pytest.approx(8.0)
    assert r.deadline_h is None and r.deadline_met


def test_finishing_mid_tick_stops_paying() -> None:
    r = simulate([trace("1111")], Greedy(), work_s=1.5 * H, deadline_s=4 * H,
                 restart_overhead_s=0.25 * H, prices=PRICES)
    assert r.finish_h == pytest.approx(1.75) and r.cost == pytest.approx(1.75)


def test_on_demand_to_spot_overlap_is_paid_twice_without_losing_progress() -> None:
    class OdThenSpot:
        name = "od-then-spot"

        def decide(self, obs: Observation) -> Mode:
            return Mode.ON_DEMAND if obs.elapsed_s < 3 * H else Mode.SPOT

    r = simulate([trace("1" * 12)], OdThenSpot(), work_s=8 * H, deadline_s=12 * H,
                 restart_overhead_s=1 * H, prices=PRICES)
    # od: 1 h overhead, 2 h work by t=3; spot launches at 3, up at 4 (od keeps working: 3 h
    # done), spot works 4..9 -> 8 h done at t=9
    assert r.finish_h == pytest.approx(9.0)
    assert r.on_demand_hours == pytest.approx(4.0) and r.spot_hours == pytest.approx(6.0)
    assert r.cost == pytest.approx(4 * 3.0 + 6 * 1.0)


def test_multi_zone_uses_any_zone_and_stays_in_its_zone() -> None:
    a = trace("1100000000", zone="a", prices=[2.0] * 10)
    b = trace("1111111111", zone="b", prices=[1.0] * 10)
    r = simulate([a, b], Greedy(), work_s=4 * H, deadline_s=10 * H, restart_overhead_s=0, prices=PRICES)
    # cheapest available zone is b: never preempted
    assert r.preemptions == 0 and r.cost == pytest.approx(4.0)
    a2 = trace("1111100000", zone="a", prices=[0.5] * 10)
    r2 = simulate([a2, b], Greedy(), work_s=8 * H, deadline_s=10 * H, restart_overhead_s=0, prices=PRICES)
    # starts in a (cheaper), preempted at 5 h, moves to b
    assert r2.preemptions == 1 and r2.restarts == 2
    assert r2.cost == pytest.approx(5 * 0.5 + 3 * 1.0)


def test_gang_needs_every_node() -> None:
    t = trace([4, 4, 3, 4, 4, 4])
    r4 = simulate([t], Greedy(), work_s=4 * H, deadline_s=math.inf, restart_overhead_s=0,
                  prices=PRICES, n_nodes=4)
    assert r4.preemptions == 1 and r4.finish_h == pytest.approx(5.0)
    assert r4.cost == pytest.approx(4 * 4 * 1.0)  # 4 nodes x 4 h x $1
    r3 = simulate([t], Greedy(), work_s=4 * H, deadline_s=math.inf, restart_overhead_s=0,
                  prices=PRICES, n_nodes=3)
    assert r3.preemptions == 0 and r3.finish_h == pytest.approx(4.0)


def test_on_demand_only_cost_matches_the_reference() -> None:
    r = simulate([trace("0101")], OnDemandOnly(), work_s=2 * H, deadline_s=4 * H,
                 restart_overhead_s=0.5 * H, prices=PRICES, n_nodes=2)
    assert r.cost == pytest.approx(r.on_demand_cost) and r.cost == pytest.approx(2 * 3.0 * 2.5)
    assert r.savings == pytest.approx(0.0)


def test_trace_is_replayed_cyclically_and_start_tick_offsets() -> None:
    r = simulate([trace("01")], Greedy(), work_s=1 * H, deadline_s=math.inf, restart_overhead_s=0,
                 prices=PRICES, start_tick=1)
    assert r.finish_h == pytest.approx(1.0)


def test_decisions_for_events_match_simulate() -> None:
    events = [SpotEvent(3 * H, False), SpotEvent(6 * H, True)]
    t = trace_from_events(events, tick_s=H, horizon_s=12 * H)
    assert t.availability[:8] == (1, 1, 1, 0, 0, 0, 1, 1)
    decisions = decisions_for_events(Ours(), events, tick_s=H, work_s=6 * H, deadline_s=10 * H,
                                     restart_overhead_s=H)
    full = simulate([t], Ours(), work_s=6 * H, deadline_s=10 * H, restart_overhead_s=H,
                    prices=PRICES, max_ticks=t.n_ticks)
    assert decisions == full.decisions
    assert [d.mode for d in decisions][:2] == [Mode.SPOT, Mode.ON_DEMAND]
    assert decisions[1].reason == "preempted" and decisions[-1].reason == "finished"
    assert full.deadline_met
