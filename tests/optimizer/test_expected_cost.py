"""The optimizer's expected-cost ranking of spot placements (launcher.optimizer docstring)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from launcher.catalog.interruption import InterruptionRate
from launcher.catalog.offer import Offer
from launcher.optimizer.ranking import (
    DEFAULT_RESTART_OVERHEAD_HOURS,
    SpotCostModel,
    expected_cost_factor,
    rank,
    reordered_by_expected_cost,
)
from tests.optimizer.test_optimizer import FakeTask, cand, mk_offer


class Rates:
    """Per-zone rates for hand-made offers (zone -> per hour); 0 elsewhere."""

    def __init__(self, by_region: dict[str, float]) -> None:
        self.by_region = by_region

    def rate(self, cloud: str, region: str, instance_type: str) -> InterruptionRate:
        return InterruptionRate(self.by_region.get(region, 0.0), f"test rate for {region}")


def spot_offer(region: str, spot: float, **kw: Any) -> Offer:
    return mk_offer(region=region, zone=f"{region}a", spot_price=spot, **kw)


def spot_rank(offers: list[Offer], rates: dict[str, float], num_nodes: int = 1,
              **kw: Any) -> list[str]:
    model = SpotCostModel(rates=Rates(rates), **kw)
    r = rank(FakeTask([cand(use_spot=True)], num_nodes), offers, spot=model)
    return [p.region for p in r.placements]


def test_factor_is_the_closed_form_and_never_below_one() -> None:
    assert expected_cost_factor(0.0, 0.5) == 1.0
    assert expected_cost_factor(0.5, 0.5) == pytest.approx(1 / (1 - 0.25))
    assert expected_cost_factor(2.0, 0.5) == math.inf  # lambda x R >= 1: never finishes
    # the fixed point T = W + R * lambda * T, iterated, converges to the same value
    t, w, lam, r = 10.0, 10.0, 0.3, 0.5
    for _ in range(200):
        t = w + r * lam * t
    assert t / w == pytest.approx(expected_cost_factor(lam, r))


def test_a_flaky_zone_loses_to_a_slightly_dearer_calm_one() -> None:
    offers = [spot_offer("us-east-1", 40.0), spot_offer("us-west-2", 41.0)]
    rates = {"us-east-1": 0.2, "us-west-2": 0.001}
    assert spot_rank(offers, rates) == ["us-west-2", "us-east-1"]
    # without a model: the list-price order
    r = rank(FakeTask([cand(use_spot=True)]), offers)
    assert [p.region for p in r.placements] == ["us-east-1", "us-west-2"]


def test_a_large_price_gap_still_wins_over_a_calmer_zone() -> None:
    offers = [spot_offer("us-east-1", 20.0), spot_offer("us-west-2", 41.0)]
    assert spot_rank(offers, {"us-east-1": 0.2, "us-west-2": 0.001}) == ["us-east-1", "us-west-2"]


def test_a_gang_is_interrupted_when_any_node_is() -> None:
    # 0.2/h per node: one node -> factor 1/(1 - 0.2 R); eight nodes -> 1/(1 - 1.6 R)
    offers = [spot_offer("us-east-1", 40.0), spot_offer("us-west-2", 48.0)]
    rates = {"us-east-1": 0.2, "us-west-2": 0.0}
    assert spot_rank(offers, rates, num_nodes=1) == ["us-east-1", "us-west-2"]
    assert spot_rank(offers, rates, num_nodes=8) == ["us-west-2", "us-east-1"]


def test_placements_keep_list_price_and_carry_expected_cost_and_rate() -> None:
    offers = [spot_offer("us-east-1", 40.0)]
    model = SpotCostModel(rates=Rates({"us-east-1": 0.3}), work_hours=10.0)
    (p,) = rank(FakeTask([cand(use_spot=True)], 2), offers, spot=model).placements
    factor = expected_cost_factor(0.6, DEFAULT_RESTART_OVERHEAD_HOURS)
    assert p.node_price == 40.0 and p.hourly_cost == p.list_price_per_hour == 80.0
    assert p.expected_hourly_cost == pytest.approx(80.0 * factor)
    assert p.expected_cost == pytest.approx(80.0 * factor * 10.0)  # the model's work hours
    assert p.interruption_rate_per_hour == 0.3
    assert p.interruption_source == "test rate for us-east-1"
    # --hours wins over the model's default work
    (q,) = rank(FakeTask([cand(use_spot=True)], 2), offers, hours=3.0, spot=model).placements
    assert q.expected_cost == pytest.approx(80.0 * factor * 3.0) and q.total_cost == 240.0


def test_on_demand_is_unaffected() -> None:
    offers = [mk_offer(region="us-east-1", price=10.0), mk_offer(region="us-west-2", price=11.0)]
    model = SpotCostModel(rates=Rates({"us-east-1": 5.0}))
    task = FakeTask([cand()])
    with_model = rank(task, offers, hours=2.0, spot=model)
    without = rank(task, offers, hours=2.0)
    assert [p.region for p in with_model.placements] == ["us-east-1", "us-west-2"]
    assert [(p.region, p.hourly_cost, p.total_cost) for p in with_model.placements] == [
        (p.region, p.hourly_cost, p.total_cost) for p in without.placements]
    first = with_model.placements[0]
    assert first.expected_hourly_cost == first.hourly_cost and first.expected_cost == 20.0
    assert first.interruption_rate_per_hour is None and first.interruption_source is None
    assert with_model.rejected == without.rejected


def test_rejections_are_unchanged_by_the_model() -> None:
    offers = [spot_offer("us-east-1", 40.0), mk_offer(spot_price=None), mk_offer(max_nodes=1)]
    task = FakeTask([cand(use_spot=True)], 2)
    model = SpotCostModel(rates=Rates({}))
    assert rank(task, offers, spot=model).rejected == rank(task, offers).rejected


def test_observed_rates_add_to_the_zone_and_region() -> None:
    offers = [mk_offer(region="us-east-1", zone="a", spot_price=40.0),
              mk_offer(region="us-east-1", zone="b", spot_price=40.0)]
    seen = {("aws", "us-east-1", "a"): InterruptionRate(1.0, "+1/h seen in a"),
            ("aws", "us-east-1", None): InterruptionRate(0.5, "+0.5/h seen in region")}
    model = SpotCostModel(rates=Rates({"us-east-1": 0.01}), observed=seen)
    ps = rank(FakeTask([cand(use_spot=True)]), offers, spot=model).placements
    assert [p.zone for p in ps] == ["b", "a"]
    by_zone = {p.zone: p for p in ps}
    assert by_zone["a"].interruption_rate_per_hour == pytest.approx(1.51)
    assert by_zone["b"].interruption_rate_per_hour == pytest.approx(0.51)
    assert by_zone["a"].interruption_source == (
        "test rate for us-east-1; +1/h seen in a; +0.5/h seen in region")


def test_equal_expected_costs_rank_the_calmer_placement_first() -> None:
    # both never finish in expectation (lambda x R >= 1): the lower rate goes first
    offers = [spot_offer("us-east-1", 40.0), spot_offer("us-west-2", 40.0)]
    assert spot_rank(offers, {"us-east-1": 9.0, "us-west-2": 5.0}) == ["us-west-2", "us-east-1"]


def test_reorders_name_the_swapped_placements() -> None:
    offers = [spot_offer("us-east-1", 40.0), spot_offer("us-west-2", 41.0),
              spot_offer("eu-west-1", 50.0)]
    model = SpotCostModel(rates=Rates({"us-east-1": 0.2, "us-west-2": 0.0, "eu-west-1": 0.0}))
    ps = rank(FakeTask([cand(use_spot=True)]), offers, spot=model).placements
    (swap,) = reordered_by_expected_cost(ps)
    assert (swap.ahead.region, swap.cheaper.region) == ("us-west-2", "us-east-1")
    assert reordered_by_expected_cost(rank(FakeTask([cand(use_spot=True)]), offers).placements) == []


def test_observed_preemptions_count_once_for_a_gang() -> None:
    # a preemption is one event for the gang: 1/h observed adds 1/h to the gang's rate,
    # i.e. 1/8 per node of an 8-node gang, not 1/h per node
    offer = mk_offer(region="us-east-1", zone="a", spot_price=40.0)
    seen = {("aws", "us-east-1", "a"): InterruptionRate(1.0, "+1/h seen in a")}
    model = SpotCostModel(rates=Rates({"us-east-1": 0.01}), observed=seen)
    (p,) = rank(FakeTask([cand(use_spot=True)], 8), [offer], spot=model).placements
    assert p.interruption_rate_per_hour == pytest.approx(0.01 + 1.0 / 8)
    gang = 8 * 0.01 + 1.0
    assert p.expected_hourly_cost == pytest.approx(
        320.0 * expected_cost_factor(gang, DEFAULT_RESTART_OVERHEAD_HOURS))
