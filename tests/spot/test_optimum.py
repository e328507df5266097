"""The offline optimum (DP over ticks): known answers, and never above any policy's cost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.spot_optimum import optimum
from launcher.spot.policy import Greedy, OnDemandOnly, Ours, UniformProgress
from launcher.spot.simulate import Prices, simulate
from tests.spot.conftest import H, trace

PRICES = Prices(on_demand_h=3.0, spot_h=1.0)
ALL = [OnDemandOnly(), Greedy(), UniformProgress(), Ours()]


def test_known_answers() -> None:
    kw = dict(work_s=4 * H, restart_overhead_s=1 * H, prices=PRICES)
    # spot from tick 2 on: waiting 2 h then 5 h on spot beats on-demand when the deadline allows
    assert optimum([trace("0011111111")], deadline_s=8 * H, **kw).cost == pytest.approx(5.0)
    # too tight to wait: on-demand from the start; spot launched at 2 h while on-demand keeps
    # working (overlap paid twice), spot up at 3 h: 3 h on-demand + 3 h spot = 12 (< 15 all on-demand)
    assert optimum([trace("0011111111")], deadline_s=5 * H, **kw).cost == pytest.approx(12.0)
    # infeasible: no schedule fits
    res = optimum([trace("1111")], deadline_s=4 * H, **kw)
    assert not res.feasible and res.cost == float("inf")
    # two zones: the cheaper zone's prices are used
    a = trace("1111111111", zone="a", prices=[2.0] * 10)
    b = trace("1111111111", zone="b", prices=[0.5] * 10)
    assert optimum([a, b], deadline_s=8 * H, **kw).cost == pytest.approx(2.5)
    # gangs: 2 nodes pay twice, and need both nodes up
    assert optimum([trace([2, 2, 2, 2, 2, 2])], deadline_s=6 * H, n_nodes=2, **kw).cost == pytest.approx(10.0)
    assert optimum([trace([1, 1, 1, 1, 1, 1])], deadline_s=6 * H, n_nodes=2, **kw).cost == pytest.approx(30.0)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_optimum_is_no_more_than_any_policy(data: st.DataObject) -> None:
    n = data.draw(st.integers(8, 40))
    zones = data.draw(st.integers(1, 2))
    bits = [data.draw(st.text("01", min_size=n, max_size=n)) for _ in range(zones)]
    w = data.draw(st.integers(1, n // 2))
    k = data.draw(st.integers(0, 3))
    dl = w + k + data.draw(st.integers(0, n // 2))
    priced = data.draw(st.booleans())
    traces = [
        trace(b, zone=f"z{i}", prices=[0.5 + (j * 7 % 5) / 5 for j in range(n)] if priced else None)
        for i, b in enumerate(bits)
    ]
    kw = dict(work_s=w * H, deadline_s=dl * H, restart_overhead_s=k * H, prices=PRICES)
    best = optimum(traces, **kw)
    assert best.feasible
    for policy in ALL:
        r = simulate(traces, policy, **kw)
        assert r.deadline_met
        assert best.cost <= r.cost + 1e-9, (policy.name, best.cost, r.cost)
