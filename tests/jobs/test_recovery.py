from __future__ import annotations

import pytest

from launcher.jobs.recovery import (
    EAGER_NEXT_REGION,
    FAILOVER,
    BlockSpec,
    ExitDecision,
    Where,
    blocked_from,
    blocks_after_preemption,
    decide_exit,
    normalize_strategy,
    placement_tiers,
)

W = Where("aws", "us-east-1", "us-east-1a")


def test_strategy_names() -> None:
    assert normalize_strategy(None) == EAGER_NEXT_REGION
    assert normalize_strategy("failover") == FAILOVER
    assert normalize_strategy("eager-next-region") == EAGER_NEXT_REGION
    with pytest.raises(ValueError, match="unknown job_recovery strategy"):
        normalize_strategy("YOLO")


def test_eager_blocks_zone_and_region_for_cooldown() -> None:
    blocks = blocks_after_preemption(EAGER_NEXT_REGION, W, now=100.0, cooldown_s=50)
    b = blocked_from(blocks)
    assert ("aws", "us-east-1", "us-east-1a") in b.zones
    assert ("aws", "us-east-1") in b.regions
    assert all(x.until == 150.0 for x in blocks)
    tiers = placement_tiers(EAGER_NEXT_REGION, blocks, W)
    assert tiers[0].blocked == b and tiers[0].only_region is None
    assert tiers[-1].blocked.regions == frozenset()  # falls back when nothing else fits


def test_failover_tries_same_region_first() -> None:
    blocks = blocks_after_preemption(FAILOVER, W, now=0.0)
    assert all(x.zone is not None for x in blocks)  # never the whole region
    tiers = placement_tiers(FAILOVER, blocks, W)
    assert tiers[0].only_region == ("aws", "us-east-1")
    assert ("aws", "us-east-1", "us-east-1a") in tiers[0].blocked.zones
    assert tiers[1].only_region is None
    assert tiers[2].blocked.zones == frozenset()


def test_first_launch_is_unconstrained() -> None:
    (tier,) = placement_tiers(EAGER_NEXT_REGION, [], None)
    assert tier.blocked.zones == frozenset() and tier.only_region is None


def test_cloud_wide_block() -> None:
    b = blocked_from([BlockSpec("gcp", None, None, 1.0, "auth")])
    assert b.clouds == frozenset({"gcp"})


@pytest.mark.parametrize(
    "code,used,mx,codes,want",
    [
        (0, 0, 0, (), ExitDecision.SUCCEED),
        (1, 0, 1, (), ExitDecision.RESTART),
        (1, 1, 1, (), ExitDecision.FAIL),
        (33, 5, 0, (33,), ExitDecision.RECOVER),  # listed codes don't use the budget
        (None, 0, 0, (), ExitDecision.FAIL),
    ],
)
def test_decide_exit(code, used, mx, codes, want) -> None:
    assert decide_exit(code, recover_on_exit_codes=codes, restarts_on_errors=used,
                       max_restarts_on_errors=mx) == want


def test_recover_on_exit_codes_is_bounded() -> None:
    from launcher.jobs.recovery import EXIT_CODE_RECOVERY_CAP

    def d(n: int, mx: int = 0, used: int = 0) -> ExitDecision:
        return decide_exit(33, recover_on_exit_codes=(33,), restarts_on_errors=used,
                           max_restarts_on_errors=mx, exit_code_recoveries=n)

    assert d(EXIT_CODE_RECOVERY_CAP - 1) == ExitDecision.RECOVER
    assert d(EXIT_CODE_RECOVERY_CAP) == ExitDecision.FAIL  # then an ordinary failure
    assert d(EXIT_CODE_RECOVERY_CAP, mx=2) == ExitDecision.RESTART
    assert d(15, mx=20, used=20) == ExitDecision.RECOVER  # a larger max_restarts raises it


def _zones_tried(tiers: list, zones: list[tuple[str, str, str]]) -> list[str | None]:
    """The zone each tier would pick first among `zones` (in cost order), None if none."""
    out: list[str | None] = []
    for t in tiers:
        b = t.blocked
        pick = None
        for c, r, z in zones:
            if c in b.clouds or (c, r) in b.regions or (c, r, z) in b.zones:
                continue
            if t.only_region and (c, r) != t.only_region:
                continue
            pick = z
            break
        out.append(pick)
    return out


ZONES = [("aws", "us-east-1", "us-east-1a"), ("aws", "us-east-1", "us-east-1b"),
         ("aws", "us-west-2", "us-west-2a")]


