"""The optimizer: rank catalog offers into placements for a task. Pure: no I/O, no globals.

CONTRACT (shared): `Placement`, `Rejection`, `Ranking`, `Blocked` and
`rank(task, offers, blocked=Blocked(), hours=None) -> Ranking`.

How an offer is matched against one `ResourceCandidate` (checks run in this order;
the first one that fails is the offer's rejection reason):

1. accelerator name and exact per-node count (a fraction below one, `A100:0.5`, is a
   share of one GPU: any node with at least that much serves it; `accelerator=None`
   asks for a CPU-only node, unless the candidate names an `instance_type`, which then
   decides alone; a host of the user's own SSH pools serves it whatever GPUs it has:
   WHOLE_HOST_CLOUDS);
2. instance type, cloud, region, zone (the `local` cloud only takes part when the
   candidate names it, or when the caller passes `include_local=True`; a request-derived
   offer of NAMED_ONLY_CLOUDS, e.g. kubernetes without a kubeconfig, only when the
   candidate names it; a Kubernetes context's live offers rank beside the clouds);
3. vCPUs and memory (at least, or exactly; an offer of SIZED_TO_REQUEST_CLOUDS, the
   local cloud's processes, serves an exact request as an at-least one);
4. the market: a spot price for `use_spot`, an on-demand price otherwise;
5. gang size: `num_nodes <= max_nodes` when the offer has a limit;
6. network (multi-node only: on one node an inter-node fabric is moot; not checked on
   a request-derived offer of NAMED_ONLY_CLOUDS, whose cluster network is unknown):
   `fabric: rdma` = any of RDMA_FABRICS, `best` = any of BEST_FABRICS, a named fabric
   must match exactly,
   an unknown fabric (None) never satisfies a fabric request; `min_gbps` needs a known
   bandwidth at least that large;
7. `max_hourly_cost` against node price x num_nodes;
8. the blocked set (cloud, then region, then zone).

A placement is `num_nodes` nodes of one offer, so all nodes share one zone (or one
region where the offer has no zone).

Expected cost (spot): with a `SpotCostModel`, a spot placement is ranked on its
expected cost to finish W hours of work, not on its list price. A gang of n nodes is
interrupted when any node is, at rate lambda = n x the node's interruption rate per
hour (the model's `rates`; plus what recovery observed, `observed`, counted once
for the gang). Each interruption costs R hours of paid time without progress
(provisioning + setup + the work since the last checkpoint: `restart_overhead_hours`). With interruptions a
Poisson process over all paid time (overhead included), the expected paid time T
satisfies T = W + R x (lambda x T), so T = W / (1 - lambda x R): the expected cost is
the list cost x 1 / (1 - lambda x R) (infinite when lambda x R >= 1: in expectation
the job never finishes). The factor does not depend on W, so the order does not
either; W only scales `expected_cost`. On-demand placements: expected cost = list
cost. Without a model (`spot=None`) every expected cost is the list cost, so the
ranking is the list-price ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from launcher.catalog.interruption import InterruptionRate
from launcher.catalog.money import format_money
from launcher.catalog.offer import (
    SIZED_TO_REQUEST_CLOUDS,
    WHOLE_HOST_CLOUDS,
    Offer,
    fabric_satisfies,
    request_derived,
)

# The expected-cost model (module docstring) lives in launcher.optimizer.expected_cost; re-exported.
from launcher.optimizer.expected_cost import (
    DEFAULT_RESTART_OVERHEAD_HOURS as DEFAULT_RESTART_OVERHEAD_HOURS,
)
from launcher.optimizer.expected_cost import DEFAULT_WORK_HOURS as DEFAULT_WORK_HOURS
from launcher.optimizer.expected_cost import Place as Place
from launcher.optimizer.expected_cost import RateSource as RateSource
from launcher.optimizer.expected_cost import SpotCostModel as SpotCostModel
from launcher.optimizer.expected_cost import expected_cost_factor as expected_cost_factor
from launcher.task.resources import ResourceCandidate

LOCAL_CLOUD = "local"
_EPS = 1e-9
# How a fabric request reads in a rejection reason ("fabric ethernet is not RDMA").
_FABRIC_WORDS = {"rdma": "RDMA", "best": "a GPU fabric (InfiniBand, EFA, RoCE, TCPX)"}


class TaskLike(Protocol):
    """What the optimizer needs of a task (launcher.task.model.Task satisfies it)."""

    @property
    def num_nodes(self) -> int: ...

    def candidates(self) -> list[ResourceCandidate]: ...


@dataclass(frozen=True)
class Blocked:
    """Places failover has ruled out. Zones/regions are qualified by cloud."""

    clouds: frozenset[str] = frozenset()
    regions: frozenset[tuple[str, str]] = frozenset()  # (cloud, region)
    zones: frozenset[tuple[str, str, str]] = frozenset()  # (cloud, region, zone)

    def with_cloud(self, cloud: str) -> Blocked:
        return Blocked(self.clouds | {cloud}, self.regions, self.zones)

    def with_region(self, cloud: str, region: str) -> Blocked:
        return Blocked(self.clouds, self.regions | {(cloud, region)}, self.zones)

    def with_zone(self, cloud: str, region: str, zone: str) -> Blocked:
        return Blocked(self.clouds, self.regions, self.zones | {(cloud, region, zone)})

    def __bool__(self) -> bool:
        return bool(self.clouds or self.regions or self.zones)


@dataclass(frozen=True)
class Placement:
    """One way to run the task: `num_nodes` nodes of one offer, all in one zone/region."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str | None
    accelerator_count: float  # per node
    num_nodes: int
    use_spot: bool
    node_price: float  # $/h of one node in the chosen market
    hourly_cost: float  # node_price x num_nodes
    total_cost: float | None  # hourly_cost x hours when hours were given
    fabric: str | None
    fabric_gbps: float | None
    offer: Offer = field(repr=False, compare=False)
    candidate: ResourceCandidate = field(repr=False, compare=False)
    # Expected cost (module docstring), set when `rank` had a SpotCostModel (else None).
    # On-demand: expected_hourly_cost = hourly_cost, rate and source None.
    expected_hourly_cost: float | None = None  # $ per hour of work, all nodes (inf: never)
    expected_cost: float | None = None  # expected_hourly_cost x work hours
    interruption_rate_per_hour: float | None = None  # per node
    interruption_source: str | None = None

    @property
    def list_price_per_hour(self) -> float:
        """The list price of the whole placement per hour (= hourly_cost)."""
        return self.hourly_cost

    @property
    def ranking_cost(self) -> float:
        """What the ranking sorted on: the expected hourly cost when known, else the
        list price."""
        e = self.expected_hourly_cost
        return self.hourly_cost if e is None else e


