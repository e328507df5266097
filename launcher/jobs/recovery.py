"""Recovery strategies: where to relaunch after a preemption, and what to do on an exit.

Pure functions over small typed values; the controller persists their output
(blocks) and hands `PlacementTier`s to `ClusterOps.provision_and_start`.

- EAGER_NEXT_REGION (default): other regions first (every recently preempted
  zone's region avoided), then other zones (any region, the same one included),
  then the preempted zones themselves, least penalized first - so a task pinned to
  one region moves to another zone of it, and a single-zone place (like `local`)
  still recovers, in place, when nothing else is possible.
- FAILOVER: the same region first (minus the preempted zones), then anywhere but
  the preempted zones, then the preempted zones, least penalized first.

Penalty, not a hard drop: a preemption leaves a block row for `cooldown_s`; a
zone's penalty is the sum over its rows of the time each has left (so it decays
linearly to 0 over the cool-down, and repeated preemptions add up). The last
tiers give the preempted zones back one at a time, the least penalized first; the
most recently / most often preempted zone comes back last.

Expected cost (multi-region spot): every tier also carries `observed`, the extra
interruption rate the job's recent preemptions imply (`observed_rates`): a preemption
counts as one interruption per cool-down window in its zone (3600 / cooldown_s per
hour of the placement, a gang counting once: 2/h for 30 min), and half that in the
other zones of its region, fading linearly to 0 as its block row runs out (the
penalty's decay). The optimizer adds it to
the data's rate, so within a tier the next placement is the one with the least expected
cost given what the job has seen, not the cheapest list price: a zone that was just
preempted never wins a tie on price, and a calmer zone wins over a slightly cheaper
one that keeps losing capacity.

Exits (`decide_exit`): exit 0 -> success; an exit code listed in
`recover_on_exit_codes` -> recover (does not use up the error budget); another
non-zero exit -> restart while `restarts_on_errors < max_restarts_on_errors`,
else FAILED. A job killed by a preemption never reaches `decide_exit`: the
controller checks the cloud's view first.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.catalog.interruption import InterruptionRate
from launcher.optimizer.ranking import Blocked
from launcher.optimizer.ranking import Place as RatePlace

EAGER_NEXT_REGION = "EAGER_NEXT_REGION"
FAILOVER = "FAILOVER"
# DEADLINE (launcher.jobs.controller.deadline): spot or on-demand chosen by a launcher.spot
# policy; its spot placements are searched like EAGER_NEXT_REGION's.
DEADLINE = "DEADLINE"
STRATEGIES = (EAGER_NEXT_REGION, FAILOVER, DEADLINE)
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


Place = tuple[str, str | None, str | None]  # (cloud, region, zone): a block row's key


@dataclass(frozen=True)
class PlacementTier:
    """One round of placement search: rank with `blocked`; when `only_region` is set,
    keep only placements in that (cloud, region). Tiers are tried in order."""

    blocked: Blocked
    only_region: tuple[str, str] | None = None
    label: str = ""
    # extra interruption rate per place from recent preemptions (see `observed_rates`),
    # for the optimizer's expected cost: ((cloud, region, zone or None), rate) pairs
    observed: tuple[tuple[RatePlace, InterruptionRate], ...] = ()

    def observed_rates(self) -> dict[RatePlace, InterruptionRate]:
        """`observed` as the mapping the planner takes."""
        return dict(self.observed)


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


def zone_penalties(blocks: Iterable[BlockSpec | object], now: float) -> dict[Place, float]:
    """Penalty of every blocked place (zone rows, and region rows of clouds without
    zones): the sum of the seconds its rows still have to run at `now`. Expired rows
    count 0. Cloud-wide rows are not penalties (they never come back early)."""
    out: dict[Place, float] = {}
    for blk in blocks:
        cloud: str = getattr(blk, "cloud")  # noqa: B009
        region: str | None = getattr(blk, "region")  # noqa: B009
        zone: str | None = getattr(blk, "zone")  # noqa: B009
        until: float = getattr(blk, "until")  # noqa: B009
        if region is None:
            continue
        key = (cloud, region, zone)
        out[key] = out.get(key, 0.0) + max(0.0, until - now)
    return out


# Half of a zone's observed rate goes to the other zones of its region.
REGION_SHARE = 0.5


def observed_rates(
    blocks: Iterable[BlockSpec | object], now: float, cooldown_s: float = DEFAULT_COOLDOWN_S
) -> dict[RatePlace, InterruptionRate]:
    """The extra interruption rate of a placement (a gang counts once) that recent
    preemptions imply (module docstring):
    per zone row, weight = its time left / `cooldown_s` (1 when fresh, 0 when expired),
    rate = weight x 3600 / cooldown_s per hour at (cloud, region, zone), and
    REGION_SHARE of that at (cloud, region, None). A region row counts as a zone only
    where its region has no zone rows (clouds without zones: EAGER_NEXT_REGION's region
    rows repeat a zone's preemption). Cloud-wide rows are not rates."""
    if cooldown_s <= 0:
        return {}
    per_hour = 3600.0 / cooldown_s
    rows: list[tuple[str, str, str | None, float]] = []
    for blk in blocks:
        region: str | None = getattr(blk, "region")  # noqa: B009
        until: float = getattr(blk, "until")  # noqa: B009
        if region is None:
            continue
        weight = min(1.0, max(0.0, until - now) / cooldown_s)
        if weight > 0:
            rows.append((getattr(blk, "cloud"), region, getattr(blk, "zone"), weight))  # noqa: B009
    zoned = {(c, r) for c, r, z, _ in rows if z is not None}
    rate: dict[RatePlace, float] = {}
    count: dict[RatePlace, int] = {}

    def add(key: RatePlace, x: float) -> None:
        rate[key] = rate.get(key, 0.0) + x
        count[key] = count.get(key, 0) + 1

    for c, r, z, w in rows:
        if z is not None:
            add((c, r, z), w * per_hour)
            add((c, r, None), REGION_SHARE * w * per_hour)
        elif (c, r) not in zoned:
            add((c, r, None), w * per_hour)
    out: dict[RatePlace, InterruptionRate] = {}
    for key, x in sorted(rate.items(), key=lambda kv: tuple(p or "" for p in kv[0])):
        n = count[key]
        where = f"zone {key[2]}" if key[2] is not None else f"region {key[1]}"
        out[key] = InterruptionRate(
            x, f"+{x:.2g}/h from {n} recent preemption{'s' if n != 1 else ''} in {where}")
    return out


def placement_tiers(
    strategy: str, active_blocks: Iterable[BlockSpec | object], last: Where | None,
    now: float | None = None, cooldown_s: float = DEFAULT_COOLDOWN_S,
) -> list[PlacementTier]:
    """The ordered placement searches for a (re)launch (see the module docstring).

    `active_blocks` are this job's blocks still in force at `now` (default: the
    current time); `last` is where the previous attempt ran (None for the first
    launch). Consecutive tiers never repeat one search. The last tier keeps only
    cloud-wide blocks: a preempted zone is always tried in the end (its capacity may
    have come back). Every tier carries the same `observed` rates (`observed_rates` of
    the blocks at `now`, with `cooldown_s` the cool-down they were written with).
    """
    blocks = list(active_blocks)
    if last is None or not blocks:
        return [PlacementTier(Blocked(), None, "anywhere")]
    at = time.time() if now is None else now
    pen = zone_penalties(blocks, at)
    seen = tuple(observed_rates(blocks, at, cooldown_s).items())
    base = blocked_from(b for b in blocks if getattr(b, "region", None) is None)
    zoned = {(c, r) for (c, r, z) in pen if z is not None}
    # Where preemptions happened: zones, and regions of clouds without zones. A region
    # row of a region with zone rows is EAGER's "avoid this region" mark only.
    spots = sorted((k for k in pen if k[2] is not None or (k[0], k[1]) not in zoned),
                   key=lambda k: (pen[k], k[0], k[1] or "", k[2] or ""))

    def blocked_for(keep: Iterable[Place]) -> Blocked:
        b = base
        for cloud, region, zone in keep:
            assert region is not None
            b = b.with_region(cloud, region) if zone is None else b.with_zone(cloud, region, zone)
        return b

    tiers: list[PlacementTier] = []
    if strategy == FAILOVER and last.region is not None:
        tiers.append(PlacementTier(blocked_for(spots), (last.cloud, last.region),
                                   "same region, other zones", seen))
    else:  # other regions first: avoid every region that saw a preemption recently
        regions = {(c, r, None) for (c, r, _z) in pen}
        tiers.append(PlacementTier(blocked_for([*spots, *regions]), None, "other regions", seen))
    tiers.append(PlacementTier(blocked_for(spots), None, "other zones", seen))
    for i, k in enumerate(spots):  # give the preempted places back, least penalized first
        where = "/".join(x for x in k[1:] if x)
        tiers.append(PlacementTier(blocked_for(spots[i + 1:]), None,
                                   f"preempted {where} again (penalty {pen[k]:.0f} s)", seen))
    out: list[PlacementTier] = []
    for t in tiers:
        if out and out[-1].blocked == t.blocked and out[-1].only_region == t.only_region:
            continue
        out.append(t)
    return out


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