@pytest.mark.parametrize("strategy", [EAGER_NEXT_REGION, FAILOVER])
def test_region_pinned_task_moves_to_another_zone_before_the_preempted_one(
        strategy: str) -> None:
    pinned = ZONES[:2]  # the task is pinned to us-east-1: only these offers exist
    blocks = blocks_after_preemption(strategy, W, now=0.0, cooldown_s=100)
    tiers = placement_tiers(strategy, blocks, W, now=10.0)
    picks = [z for z in _zones_tried(tiers, pinned) if z]
    assert picks[0] == "us-east-1b"  # another zone of the region, never 1a first
    assert picks[-1] == "us-east-1a"  # ... the preempted zone only when nothing else is left
    assert tiers[-1].blocked == blocked_from([])


def test_eager_tries_other_regions_then_other_zones_then_the_preempted_zone() -> None:
    blocks = blocks_after_preemption(EAGER_NEXT_REGION, W, now=0.0, cooldown_s=100)
    tiers = placement_tiers(EAGER_NEXT_REGION, blocks, W, now=10.0)
    assert _zones_tried(tiers, ZONES) == ["us-west-2a", "us-east-1b", "us-east-1a"]


def test_preempted_zones_come_back_least_penalized_first() -> None:
    # 1a preempted at t=0, 1b at t=50 (cool-down 100): at t=60, 1a has 40 s left, 1b 90 s.
    blocks = [*blocks_after_preemption(EAGER_NEXT_REGION, W, now=0.0, cooldown_s=100),
              *blocks_after_preemption(EAGER_NEXT_REGION,
                                       Where("aws", "us-east-1", "us-east-1b"), 50.0, 100)]
    tiers = placement_tiers(EAGER_NEXT_REGION, blocks, W, now=60.0)
    picks = [p for p in _zones_tried(tiers, ZONES[:2]) if p]
    assert picks[0] == "us-east-1a"  # its penalty decayed more: it comes back first
    # Two preemptions of 1a outweigh one more recent preemption of 1b.
    again = [*blocks, *blocks_after_preemption(EAGER_NEXT_REGION, W, now=20.0, cooldown_s=100)]
    picks = _zones_tried(placement_tiers(EAGER_NEXT_REGION, again, W, now=60.0), ZONES[:2])
    assert [p for p in picks if p][0] == "us-east-1b"


# ---------------------------------------------------------------- expected cost (observed rates)

from launcher.catalog.interruption import InterruptionRate  # noqa: E402
from launcher.catalog.offer import Offer  # noqa: E402
from launcher.jobs.recovery import DEFAULT_COOLDOWN_S, REGION_SHARE, observed_rates  # noqa: E402
from launcher.optimizer.ranking import SpotCostModel, rank  # noqa: E402
from launcher.task.resources import ResourceCandidate  # noqa: E402


class _Flat:
    """Every node the same data rate (the bundled table is not under test here)."""

    def __init__(self, per_hour: float = 0.001) -> None:
        self.per_hour = per_hour

    def rate(self, cloud: str, region: str, instance_type: str) -> InterruptionRate:
        return InterruptionRate(self.per_hour, "flat")


def _offer(region: str, zone: str, spot: float) -> Offer:
    return Offer("aws", region, zone, "p3.2xlarge", "V100", 1.0, 16.0, 8.0, 61.0, 3.06, spot,
                 None, None, None, None, "x86_64", "test", "2025-01-01")


class _SpotTask:
    num_nodes = 1

    def candidates(self) -> list[ResourceCandidate]:
        return [ResourceCandidate(accelerator="V100", accelerator_count=1, use_spot=True)]


def _pick(tier, offers: list[Offer], costed: bool = True) -> str | None:  # type: ignore[no-untyped-def]
    """The zone the failover loop would try first in `tier` (cluster_ops hands the tier's
    observed rates to the planner; this ranks the same way on hand-made offers)."""
    spot = SpotCostModel(rates=_Flat(), observed=tier.observed_rates()) if costed else None
    placements = rank(_SpotTask(), offers, tier.blocked, spot=spot).placements
    if tier.only_region:
        placements = [p for p in placements if (p.cloud, p.region) == tier.only_region]
    return placements[0].zone if placements else None