@dataclass(frozen=True)
class Rejection:
    cloud: str
    instance_type: str
    region: str
    zone: str | None
    reason: str  # the FIRST reason this offer could not serve any candidate


@dataclass(frozen=True)
class Ranking:
    placements: list[Placement]  # best first: by candidate preference, then cost, then stable keys
    rejected: list[Rejection]


# Constraint kinds, in check order. `Failure.kind` lets callers group reasons
# (the planning API explains an empty ranking per constraint with them).
KIND_ACCELERATOR = "accelerator"
KIND_INSTANCE_TYPE = "instance_type"
KIND_LOCATION = "location"
KIND_CPUS = "cpus"
KIND_MEMORY = "memory"
KIND_MARKET = "market"
KIND_GANG = "gang"
KIND_FABRIC = "fabric"
KIND_BANDWIDTH = "bandwidth"
KIND_COST = "cost"
KIND_BLOCKED = "blocked"


@dataclass(frozen=True, slots=True)
class Failure:
    """One constraint an offer fails for one candidate."""

    kind: str  # one of the KIND_* names
    reason: str


def fmt_count(count: float) -> str:
    """8.0 -> "8", 0.5 -> "0.5"."""
    return str(int(count)) if float(count).is_integer() else f"{count:g}"


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _fmt_gbps(gbps: float) -> str:
    return f"{fmt_count(gbps)} Gbps"


