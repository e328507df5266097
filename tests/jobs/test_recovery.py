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
