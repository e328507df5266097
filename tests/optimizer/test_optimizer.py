"""Optimizer: every filter, every rejection reason, ordering, and property tests.

The property tests check `rank` against a brute-force feasibility filter written
here from the spec (it deliberately shares no code with launcher.optimizer).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.catalog.offer import Offer
from launcher.optimizer.ranking import (
    Blocked,
    Placement,
    Ranking,
    Rejection,
    candidate_failures,
    rank,
)
from launcher.task.resources import NetworkRequest, ResourceCandidate


def mk_offer(**kw: Any) -> Offer:
    base: dict[str, Any] = dict(
        cloud="aws",
        region="us-east-1",
        zone="use1-az1",
        instance_type="p5.48xlarge",
        accelerator="H100",
        accelerator_count=8.0,
        accelerator_memory_gib=80.0,
        vcpus=192.0,
        memory_gib=2048.0,
        price=98.32,
        spot_price=40.0,
        fabric="efa",
        fabric_gbps=3200.0,
        nvlink=True,
        max_nodes=None,
        arch="x86_64",
        source="test",
        fetched_at="2025-01-01T00:00:00Z",
    )
    base.update(kw)
    return Offer(**base)


def cand(accelerator: str | None = "H100", count: float = 8, **kw: Any) -> ResourceCandidate:
    return ResourceCandidate(
        accelerator=accelerator, accelerator_count=count if accelerator else 0, **kw
    )


@dataclass
class FakeTask:
    cands: list[ResourceCandidate]
    num_nodes: int = 1

    def candidates(self) -> list[ResourceCandidate]:
        return list(self.cands)


def reason_of(offer: Offer, c: ResourceCandidate, num_nodes: int = 1, **kw: Any) -> str:
    r = rank(FakeTask([c], num_nodes), [offer], **kw)
    assert r.placements == []
    assert len(r.rejected) == 1
    return r.rejected[0].reason


def fits(offer: Offer, c: ResourceCandidate, num_nodes: int = 1, **kw: Any) -> Placement:
    r = rank(FakeTask([c], num_nodes), [offer], **kw)
    assert r.rejected == [], r.rejected
    assert len(r.placements) == 1
    return r.placements[0]


# ---------------------------------------------------------------- filters + reasons


def test_accelerator_count_must_match_exactly() -> None:
    assert fits(mk_offer(), cand("H100", 8)).accelerator_count == 8
    assert (
        reason_of(mk_offer(accelerator_count=4), cand("H100", 8)) == "needs 8 x H100, offer has 4"
    )
    assert (
        reason_of(mk_offer(accelerator_count=16), cand("H100", 8)) == "needs 8 x H100, offer has 16"
    )


def test_fractional_count() -> None:
    """A fraction asks for a share of one GPU: a node with at least that much serves it
    (SkyPilot semantics), a smaller fraction does not."""
    assert fits(mk_offer(accelerator="T4", accelerator_count=0.5), cand("T4", 0.5))
    assert fits(mk_offer(accelerator="T4", accelerator_count=1), cand("T4", 0.5))
    assert fits(mk_offer(accelerator="T4", accelerator_count=4), cand("T4", 0.5))
    assert reason_of(mk_offer(accelerator="T4", accelerator_count=0.25), cand("T4", 0.5)) == (
        "needs 0.5 x T4, offer has 0.25"
    )


def test_fractional_count_ranks_the_cheapest_node_with_the_gpu() -> None:
    offers = [
        mk_offer(accelerator="A100", accelerator_count=8, instance_type="big", price=30.0),
        mk_offer(accelerator="A100", accelerator_count=1, instance_type="one", price=4.0),
        mk_offer(accelerator="H100", accelerator_count=1, instance_type="other", price=1.0),
    ]
    ranking = rank(FakeTask([cand("A100", 0.5)]), offers)
    assert [p.instance_type for p in ranking.placements] == ["one", "big"]


def test_accelerator_name_mismatch_reason() -> None:
    assert (
        reason_of(mk_offer(accelerator="A100"), cand("H100", 8))
        == "needs 8 x H100, offer has 8 x A100"
    )
    assert reason_of(mk_offer(accelerator=None, accelerator_count=0), cand("H100", 8)) == (
        "needs 8 x H100, offer has no accelerator"
    )


def test_cpu_only_candidate_takes_only_offers_without_accelerators() -> None:
    cpu = mk_offer(instance_type="m5.large", accelerator=None, accelerator_count=0, fabric=None)
    assert fits(cpu, cand(None)).instance_type == "m5.large"
    assert reason_of(mk_offer(), cand(None)) == "needs no accelerator, offer has 8 x H100"


def test_named_instance_type_decides_even_without_accelerator() -> None:
    p = fits(mk_offer(), cand(None, instance_type="p5.48xlarge"))
    assert p.accelerator == "H100"
    assert reason_of(mk_offer(), cand(None, instance_type="p4d.24xlarge")) == (
        "instance type p5.48xlarge != p4d.24xlarge"
    )


def test_cpus_at_least_and_exact() -> None:
    o = mk_offer(vcpus=192)
    assert fits(o, cand(cpus=96, cpus_at_least=True))
    assert fits(o, cand(cpus=192, cpus_at_least=False))
    assert reason_of(o, cand(cpus=96, cpus_at_least=False)) == "192 vCPUs != 96"
    assert reason_of(o, cand(cpus=256)) == "192 vCPUs < 256"
    assert reason_of(mk_offer(vcpus=None), cand(cpus=4)) == "vCPUs unknown"


def test_memory_at_least_and_exact() -> None:
    o = mk_offer(memory_gib=2048)
    assert fits(o, cand(memory_gib=1024))
    assert fits(o, cand(memory_gib=2048, memory_at_least=False))
    assert reason_of(o, cand(memory_gib=4096)) == "memory 2048 GiB < 4096"
    assert reason_of(o, cand(memory_gib=1024, memory_at_least=False)) == "memory 2048 GiB != 1024"


def test_cloud_region_zone() -> None:
    o = mk_offer()
    assert fits(o, cand(cloud="aws", region="us-east-1", zone="use1-az1"))
    assert reason_of(o, cand(cloud="gcp")) == "cloud aws != gcp"
    assert reason_of(o, cand(region="us-west-2")) == "region us-east-1 != us-west-2"
    assert reason_of(o, cand(zone="use1-az2")) == "zone use1-az1 != use1-az2"
    assert reason_of(mk_offer(zone=None), cand(zone="use1-az2")) == "zone none != use1-az2"


def test_spot_and_on_demand_markets() -> None:
    p = fits(mk_offer(price=98.32, spot_price=40.0), cand(use_spot=True), num_nodes=2)
    assert (p.use_spot, p.node_price, p.hourly_cost) == (True, 40.0, 80.0)
    assert reason_of(mk_offer(spot_price=None), cand(use_spot=True)) == "no spot price"
    assert reason_of(mk_offer(price=None), cand(use_spot=False)) == "no on-demand price"


def test_max_hourly_cost_counts_all_nodes() -> None:
    o = mk_offer(price=49.16)
    assert fits(o, cand(max_hourly_cost=50), num_nodes=1)
    assert reason_of(o, cand(max_hourly_cost=50), num_nodes=2) == "$98.32/h > max_hourly_cost $50.00"


def test_fabric_rdma_is_any_rdma_fabric() -> None:
    rdma = cand(network=NetworkRequest("rdma"))
    for fabric in ("infiniband", "efa", "roce"):
        assert fits(mk_offer(fabric=fabric), rdma, 2).fabric == fabric
    assert reason_of(mk_offer(fabric="ethernet"), rdma, 2) == "fabric ethernet is not RDMA"
    assert reason_of(mk_offer(fabric="tcpx"), rdma, 2) == "fabric tcpx is not RDMA"
    assert reason_of(mk_offer(fabric=None), rdma, 2) == "fabric unknown (no source)"


def test_fabric_best_is_any_gpu_fabric_including_tcpx() -> None:
    best = cand(network=NetworkRequest("best"))
    for fabric in ("infiniband", "efa", "roce", "tcpx"):
        assert fits(mk_offer(fabric=fabric), best, 2).fabric == fabric
    assert reason_of(mk_offer(fabric="ethernet"), best, 2) == (
        "fabric ethernet is not a GPU fabric (InfiniBand, EFA, RoCE, TCPX)"
    )
    assert reason_of(mk_offer(fabric=None), best, 2) == "fabric unknown (no source)"


def test_named_fabric_must_match_exactly() -> None:
    ib = cand(network=NetworkRequest("infiniband"))
    assert fits(mk_offer(fabric="infiniband"), ib, 2)
    assert reason_of(mk_offer(fabric="efa"), ib, 2) == "fabric efa is not infiniband"
    assert reason_of(mk_offer(fabric=None), ib, 2) == "fabric unknown (no source)"


def test_network_is_moot_on_one_node() -> None:
    """An inter-node fabric or bandwidth never makes a one-node task infeasible."""
    for net in (NetworkRequest("rdma"), NetworkRequest("infiniband"), NetworkRequest("any", 1600)):
        c = cand(network=net)
        assert fits(mk_offer(fabric="ethernet", fabric_gbps=100), c, 1)
        assert fits(mk_offer(fabric=None, fabric_gbps=None), c, 1)
        assert candidate_failures(mk_offer(fabric=None, fabric_gbps=None), c, 2) != []


def test_fabric_any_or_absent_is_no_constraint() -> None:
    for c in (cand(), cand(network=NetworkRequest("any"))):
        assert fits(mk_offer(fabric=None, fabric_gbps=None), c)
        assert fits(mk_offer(fabric="ethernet"), c)


def test_min_gbps() -> None:
    c = cand(network=NetworkRequest("any", min_gbps=1600))
    assert fits(mk_offer(fabric_gbps=3200), c, 2)
    assert reason_of(mk_offer(fabric_gbps=400), c, 2) == "400 Gbps < min_gbps 1600"
    assert reason_of(mk_offer(fabric_gbps=None), c, 2) == "bandwidth unknown (no source)"


def test_gang_size() -> None:
    assert fits(mk_offer(max_nodes=None), cand(), num_nodes=64).num_nodes == 64
    assert fits(mk_offer(max_nodes=4), cand(), num_nodes=4)
    assert reason_of(mk_offer(max_nodes=1), cand(), num_nodes=2) == "max 1 node < 2"
    assert reason_of(mk_offer(max_nodes=4), cand(), num_nodes=8) == "max 4 nodes < 8"


def test_blocked_cloud_region_zone() -> None:
    o = mk_offer()
    assert reason_of(o, cand(), blocked=Blocked().with_cloud("aws")) == "blocked: cloud aws"
    assert reason_of(o, cand(), blocked=Blocked().with_region("aws", "us-east-1")) == (
        "blocked: region us-east-1"
    )
    assert reason_of(o, cand(), blocked=Blocked().with_zone("aws", "us-east-1", "use1-az1")) == (
        "blocked: zone use1-az1"
    )
    # blocks are qualified by cloud and region
    assert fits(o, cand(), blocked=Blocked().with_region("gcp", "us-east-1"))
    assert fits(o, cand(), blocked=Blocked().with_zone("aws", "us-east-1", "use1-az2"))


def test_local_cloud_only_when_named_or_allowed() -> None:
    local = mk_offer(
        cloud="local",
        region="local",
        zone=None,
        instance_type="local",
        price=0.0,
        spot_price=None,
        fabric=None,
        fabric_gbps=None,
    )
    assert reason_of(local, cand()) == "local cloud is used only when the task names it"
    assert fits(local, cand(cloud="local")).cloud == "local"
    assert fits(local, cand(), include_local=True).cloud == "local"


def test_first_failing_reason_follows_check_order() -> None:
    o = mk_offer(accelerator_count=4, max_nodes=1, fabric="ethernet", spot_price=None)
    c = cand(use_spot=True, network=NetworkRequest("rdma"))
    assert reason_of(o, c, num_nodes=2) == "needs 8 x H100, offer has 4"
    every = candidate_failures(o, c, 2)
    assert [f.kind for f in every] == ["accelerator", "market", "gang", "fabric"]


# ---------------------------------------------------------------- ranking


def test_cheapest_first_with_stable_ties() -> None:
    offers = [
        mk_offer(cloud="gcp", region="b", zone="b1", price=10.0),
        mk_offer(cloud="aws", region="z", zone="z1", price=10.0),
        mk_offer(cloud="aws", region="a", zone="a2", price=10.0),
        mk_offer(cloud="aws", region="a", zone="a1", price=10.0),
        mk_offer(cloud="azure", region="c", zone=None, price=5.0),
    ]
    want = [
        ("azure", "c", None),
        ("aws", "a", "a1"),
        ("aws", "a", "a2"),
        ("aws", "z", "z1"),
        ("gcp", "b", "b1"),
    ]
    for order in (offers, offers[::-1], offers[2:] + offers[:2]):
        r = rank(FakeTask([cand()]), order)
        assert [(p.cloud, p.region, p.zone) for p in r.placements] == want


def test_preference_beats_price() -> None:
    h100 = mk_offer(price=98.0)
    a100 = mk_offer(accelerator="A100", instance_type="p4d.24xlarge", price=30.0)
    ordered = FakeTask([cand("H100", 8, preference=0), cand("A100", 8, preference=1)])
    r = rank(ordered, [a100, h100])
    assert [p.accelerator for p in r.placements] == ["H100", "A100"]
    unordered = FakeTask([cand("H100", 8), cand("A100", 8)])
    assert [p.accelerator for p in rank(unordered, [h100, a100]).placements] == ["A100", "H100"]


def test_one_placement_per_offer_and_market() -> None:
    o = mk_offer(price=98.0, spot_price=40.0)
    task = FakeTask(
        [
            cand(preference=0, cloud="aws"),
            cand(preference=1),
            cand(preference=2, use_spot=True),
            cand(preference=3, use_spot=True, region="us-east-1"),
        ]
    )
    r = rank(task, [o])
    assert [(p.use_spot, p.candidate.preference) for p in r.placements] == [(False, 0), (True, 2)]
    assert r.rejected == []


def test_cost_multiplies_nodes_and_hours() -> None:
    r = rank(FakeTask([cand()], num_nodes=2), [mk_offer(price=98.32)], hours=10)
    p = r.placements[0]
    assert p.hourly_cost == pytest.approx(196.64)
    assert p.total_cost == pytest.approx(1966.4)
    assert rank(FakeTask([cand()]), [mk_offer()]).placements[0].total_cost is None


def test_rejection_explains_with_most_preferred_candidate_of_that_accelerator() -> None:
    task = FakeTask(
        [
            cand("A100", 8, preference=0),
            cand("H100", 8, preference=1, use_spot=True),
            cand("H100", 8, preference=2, cloud="gcp"),
        ]
    )
    h100 = mk_offer(spot_price=None)
    v100 = mk_offer(accelerator="V100", instance_type="p3.16xlarge")
    r = rank(task, [h100, v100])
    assert r.placements == []
    assert [x.reason for x in r.rejected] == ["no spot price", "needs 8 x A100, offer has 8 x V100"]


def test_every_unserved_offer_has_exactly_one_rejection() -> None:
    offers = [
        mk_offer(zone=f"z{i}", price=float(i + 1), max_nodes=(1 if i % 2 else None))
        for i in range(6)
    ]
    r = rank(FakeTask([cand()], num_nodes=2), offers)
    assert [p.zone for p in r.placements] == ["z0", "z2", "z4"]
    assert [(x.zone, x.reason) for x in r.rejected] == [
        (f"z{i}", "max 1 node < 2") for i in (1, 3, 5)
    ]


def test_no_candidates_rejects_everything() -> None:
    r = rank(FakeTask([]), [mk_offer()])
    assert r.placements == [] and len(r.rejected) == 1


def test_rank_is_deterministic_and_accepts_iterators() -> None:
    offers = [
        mk_offer(zone=f"z{i % 3}", region=f"r{i % 2}", price=float(i % 4 + 1)) for i in range(12)
    ]
    a = rank(FakeTask([cand()]), offers)
    b = rank(FakeTask([cand()]), iter(offers))
    assert a == b


# ---------------------------------------------------------------- brute force (independent)

RDMA = {"infiniband", "efa", "roce"}


def feasible_price(
    o: Offer, c: ResourceCandidate, n: int, blocked: Blocked, include_local: bool
) -> float | None:
    """The spec, written plainly: node price if `o` can run `n` nodes of `c`, else None."""
    if c.accelerator is not None:
        want, have = c.accelerator_count, o.accelerator_count
        count_ok = have + 1e-9 >= want if want < 1 else abs(have - want) <= 1e-9
        if o.accelerator != c.accelerator or not count_ok:
            return None
    elif c.instance_type is None and o.accelerator is not None:
        return None
    if c.instance_type is not None and c.instance_type != o.instance_type:
        return None
    if c.cloud is None and o.cloud == "local" and not include_local:
        return None
    for want, have in ((c.cloud, o.cloud), (c.region, o.region), (c.zone, o.zone)):
        if want is not None and want != have:
            return None
    for need, at_least, got in (
        (c.cpus, c.cpus_at_least, o.vcpus),
        (c.memory_gib, c.memory_at_least, o.memory_gib),
    ):
        if need is None:
            continue
        # the local cloud's nodes are processes: an exact request fits any machine that large
        at_least = at_least or o.cloud == "local"
        if got is None or (got < need if at_least else got != need):
            return None
    price = o.spot_price if c.use_spot else o.price
    if price is None:
        return None
    if o.max_nodes is not None and o.max_nodes < n:
        return None
    if c.network is not None and n > 1:  # one node: the inter-node network is moot
        f = c.network.fabric
        if f == "rdma" and o.fabric not in RDMA:
            return None
        if f == "best" and o.fabric not in RDMA | {"tcpx"}:
            return None
        if f not in ("rdma", "best", "any") and o.fabric != f:
            return None
        if c.network.min_gbps is not None and (
            o.fabric_gbps is None or o.fabric_gbps < c.network.min_gbps
        ):
            return None
    if c.max_hourly_cost is not None and price * n > c.max_hourly_cost:
        return None
    if o.cloud in blocked.clouds or (o.cloud, o.region) in blocked.regions:
        return None
    if o.zone is not None and (o.cloud, o.region, o.zone) in blocked.zones:
        return None
    return price


def check_against_brute_force(
    task: FakeTask, offers: Sequence[Offer], blocked: Blocked, include_local: bool, r: Ranking
) -> None:
    n = task.num_nodes
    feasible: dict[tuple[int, bool], list[tuple[int, float]]] = {}
    for i, o in enumerate(offers):
        for c in task.cands:
            price = feasible_price(o, c, n, blocked, include_local)
            if price is not None:
                feasible.setdefault((i, c.use_spot), []).append((c.preference, price * n))
    # every placement is feasible for its own candidate, at the price it states
    index = {id(o): i for i, o in enumerate(offers)}
    got: set[tuple[int, bool]] = set()
    for p in r.placements:
        price = feasible_price(p.offer, p.candidate, n, blocked, include_local)
        assert price is not None, p
        assert p.node_price == price and p.hourly_cost == pytest.approx(price * n)
        assert p.use_spot == p.candidate.use_spot
        slot = (index[id(p.offer)], p.use_spot)
        assert slot not in got, "one placement per (offer, market)"
        got.add(slot)
        # the placement uses the best (preference, cost) way to serve this slot
        assert (p.candidate.preference, p.hourly_cost) == pytest.approx(min(feasible[slot]))
    assert got == set(feasible), "every feasible (offer, market) is listed"
    # sorted; nothing feasible beats the first
    keys = [(p.candidate.preference, p.hourly_cost) for p in r.placements]
    assert keys == sorted(keys)
    if r.placements:
        best = min(min(v) for v in feasible.values())
        assert keys[0] == pytest.approx(best)
    # exactly the unserved offers are rejected, once each, each with a real reason
    served = {i for i, _ in feasible}
    assert len(r.rejected) == len(offers) - len(served)
    assert all(x.reason and x.reason != "not selected" for x in r.rejected)
    # the explaining path (candidate_failures) agrees with the spec on every pair
    for o in offers:
        for c in task.cands:
            fails = candidate_failures(o, c, n, blocked, include_local)
            assert (not fails) == (feasible_price(o, c, n, blocked, include_local) is not None), (
                o,
                c,
                fails,
            )


# ---------------------------------------------------------------- synthetic property test

_CLOUDS = {
    "aws": ["us-east-1", "us-west-2"],
    "gcp": ["us-central1", "us-east-1"],
    "vast": ["any", "eu"],
    "local": ["local"],
}
_ACCS = ["H100", "A100", "T4", None]


def _synthetic_pool(size: int = 600) -> list[Offer]:
    """A fixed, varied pool of offers (seeded), so examples draw a sample, not each field."""
    rnd = random.Random(1234)
    pool = []
    for _ in range(size):
        cloud = rnd.choice(sorted(_CLOUDS))
        region = rnd.choice(_CLOUDS[cloud])
        acc = rnd.choice(_ACCS)
        pool.append(
            mk_offer(
                cloud=cloud,
                region=region,
                zone=rnd.choice([None, region + "-a", region + "-b"]),
                instance_type=rnd.choice(["i1", "i2", "i3"]),
                accelerator=acc,
                accelerator_count=rnd.choice([1.0, 4.0, 8.0]) if acc else 0.0,
                vcpus=rnd.choice([None, 8.0, 96.0]),
                memory_gib=rnd.choice([None, 64.0, 1024.0]),
                price=rnd.choice([None, 1.0, 2.5, 30.0, 98.32]),
                spot_price=rnd.choice([None, 0.5, 1.0, 12.0]),
                fabric=rnd.choice([None, "infiniband", "efa", "roce", "tcpx", "ethernet"]),
                fabric_gbps=rnd.choice([None, 100.0, 400.0, 3200.0]),
                max_nodes=rnd.choice([None, 1, 2, 8]),
            )
        )
    return pool


_POOL = _synthetic_pool()


@st.composite
def synthetic_offers(draw: st.DrawFn) -> list[Offer]:
    size = draw(st.integers(0, 60))
    start = draw(st.integers(0, len(_POOL) - 1))
    return [_POOL[(start + 7 * k) % len(_POOL)] for k in range(size)]


def _maybe(*values: Any) -> st.SearchStrategy[Any]:
    """None about 60% of the time (unconstrained), else one of `values`."""
    return (
        st.sampled_from([None, None, None] + list(values[:2]))
        if len(values) <= 2
        else (st.sampled_from([None] * len(values) + list(values)))
    )


def candidates_strategy(
    accs: Sequence[str | None], clouds: dict[str, list[str]]
) -> st.SearchStrategy[ResourceCandidate]:
    @st.composite
    def one(draw: st.DrawFn) -> ResourceCandidate:
        acc = draw(st.sampled_from(list(accs)))
        cloud = draw(_maybe(*sorted(clouds)))
        all_regions = sorted({r for rs in clouds.values() for r in rs})
        region = draw(_maybe(*(clouds[cloud] if cloud else all_regions)))
        zone = draw(_maybe(region + "-a", region + "-b")) if region else None
        fabric = draw(_maybe("infiniband", "efa", "roce", "tcpx", "rdma", "best", "any"))
        min_gbps = draw(_maybe(100.0, 400.0, 3200.0))
        net = (
            None
            if fabric is None and min_gbps is None
            else NetworkRequest(fabric or "any", min_gbps)
        )
        return ResourceCandidate(
            accelerator=acc,
            accelerator_count=draw(st.sampled_from([1.0, 2.0, 4.0, 8.0])) if acc else 0.0,
            cpus=draw(_maybe(8.0, 96.0)),
            cpus_at_least=draw(st.booleans()),
            memory_gib=draw(_maybe(64.0, 1024.0)),
            memory_at_least=draw(st.booleans()),
            cloud=cloud,
            region=region,
            zone=zone,
            use_spot=draw(st.booleans()),
            max_hourly_cost=draw(_maybe(5.0, 50.0, 100.0, 500.0)),
            network=net,
            preference=draw(st.integers(0, 2)),
        )

    return one()


@st.composite
def blocked_strategy(draw: st.DrawFn, offers: Sequence[Offer]) -> Blocked:
    b = Blocked()
    for o in draw(st.lists(st.sampled_from(offers), max_size=3)) if offers else []:
        kind = draw(st.sampled_from(["cloud", "region", "zone"]))
        if kind == "cloud":
            b = b.with_cloud(o.cloud)
        elif kind == "region":
            b = b.with_region(o.cloud, o.region)
        elif o.zone is not None:
            b = b.with_zone(o.cloud, o.region, o.zone)
    return b


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_synthetic(data: st.DataObject) -> None:
    offers = data.draw(synthetic_offers())
    cands = data.draw(st.lists(candidates_strategy(_ACCS, _CLOUDS), min_size=1, max_size=4))
    task = FakeTask(cands, num_nodes=data.draw(st.integers(1, 4)))
    blocked = data.draw(blocked_strategy(offers))
    include_local = data.draw(st.booleans())
    r = rank(task, offers, blocked, include_local=include_local)
    check_against_brute_force(task, offers, blocked, include_local, r)


# ---------------------------------------------------------------- the real catalog


@pytest.fixture(scope="module")
def real_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Offer]]:
    """Every row of the bundled catalog (read with a throwaway LAUNCHER_HOME)."""
    from launcher.catalog import query

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAUNCHER_HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("LAUNCHER_LOCAL_GPUS", "none")
        yield list(query.offers())


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_property_real_catalog(real_catalog: list[Offer], data: st.DataObject) -> None:
    gpu_names = sorted({o.accelerator for o in real_catalog if o.accelerator})
    clouds: dict[str, set[str]] = {}
    for o in real_catalog:
        clouds.setdefault(o.cloud, set()).add(o.region)
    cloud_regions = {c: sorted(r) for c, r in clouds.items()}
    favourites = [
        a for a in ("H100", "A100", "A100-80GB", "H200", "B200", "L4", "T4") if a in gpu_names
    ]
    accs = st.sampled_from(favourites or gpu_names) | st.sampled_from(gpu_names)
    acc_list = data.draw(st.lists(accs, min_size=1, max_size=4, unique=True))
    cands = [
        dataclasses.replace(data.draw(candidates_strategy(acc_list, cloud_regions)))
        for _ in range(data.draw(st.integers(1, 4)))
    ]
    # mostly realistic counts: the counts the catalog has for these accelerators
    counts = sorted({o.accelerator_count for o in real_catalog if o.accelerator in acc_list})
    cands = [
        dataclasses.replace(c, accelerator_count=data.draw(st.sampled_from(counts)))
        if c.accelerator
        else c
        for c in cands
    ]
    wanted = {c.accelerator for c in cands}
    offers = [
        o for o in real_catalog if o.accelerator in wanted
    ]  # what the API's index pre-filter yields
    task = FakeTask(cands, num_nodes=data.draw(st.integers(1, 4)))
    blocked = data.draw(blocked_strategy(offers))
    r = rank(task, offers, blocked)
    check_against_brute_force(task, offers, blocked, False, r)


def test_fast_built_results_equal_normally_built_ones() -> None:
    o = mk_offer()
    c = cand()
    r = rank(FakeTask([c], num_nodes=2), [o, mk_offer(max_nodes=1)], hours=3)
    p = r.placements[0]
    normal = Placement(
        cloud=o.cloud,
        region=o.region,
        zone=o.zone,
        instance_type=o.instance_type,
        accelerator=o.accelerator,
        accelerator_count=o.accelerator_count,
        num_nodes=2,
        use_spot=False,
        node_price=o.price,  # type: ignore[arg-type]
        hourly_cost=o.price * 2,  # type: ignore[operator]
        total_cost=o.price * 2 * 3,  # type: ignore[operator]
        fabric=o.fabric,
        fabric_gbps=o.fabric_gbps,
        offer=o,
        candidate=c,
    )
    assert p == normal and hash(p) == hash(normal) and repr(p) == repr(normal)
    assert r.rejected == [
        Rejection("aws", "p5.48xlarge", "us-east-1", "use1-az1", "max 1 node < 2")
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.cloud = "gcp"  # type: ignore[misc]