def count_serves(have: float, want: float) -> bool:
    """Does a node with `have` accelerators serve a request for `want` per node?

    Whole counts match exactly. A fraction below one (SkyPilot's `A100:0.5`) asks for a
    share of one GPU, so any node with at least that much of the GPU serves it (a
    fractional offer such as Azure's 0.5 x A10, or a node with whole GPUs); ranking by
    price then prefers the smallest such node."""
    if want < 1 - _EPS:
        return have + _EPS >= want
    return abs(have - want) <= _EPS


def _accelerator_mismatch(offer: Offer, cand: ResourceCandidate) -> str | None:
    """Why `offer`'s accelerators are not what `cand` asks for (None = they are)."""
    if cand.accelerator is None:
        if (cand.instance_type is None and offer.accelerator is not None
                and offer.cloud not in WHOLE_HOST_CLOUDS):
            return (
                f"needs no accelerator, offer has {fmt_count(offer.accelerator_count)}"
                f" x {offer.accelerator}"
            )
        return None
    needs = f"needs {fmt_count(cand.accelerator_count)} x {cand.accelerator}"
    if offer.accelerator != cand.accelerator:
        if offer.accelerator is None:
            return f"{needs}, offer has no accelerator"
        return f"{needs}, offer has {fmt_count(offer.accelerator_count)} x {offer.accelerator}"
    if not count_serves(offer.accelerator_count, cand.accelerator_count):
        return f"{needs}, offer has {fmt_count(offer.accelerator_count)}"
    return None


def _size_miss(have: float | None, need: float | None, at_least: bool) -> str | None:
    """How an offer's vCPUs or memory (`have`) misses a request (`need`: exactly, or at
    least): None when it fits (or nothing is asked), "unknown", "<" or "!="."""
    if need is None:
        return None
    if have is None:
        return "unknown"
    if at_least:
        return "<" if have + _EPS < need else None
    return "!=" if abs(have - need) > _EPS else None


