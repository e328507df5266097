"""Recovery strategies: where to relaunch after a preemption, and what to do on an exit.

Pure functions over small typed values; the controller persists their output
(blocks) and hands `PlacementTier`s to `ClusterOps.provision_and_start`.

- EAGER_NEXT_REGION (default): block the preempted zone AND region for a cool-down
  and re-rank over everything else (other regions, other clouds). Only when
  nothing else fits does it fall back to the unblocked ranking - so a single-region
  cloud (like `local`) still recovers, in place.
- FAILOVER: the same region first (minus the preempted zone, if the region has
  others), then anywhere but that zone, then anywhere.

Exits (`decide_exit`): exit 0 -> success; an exit code listed in
`recover_on_exit_codes` -> recover (does not use up the error budget); another
non-zero exit -> restart while `restarts_on_errors < max_restarts_on_errors`,
else FAILED. A job killed by a preemption never reaches `decide_exit`: the
controller checks the cloud's view first.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.optimizer import Blocked

EAGER_NEXT_REGION = "EAGER_NEXT_REGION"
FAILOVER = "FAILOVER"
STRATEGIES = (EAGER_NEXT_REGION, FAILOVER)
DEFAULT_STRATEGY = EAGER_NEXT_REGION
# How long a preempted zone/region stays blocked for this job.
DEFAULT_COOLDOWN_S = 30 * 60.0


def normalize_strategy(name: str | None) -> str:
    """Canonical strategy name; None -> the default. Unknown names raise ValueError."""
    if name is None:
        return DEFAULT_STRATEGY
    canon = name.strip().upper().replace("-", "_")
    if canon not in STRATEGIES:
        raise ValueError(
            f"unknown job_recovery strategy {name!r}; expected one of {', '.join(STRATEGIES)}"
        )
    return canon


@dataclass(frozen=True)
class Where:
    """Where an attempt ran."""

    cloud: str
    region: str | None
    zone: str | None


@dataclass(frozen=True)
class BlockSpec:
    """A place to avoid until `until` (epoch seconds). region/zone None = wider block."""

    cloud: str
    region: str | None
    zone: str | None
    until: float
    reason: str


@dataclass(frozen=True)
class PlacementTier:
    """One round of placement search: rank with `blocked`; when `only_region` is set,
    keep only placements in that (cloud, region). Tiers are tried in order."""

    blocked: Blocked
    only_region: tuple[str, str] | None = None
    label: str = ""


def blocks_after_preemption(
    strategy: str, where: Where, now: float, cooldown_s: float = DEFAULT_COOLDOWN_S
) -> list[BlockSpec]:
    """What to block after a preemption at `where` (persisted per job by the controller)."""
    until = now + cooldown_s
    out: list[BlockSpec] = []
    if where.zone is not None and where.region is not None:
        out.append(BlockSpec(where.cloud, where.region, where.zone, until, "preempted here"))
    if strategy == EAGER_NEXT_REGION and where.region is not None:
        out.append(BlockSpec(where.cloud, where.region, None, until, "preempted in this region"))
    return out


def blocked_from(blocks: Iterable[BlockSpec | object]) -> Blocked:
    """Fold block rows (anything with cloud/region/zone) into an optimizer `Blocked`."""
    b = Blocked()
    for blk in blocks:
        cloud: str = getattr(blk, "cloud")  # noqa: B009
        region: str | None = getattr(blk, "region")  # noqa: B009
        zone: str | None = getattr(blk, "zone")  # noqa: B009
        if region is None:
            b = b.with_cloud(cloud)
        elif zone is None:
            b = b.with_region(cloud, region)
        else:
            b = b.with_zone(cloud, region, zone)
    return b


def placement_tiers(
    strategy: str, active_blocks: Iterable[BlockSpec | object], last: Where | None
) -> list[PlacementTier]:
    """The ordered placement searches for a (re)launch.

    `active_blocks` are this job's blocks still in force; `last` is where the
    previous attempt ran (None for the first launch).
    """
    blocks = list(active_blocks)
    with_blocks = blocked_from(blocks)
    unblocked = Blocked()
    if last is None or not blocks:
        return [PlacementTier(unblocked, None, "anywhere")]
    if strategy == FAILOVER and last.region is not None:
        zone_only = blocked_from(b for b in blocks if getattr(b, "zone", None) is not None)
        return [
            PlacementTier(zone_only, (last.cloud, last.region), "same region"),
            PlacementTier(zone_only, None, "anywhere but the preempted zone"),
            PlacementTier(unblocked, None, "anywhere (cool-down waived)"),
        ]
    return [
        PlacementTier(with_blocks, None, "avoiding preempted zone/region"),
        PlacementTier(unblocked, None, "anywhere (cool-down waived)"),
    ]


class ExitDecision(enum.StrEnum):
    SUCCEED = "SUCCEED"
    RECOVER = "RECOVER"  # exit code listed in recover_on_exit_codes
    RESTART = "RESTART"  # user-code error, budget left
    FAIL = "FAIL"


# A job recovers on a `recover_on_exit_codes` exit at most this many times (or
# max_restarts_on_errors times, if larger); then such an exit counts as an ordinary
# failure (restarted while restarts are left, else FAILED). Documented in managed-jobs.md.
EXIT_CODE_RECOVERY_CAP = 10


def exit_code_recovery_limit(max_restarts_on_errors: int) -> int:
    return max(EXIT_CODE_RECOVERY_CAP, max_restarts_on_errors)


def decide_exit(
    exit_code: int | None,
    *,
    recover_on_exit_codes: Iterable[int],
    restarts_on_errors: int,
    max_restarts_on_errors: int,
    exit_code_recoveries: int = 0,
) -> ExitDecision:
    """What to do when the job ended on a healthy cluster with `exit_code`.
    `exit_code_recoveries`: how often the job already recovered on a listed exit code
    (bounded by `exit_code_recovery_limit`)."""
    if exit_code == 0:
        return ExitDecision.SUCCEED
    if (exit_code is not None and exit_code in set(recover_on_exit_codes)
            and exit_code_recoveries < exit_code_recovery_limit(max_restarts_on_errors)):
        return ExitDecision.RECOVER
    if restarts_on_errors < max_restarts_on_errors:
        return ExitDecision.RESTART
    return ExitDecision.FAIL