def test_observed_rates_decay_with_the_block_and_spill_to_the_region() -> None:
    blocks = blocks_after_preemption(EAGER_NEXT_REGION, W, now=0.0)
    fresh = observed_rates(blocks, now=0.0)
    per_window = 3600.0 / DEFAULT_COOLDOWN_S  # one interruption per cool-down window
    assert fresh[("aws", "us-east-1", "us-east-1a")].per_hour == pytest.approx(per_window)
    # EAGER's region row repeats the zone's preemption: only the region share, once
    assert fresh[("aws", "us-east-1", None)].per_hour == pytest.approx(REGION_SHARE * per_window)
    assert "1 recent preemption in zone us-east-1a" in fresh[("aws", "us-east-1", "us-east-1a")].source
    half = observed_rates(blocks, now=DEFAULT_COOLDOWN_S / 2)
    assert half[("aws", "us-east-1", "us-east-1a")].per_hour == pytest.approx(per_window / 2)
    assert observed_rates(blocks, now=DEFAULT_COOLDOWN_S) == {}  # expired: no evidence left
    # two preemptions add up
    twice = [*blocks, *blocks_after_preemption(EAGER_NEXT_REGION, W, now=0.0)]
    assert observed_rates(twice, 0.0)[("aws", "us-east-1", "us-east-1a")].per_hour == \
        pytest.approx(2 * per_window)
    # a cloud without zones: the region row is the place itself
    zoneless = blocks_after_preemption(EAGER_NEXT_REGION, Where("lambda", "us-east-1", None), 0.0)
    assert observed_rates(zoneless, 0.0) == {
        ("lambda", "us-east-1", None): InterruptionRate(
            pytest.approx(per_window), "+2/h from 1 recent preemption in region us-east-1")}  # type: ignore[arg-type]


def test_every_tier_carries_the_observed_rates() -> None:
    blocks = blocks_after_preemption(FAILOVER, W, now=0.0)
    tiers = placement_tiers(FAILOVER, blocks, W, now=60.0)
    want = observed_rates(blocks, 60.0)
    assert want and all(t.observed_rates() == want for t in tiers)
    assert placement_tiers(FAILOVER, [], None)[0].observed == ()  # first launch: nothing seen


def test_recovery_never_rechooses_the_just_preempted_zone_at_equal_price() -> None:
    # Pinned to us-east-1, two zones at the same spot price; 1a was just preempted, 1b
    # fifteen minutes earlier. In the last tier both are allowed again: list price alone
    # ties and takes 1a (SkyPilot's #10021); expected cost takes the calmer 1b.
    offers = [_offer("us-east-1", "us-east-1a", 0.90), _offer("us-east-1", "us-east-1b", 0.90)]
    blocks = [*blocks_after_preemption(FAILOVER, Where("aws", "us-east-1", "us-east-1b"), 0.0),
              *blocks_after_preemption(FAILOVER, W, 900.0)]
    last = placement_tiers(FAILOVER, blocks, W, now=901.0)[-1]
    assert last.blocked == blocked_from([])
    assert _pick(last, offers, costed=False) == "us-east-1a"  # the list-price ranking
    assert _pick(last, offers) == "us-east-1b"


@pytest.mark.parametrize("west_price,want", [(0.95, "us-west-2a"), (1.80, "us-east-1b")])
def test_a_calmer_region_beats_a_slightly_cheaper_zone_next_to_a_preemption(
        west_price: float, want: str) -> None:
    # FAILOVER's "other zones" tier (the same region found nothing): 1b shares the region
    # of the preempted 1a, so it carries REGION_SHARE of its observed rate; us-west-2a
    # costs a little more and wins, unless the gap is large.
    offers = [_offer("us-east-1", "us-east-1b", 0.90), _offer("us-west-2", "us-west-2a", west_price)]
    tiers = placement_tiers(FAILOVER, blocks_after_preemption(FAILOVER, W, 0.0), W, now=1.0)
    other = next(t for t in tiers if t.label == "other zones")
    assert _pick(other, offers, costed=False) == "us-east-1b"
    assert _pick(other, offers) == want


def test_cluster_ops_plans_a_tier_with_its_observed_rates(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from launcher.jobs.cluster_ops import _plan_fn
    from launcher.provisioning.failover import default_plan
    from launcher.task.model import Task

    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    assert _plan_fn(placement_tiers(FAILOVER, [], None)[0]) is default_plan
    where = Where("aws", "us-east-1", "use1-az1")
    tier = placement_tiers(FAILOVER, blocks_after_preemption(FAILOVER, where, 0.0), where,
                           now=1.0)[-1]
    task = Task.from_yaml_str(
        "resources:\n  accelerators: V100:1\n  use_spot: true\n  region: us-east-1\n")
    plan = _plan_fn(tier)(task, tier.blocked)
    hit = [p for p in plan.placements if p.zone == "use1-az1"]
    assert hit and "recent preemption in zone use1-az1" in (hit[0].interruption_source or "")
    assert plan.placements[0].zone != "use1-az1"