def candidate_failures(
    offer: Offer,
    cand: ResourceCandidate,
    num_nodes: int,
    blocked: Blocked = Blocked(),
    include_local: bool = False,
    first_only: bool = False,
) -> list[Failure]:
    """Every constraint `offer` fails for `cand` (check order), or only the first one.

    An empty list means the offer can serve the candidate. Pure; never raises.
    """
    out: list[Failure] = []

    def fail(kind: str, reason: str) -> bool:
        out.append(Failure(kind, reason))
        return first_only

    # 1. accelerator
    acc_reason = _accelerator_mismatch(offer, cand)
    if acc_reason is not None and fail(KIND_ACCELERATOR, acc_reason):
        return out
    # 2. instance type and location
    if (
        cand.instance_type is not None
        and offer.instance_type != cand.instance_type
        and fail(KIND_INSTANCE_TYPE, f"instance type {offer.instance_type} != {cand.instance_type}")
    ):
        return out
    if cand.cloud is not None:
        if offer.cloud != cand.cloud and fail(
            KIND_LOCATION, f"cloud {offer.cloud} != {cand.cloud}"
        ):
            return out
    elif (
        (offer.cloud == LOCAL_CLOUD and not include_local) or request_derived(offer)
    ) and fail(KIND_LOCATION, f"{offer.cloud} cloud is used only when the task names it"):
        return out
    if (
        cand.region is not None
        and offer.region != cand.region
        and fail(KIND_LOCATION, f"region {offer.region} != {cand.region}")
    ):
        return out
    if (
        cand.zone is not None
        and offer.zone != cand.zone
        and fail(KIND_LOCATION, f"zone {offer.zone or 'none'} != {cand.zone}")
    ):
        return out
    # 3. cpus / memory
    sized = offer.cloud in SIZED_TO_REQUEST_CLOUDS
    for kind, asked, at_least, got, what in (
        (KIND_CPUS, cand.cpus, cand.cpus_at_least or sized, offer.vcpus, "vCPUs"),
        (KIND_MEMORY, cand.memory_gib, cand.memory_at_least or sized, offer.memory_gib,
         "memory"),
    ):
        miss = _size_miss(got, asked, at_least)
        if miss is None:
            continue
        if got is None or asked is None:
            text = f"{what} unknown"
        elif kind == KIND_CPUS:
            text = f"{fmt_count(got)} vCPUs {miss} {fmt_count(asked)}"
        else:
            text = f"memory {fmt_count(got)} GiB {miss} {fmt_count(asked)}"
        if fail(kind, text):
            return out
    # 4. market
    price = offer.spot_price if cand.use_spot else offer.price
    if price is None and fail(
        KIND_MARKET, "no spot price" if cand.use_spot else "no on-demand price"
    ):
        return out
    # 5. gang size
    if (
        offer.max_nodes is not None
        and num_nodes > offer.max_nodes
        and fail(KIND_GANG, f"max {_nodes(offer.max_nodes)} < {num_nodes}")
    ):
        return out
    # 6. network
    # one node: no inter-node traffic; a request-derived offer (NAMED_ONLY_CLOUDS) has
    # whatever network the user's cluster has, which no one here can check
    net = cand.network if num_nodes > 1 and not request_derived(offer) else None
    if net is not None:
        wanted = net.fabric
        if wanted != "any":
            have = offer.fabric
            if have is None:
                if fail(KIND_FABRIC, "fabric unknown (no source)"):
                    return out
            elif not fabric_satisfies(have, wanted) and fail(
                KIND_FABRIC, f"fabric {have} is not {_FABRIC_WORDS.get(wanted, wanted)}"
            ):
                return out
        if net.min_gbps is not None:
            gbps = offer.fabric_gbps
            if gbps is None:
                if fail(KIND_BANDWIDTH, "bandwidth unknown (no source)"):
                    return out
            elif gbps + _EPS < net.min_gbps and fail(
                KIND_BANDWIDTH, f"{_fmt_gbps(gbps)} < min_gbps {fmt_count(net.min_gbps)}"
            ):
                return out
    # 7. cost cap
    if price is not None and cand.max_hourly_cost is not None:
        hourly = price * num_nodes
        if hourly > cand.max_hourly_cost + _EPS and fail(
            KIND_COST, f"{format_money(hourly)}/h > max_hourly_cost {format_money(cand.max_hourly_cost)}"
        ):
            return out
    # 8. blocked
    if blocked:
        if offer.cloud in blocked.clouds:
            if fail(KIND_BLOCKED, f"blocked: cloud {offer.cloud}"):
                return out
        elif (offer.cloud, offer.region) in blocked.regions:
            if fail(KIND_BLOCKED, f"blocked: region {offer.region}"):
                return out
        elif (
            offer.zone is not None
            and (offer.cloud, offer.region, offer.zone) in blocked.zones
            and fail(KIND_BLOCKED, f"blocked: zone {offer.zone}")
        ):
            return out
    return out


