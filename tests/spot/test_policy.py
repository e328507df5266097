"""The deadline policies on hand-made traces with known optimal answers, and the deadline
guarantee on random traces (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.spot_optimum import optimum
from launcher.spot.policy import (
    POLICIES,
    Greedy,
    Mode,
    Observation,
    OnDemandOnly,
    Ours,
    SpotHistory,
    UniformProgress,
    policy_by_name,
)
from launcher.spot.simulate import Prices, simulate
from tests.spot.conftest import H, trace

PRICES = Prices(on_demand_h=3.0, spot_h=1.0)
DEADLINE_POLICIES = [Greedy(), UniformProgress(), Ours()]
ALL = [OnDemandOnly(), *DEADLINE_POLICIES]


def run(bits: str, policy, work_h: float, deadline_h: float, overhead_h: float = 1.0):
    return simulate([trace(bits)], policy, work_s=work_h * H, deadline_s=deadline_h * H,
                    restart_overhead_s=overhead_h * H, prices=PRICES)


def opt(bits: str, work_h: float, deadline_h: float, overhead_h: float = 1.0) -> float:
    return optimum([trace(bits)], work_s=work_h * H, deadline_s=deadline_h * H,
                   restart_overhead_s=overhead_h * H, prices=PRICES).cost


@pytest.mark.parametrize("policy", DEADLINE_POLICIES, ids=lambda p: p.name)
def test_always_available_is_all_spot_with_one_overhead(policy) -> None:
    r = run("1" * 40, policy, work_h=20, deadline_h=30)
    assert r.deadline_met
    assert r.cost == pytest.approx(1.0 * (20 + 1))  # spot price x (work + one overhead)
    assert r.cost == pytest.approx(opt("1" * 40, 20, 30))
    assert r.on_demand_hours == 0 and r.restarts == 1 and r.preemptions == 0


@pytest.mark.parametrize("policy", ALL, ids=lambda p: p.name)
def test_never_available_is_on_demand(policy) -> None:
    r = run("0" * 40, policy, work_h=20, deadline_h=30)
    assert r.deadline_met and r.spot_hours == 0
    assert opt("0" * 40, 20, 30) == pytest.approx(3.0 * 21)  # on-demand from the start is optimal
    # each on-demand start costs one overhead: the optimum starts once
    assert r.cost >= 3.0 * 21 - 1e-9
    if not isinstance(policy, UniformProgress):  # UP stops and restarts on-demand on its line
        assert r.cost == pytest.approx(3.0 * 21)


@pytest.mark.parametrize("policy", DEADLINE_POLICIES, ids=lambda p: p.name)
def test_long_outage_right_before_the_deadline(policy) -> None:
    # spot for the first 10 h, then nothing until the deadline (30 h); 20 h of work
    bits = "1" * 10 + "0" * 30
    r = run(bits, policy, work_h=20, deadline_h=30)
    assert r.deadline_met
    best = opt(bits, 20, 30)
    # optimum: 9 h of spot work (1 h overhead), then 11 h of work on on-demand (+1 h overhead)
    assert best == pytest.approx(10 * 1.0 + 12 * 3.0)
    assert r.cost >= best - 1e-9


@pytest.mark.parametrize("policy", DEADLINE_POLICIES, ids=lambda p: p.name)
def test_flapping_every_tick(policy) -> None:
    bits = "10" * 30  # up one tick, down the next: a spot gang never gets past its overhead
    r = run(bits, policy, work_h=20, deadline_h=30)
    assert r.deadline_met
    assert opt(bits, 20, 30) == pytest.approx(3.0 * 21)
    assert r.cost >= 3.0 * 21 - 1e-9


def test_greedy_goes_on_demand_when_slack_runs_out_and_stays() -> None:
    r = run("0" * 40, Greedy(), work_h=20, deadline_h=30)
    modes = [d.mode for d in r.decisions]
    assert modes[0] == Mode.IDLE and Mode.ON_DEMAND in modes
    od_at = next(d.elapsed_s for d in r.decisions if d.mode == Mode.ON_DEMAND)
    assert od_at == pytest.approx(8 * H)  # slack 10 h: idles until slack < overhead + tick
    assert r.finish_h == pytest.approx(29.0)


def test_uniform_progress_follows_its_line() -> None:
    up = UniformProgress()
    base = dict(deadline_s=100 * H, work_s=50 * H, restart_overhead_s=1 * H, tick_s=H)
    # behind the line (done 10 h at 30 h; ep = 15 h), no spot: on-demand to catch up
    assert up.decide(Observation(elapsed_s=30 * H, done_s=10 * H, current=Mode.IDLE,
                                 spot_available=False, **base)) == Mode.ON_DEMAND
    # ahead of the line, no spot: wait
    assert up.decide(Observation(elapsed_s=30 * H, done_s=20 * H, current=Mode.IDLE,
                                 spot_available=False, **base)) == Mode.IDLE
    # spot available: take it even when behind
    assert up.decide(Observation(elapsed_s=30 * H, done_s=10 * H, current=Mode.IDLE,
                                 spot_available=True, **base)) == Mode.SPOT
    # on on-demand, hysteresis: stay until done >= ep(t + 2d) = 16 h
    assert up.decide(Observation(elapsed_s=30 * H, done_s=15.5 * H, current=Mode.ON_DEMAND,
                                 spot_available=True, **base)) == Mode.ON_DEMAND
    assert up.decide(Observation(elapsed_s=30 * H, done_s=16.5 * H, current=Mode.ON_DEMAND,
                                 spot_available=True, **base)) == Mode.SPOT


def test_ours_keeps_a_reserve_that_grows_with_observed_preemptions() -> None:
    ours = Ours()
    base = dict(elapsed_s=10 * H, deadline_s=40 * H, work_s=20 * H, done_s=5 * H,
                restart_overhead_s=0.5 * H, current=Mode.IDLE, spot_available=False, tick_s=0.1 * H)
    calm = Observation(**base, history=SpotHistory(preemptions=0, spot_run_s=100 * H))
    rough = Observation(**base, history=SpotHistory(preemptions=60, spot_run_s=20 * H))
    assert ours.reserve_s(calm) < ours.reserve_s(rough)
    assert ours.decide(calm) == Mode.IDLE  # slack 15 h, little expected restarting
    assert ours.decide(rough) == Mode.ON_DEMAND  # ~45 restarts expected: hold the slack


def test_decide_is_pure() -> None:
    obs = Observation(elapsed_s=5 * H, deadline_s=30 * H, work_s=20 * H, done_s=2 * H,
                      restart_overhead_s=H, current=Mode.SPOT, spot_available=False, tick_s=H)
    for name in POLICIES:
        p = policy_by_name(name)
        assert len({p.decide(obs) for _ in range(5)}) == 1


def test_policy_by_name() -> None:
    assert policy_by_name("ours").name == "launcher"
    assert policy_by_name("Uniform-Progress").name == "uniform_progress"
    with pytest.raises(ValueError, match="known policies"):
        policy_by_name("nope")


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], float, float, float, float]:
    gap = draw(st.sampled_from([0.25, 0.5, 1.0]))
    n = draw(st.integers(10, 60))
    zones = draw(st.integers(1, 2))
    p_up = draw(st.floats(0.0, 1.0))
    bits = [
        "".join("1" if draw(st.floats(0, 1)) < p_up else "0" for _ in range(n)) for _ in range(zones)
    ]
    work = draw(st.floats(0.5, n * gap * 0.8))
    overhead = draw(st.floats(0.0, 3.0))
    slack = draw(st.floats(0.0, n * gap))
    deadline = work + overhead + slack  # feasible on on-demand from the start
    return bits, gap, work, overhead, deadline


@settings(max_examples=150, deadline=None)
@given(cases())
def test_every_deadline_policy_meets_a_feasible_deadline(case) -> None:
    bits, gap, work, overhead, deadline = case
    traces = [trace(b, gap_s=gap * H, zone=f"z{i}") for i, b in enumerate(bits)]
    for policy in ALL:
        r = simulate(traces, policy, work_s=work * H, deadline_s=deadline * H,
                     restart_overhead_s=overhead * H, prices=PRICES)
        assert r.deadline_met, (policy.name, r.finish_h, deadline, r.decisions)