class _Matcher:
    """A candidate's constraints, flattened once so the per-offer test is cheap."""

    __slots__ = (
        "cand",
        "acc",
        "count",
        "cpu_only",
        "itype",
        "cloud",
        "region",
        "zone",
        "local_ok",
        "cpus",
        "cpus_min",
        "mem",
        "mem_min",
        "spot",
        "cap",
        "fabric",
        "min_gbps",
        "num_nodes",
        "blocked",
    )

    def __init__(
        self, cand: ResourceCandidate, num_nodes: int, blocked: Blocked, include_local: bool
    ) -> None:
        self.cand = cand
        self.acc = cand.accelerator
        self.count = cand.accelerator_count
        self.cpu_only = cand.accelerator is None and cand.instance_type is None
        self.itype = cand.instance_type
        self.cloud = cand.cloud
        self.region = cand.region
        self.zone = cand.zone
        self.local_ok = include_local or cand.cloud == LOCAL_CLOUD
        self.cpus = cand.cpus
        self.cpus_min = cand.cpus_at_least
        self.mem = cand.memory_gib
        self.mem_min = cand.memory_at_least
        self.spot = cand.use_spot
        self.cap = cand.max_hourly_cost
        net = cand.network if num_nodes > 1 else None  # one node: no inter-node traffic
        self.fabric = net.fabric if net is not None and net.fabric != "any" else None
        self.min_gbps = net.min_gbps if net is not None else None
        self.num_nodes = num_nodes
        self.blocked = blocked if blocked else None

    def price(self, o: Offer) -> float | None:
        """The node price if `o` serves this candidate, else None (fast path, no reasons)."""
        if self.acc is None:
            if self.cpu_only and o.accelerator is not None and o.cloud not in WHOLE_HOST_CLOUDS:
                return None
        elif o.accelerator != self.acc or not count_serves(o.accelerator_count, self.count):
            return None
        if self.itype is not None and o.instance_type != self.itype:
            return None
        if self.cloud is not None:
            if o.cloud != self.cloud:
                return None
        elif (o.cloud == LOCAL_CLOUD and not self.local_ok) or request_derived(o):
            return None
        if self.region is not None and o.region != self.region:
            return None
        if self.zone is not None and o.zone != self.zone:
            return None
        sized = o.cloud in SIZED_TO_REQUEST_CLOUDS
        if (_size_miss(o.vcpus, self.cpus, self.cpus_min or sized) is not None
                or _size_miss(o.memory_gib, self.mem, self.mem_min or sized) is not None):
            return None
        price = o.spot_price if self.spot else o.price
        if price is None:
            return None
        if o.max_nodes is not None and self.num_nodes > o.max_nodes:
            return None
        fabric = self.fabric
        unchecked_net = request_derived(o)  # the user's own cluster: see above
        if fabric is not None and not unchecked_net and not fabric_satisfies(o.fabric, fabric):
            return None
        if self.min_gbps is not None and not unchecked_net and (
            o.fabric_gbps is None or o.fabric_gbps + _EPS < self.min_gbps
        ):
            return None
        if self.cap is not None and price * self.num_nodes > self.cap + _EPS:
            return None
        b = self.blocked
        if b is not None and (
            o.cloud in b.clouds
            or (o.cloud, o.region) in b.regions
            or (o.zone is not None and (o.cloud, o.region, o.zone) in b.zones)
        ):
            return None
        return price


def failure_key(cand: ResourceCandidate, blocked: Blocked) -> Callable[[Offer], tuple[object, ...]]:
    """A key function: offers with equal keys fail `cand` in exactly the same way
    (same failures, same reason texts), so callers can compute failures once per key.
    Region, zone and prices are part of the key only when a check reads them."""
    need_region = cand.region is not None or bool(blocked.regions or blocked.zones)
    need_zone = cand.zone is not None or bool(blocked.zones)
    need_price = cand.max_hourly_cost is not None

    def key(o: Offer) -> tuple[object, ...]:
        return (
            o.cloud,
            o.region if need_region else None,
            o.zone if need_zone else None,
            o.instance_type,
            o.accelerator,
            o.accelerator_count,
            o.vcpus,
            o.memory_gib,
            o.price if need_price else o.price is None,
            o.spot_price if need_price else o.spot_price is None,
            o.max_nodes,
            o.fabric,
            o.fabric_gbps,
        )

    return key


def _first_reason(
    o: Offer, cand: ResourceCandidate, num_nodes: int, blocked: Blocked, include_local: bool
) -> str:
    failures = candidate_failures(o, cand, num_nodes, blocked, include_local, first_only=True)
    return failures[0].reason if failures else "not selected"


# Frozen dataclasses set each field through object.__setattr__ (~0.5 us a field);
# a full-catalog ranking builds tens of thousands of these, so fill __dict__ directly.
# Equal to normal construction (tests check it); neither class uses __slots__.
_new = object.__new__


def _new_placement(
    o: Offer,
    cand: ResourceCandidate,
    num_nodes: int,
    spot: bool,
    price: float,
    hourly: float,
    total: float | None,
    expected: tuple[float, float | None, InterruptionRate | None] | None = None,
) -> Placement:
    """`expected`: (expected hourly cost, expected cost, node rate) under a model."""
    p = _new(Placement)
    p.__dict__.update(
        cloud=o.cloud,
        region=o.region,
        zone=o.zone,
        instance_type=o.instance_type,
        accelerator=o.accelerator,
        accelerator_count=o.accelerator_count,
        num_nodes=num_nodes,
        use_spot=spot,
        node_price=price,
        hourly_cost=hourly,
        total_cost=total,
        fabric=o.fabric,
        fabric_gbps=o.fabric_gbps,
        offer=o,
        candidate=cand,
        expected_hourly_cost=None if expected is None else expected[0],
        expected_cost=None if expected is None else expected[1],
        interruption_rate_per_hour=(
            None if expected is None or expected[2] is None else expected[2].per_hour),
        interruption_source=(
            None if expected is None or expected[2] is None else expected[2].source),
    )
    return p


def _new_rejection(o: Offer, reason: str) -> Rejection:
    r = _new(Rejection)
    r.__dict__.update(
        cloud=o.cloud, instance_type=o.instance_type, region=o.region, zone=o.zone, reason=reason
    )
    return r


def rank(
    task: TaskLike,
    offers: Iterable[Offer],
    blocked: Blocked = Blocked(),
    hours: float | None = None,
    *,
    include_local: bool = False,
    spot: SpotCostModel | None = None,
) -> Ranking:
    """Rank `offers` for `task`. Deterministic; never raises for an unsatisfiable task
    (an empty `placements` with reasons in `rejected` says why).

    Placements are sorted by (candidate preference, expected hourly cost, interruption
    rate, cloud, region, zone, instance type, on-demand before spot); the expected hourly cost is the list
    hourly cost unless `spot` is given, which costs spot placements by their expected
    cost to finish (module docstring) and fills each placement's expected_* and
    interruption_* fields; only the best placement per (offer, market)
    is kept. Every offer that served no candidate gets one `Rejection`: the first failing
    check of the most-preferred candidate asking for the offer's accelerator (or of the
    first candidate when none does). `include_local=True` lets candidates that name no
    cloud use the `local` cloud (the planning API sets it when no other cloud is enabled).
    """
    offer_list: Sequence[Offer] = offers if isinstance(offers, Sequence) else list(offers)
    num_nodes = task.num_nodes
    cands = sorted(task.candidates(), key=lambda c: c.preference)  # stable: ties keep order
    matchers = [_Matcher(c, num_nodes, blocked, include_local) for c in cands]

    # Offers indexed by accelerator once, so each candidate scans only its own group.
    by_acc: dict[str | None, list[int]] = {}
    whole_hosts: list[int] = []  # GPU hosts of the user's own pools: CPU-only tasks fit too
    for i, o in enumerate(offer_list):
        group = by_acc.get(o.accelerator)
        if group is None:
            by_acc[o.accelerator] = [i]
        else:
            group.append(i)
        if o.accelerator is not None and o.cloud in WHOLE_HOST_CLOUDS:
            whole_hosts.append(i)

    # One entry per (offer, market): matchers run in preference order and an offer's
    # price depends only on the market, so the first matcher to serve a slot is its best.
    taken: set[tuple[int, bool]] = set()
    served: set[int] = set()
    entries: list[tuple[int, float, float, str, str, str, str, bool, int, _Matcher, float, float,
                        InterruptionRate | None]] = []
    # (cloud, region, zone, type) -> (node rate, expected-cost factor): rows repeat types
    rate_cache: dict[tuple[str, str, str | None, str], tuple[InterruptionRate, float]] = {}
    overhead = spot.restart_overhead_hours if spot is not None else 0.0
    for m in matchers:
        if m.acc is not None:
            idxs: Iterable[int] = by_acc.get(m.acc, ())
        elif m.cpu_only:
            idxs = [*by_acc.get(None, ()), *whole_hosts]
        else:
            idxs = range(len(offer_list))  # an instance type was named: any offer may be it
        pref = m.cand.preference
        market_spot = m.spot
        costed = spot is not None and market_spot
        for i in idxs:
            slot = (i, market_spot)
            if slot in taken:
                continue
            o = offer_list[i]
            price = m.price(o)
            if price is None:
                continue
            taken.add(slot)
            served.add(i)
            hourly = price * num_nodes
            rate: InterruptionRate | None = None
            if costed:
                assert spot is not None
                key = (o.cloud, o.region, o.zone, o.instance_type)
                hit = rate_cache.get(key)
                if hit is None:
                    r = spot.node_rate(o, num_nodes)
                    hit = rate_cache[key] = (
                        r, expected_cost_factor(r.per_hour * num_nodes, overhead))
                rate, factor = hit
                ranked = hourly * factor
                calm = rate.per_hour  # equal expected costs (e.g. both never): calmer first
            else:
                ranked = hourly
                calm = 0.0
            entries.append(
                (
                    pref,
                    ranked,
                    calm,
                    o.cloud,
                    o.region,
                    o.zone or "",
                    o.instance_type,
                    market_spot,
                    i,
                    m,
                    price,
                    hourly,
                    rate,
                )
            )
    entries.sort()  # the index breaks any tie before the matcher would be compared

    work = hours if hours is not None else (spot.work_hours if spot is not None else None)
    placements = [
        _new_placement(
            offer_list[e[8]],
            e[9].cand,
            num_nodes,
            e[7],
            e[10],
            e[11],
            e[11] * hours if hours is not None else None,
            None if spot is None else (e[1], e[1] * work if work is not None else None, e[12]),
        )
        for e in entries
    ]

    rejected: list[Rejection] = []
    if not cands:
        rejected = [_new_rejection(o, "task has no resource candidates") for o in offer_list]
    elif len(served) < len(offer_list):
        # most-preferred candidate per accelerator name (first wins on ties: cands is sorted)
        explain_by_acc: dict[str | None, ResourceCandidate] = {}
        for c in cands:
            explain_by_acc.setdefault(c.accelerator, c)
        first = cands[0]
        # Offers with equal failure keys get the same reason: computed once per key
        # (most unserved rows of a full catalog repeat an instance type across regions).
        keyers: dict[int, Callable[[Offer], tuple[object, ...]]] = {}
        reasons: dict[tuple[int, tuple[object, ...]], str] = {}
        for i, o in enumerate(offer_list):
            if i in served:
                continue
            cand = explain_by_acc.get(o.accelerator, first)
            keyer = keyers.get(id(cand))
            if keyer is None:
                keyer = keyers[id(cand)] = failure_key(cand, blocked)
            rkey = (id(cand), keyer(o))
            reason = reasons.get(rkey)
            if reason is None:
                reason = reasons[rkey] = _first_reason(o, cand, num_nodes, blocked, include_local)
            rejected.append(_new_rejection(o, reason))
    return Ranking(placements, rejected)


@dataclass(frozen=True)
class Reorder:
    """Expected cost ranks `ahead` before `cheaper`, though `cheaper` has the lower list
    price (same candidate preference)."""

    ahead: Placement
    cheaper: Placement


def reordered_by_expected_cost(
    placements: Sequence[Placement], limit: int = 20, most: int = 3
) -> list[Reorder]:
    """Where the ranking's order (by expected cost) differs from the list-price order,
    among the best `limit` placements: for each placement, in ranking order, that some
    better-ranked placement of the same preference has a strictly higher list price,
    one `Reorder` naming the best-ranked such placement. Placements that differ only by
    zone count once. At most `most` entries. Pure."""
    out: list[Reorder] = []
    seen: set[tuple[object, ...]] = set()
    head = placements[:limit]
    for j, b in enumerate(head):
        for a in head[:j]:
            if a.candidate.preference == b.candidate.preference and (
                a.hourly_cost > b.hourly_cost + _EPS
            ):
                key = (a.cloud, a.region, a.instance_type, a.use_spot,
                       b.cloud, b.region, b.instance_type, b.use_spot)
                if key not in seen:
                    seen.add(key)
                    out.append(Reorder(a, b))
                break
        if len(out) >= most:
            break
    return out
