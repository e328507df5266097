"""Failover: typed cloud errors block the right scope, history is kept, nothing leaks.

The clouds here are fakes that keep an in-memory "provider" of instances tagged
by cluster name; `leaked()` is what a real provider would still be billing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from launcher.catalog.offer import Offer
from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionFailedError,
    ProvisionRequest,
    QuotaError,
)
from launcher.errors import NoPlacementError
from launcher.optimizer.ranking import Blocked, Placement
from launcher.provisioning.failover import LaunchAbortedError, provision_with_failover
from launcher.state.db import ClusterStatus, StateDB
from launcher.task.resources import ResourceCandidate


@dataclass
class FakeTask:
    name: str | None = "t"
    num_nodes: int = 2


def _placement(cloud: str, region: str, zone: str | None, price: float) -> Placement:
    offer = Offer(
        cloud=cloud, region=region, zone=zone, instance_type="gpu.x", accelerator="H100",
        accelerator_count=8, accelerator_memory_gib=80, vcpus=96, memory_gib=1024, price=price,
        spot_price=None, fabric=None, fabric_gbps=None, nvlink=True, max_nodes=None,
        arch="x86_64", source="test", fetched_at="2024-01-01",
    )
    return Placement(
        cloud=cloud, region=region, zone=zone, instance_type="gpu.x", accelerator="H100",
        accelerator_count=8, num_nodes=2, use_spot=False, node_price=price,
        hourly_cost=2 * price, total_cost=None, fabric=None, fabric_gbps=None, offer=offer,
        candidate=ResourceCandidate(accelerator="H100", accelerator_count=8),
    )


ALL = [
    _placement("aws", "us-east-1", "us-east-1a", 10),
    _placement("aws", "us-east-1", "us-east-1b", 11),
    _placement("aws", "us-west-2", "us-west-2a", 12),
    _placement("gcp", "us-central1", "us-central1-a", 13),
    _placement("azure", "eastus", None, 14),
    _placement("lambda", "us-tx", None, 20),  # not enabled
]


@dataclass
class FakePlan:
    placements: list[Placement]
    enabled: list[bool]


def fake_plan(task: object, blocked: Blocked) -> FakePlan:
    out = [
        p for p in ALL
        if p.cloud not in blocked.clouds
        and (p.cloud, p.region) not in blocked.regions
        and (p.cloud, p.region, p.zone or "") not in blocked.zones
    ]
    if not out:
        raise NoPlacementError("nothing left that fits")
    return FakePlan(out, [p.cloud != "lambda" for p in out])


@dataclass
class FakeCloud:
    name: str
    # (region, zone) -> error to raise there; None key part = any
    errors: dict[tuple[str, str | None], CloudError] = field(default_factory=dict)
    partial: bool = True  # create half the nodes before failing, like a real gang
    instances: dict[str, list[str]] = field(default_factory=dict)
    terminated: list[str] = field(default_factory=list)

    def check(self) -> CredentialStatus:
        return CredentialStatus(True)

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        err = self.errors.get((req.region, req.zone)) or self.errors.get((req.region, None))
        ids = [f"{self.name}-{req.cluster_name}-{r}" for r in range(req.num_nodes)]
        if err is not None:
            if self.partial:
                self.instances[req.cluster_name] = ids[:1]
            raise err
        self.instances[req.cluster_name] = ids
        return ClusterInfo(
            cluster_name=req.cluster_name, cloud=self.name, region=req.region, zone=req.zone,
            instance_type=req.instance_type, use_spot=req.use_spot,
            nodes=tuple(NodeInfo(rank=i, node_id=n, internal_ip=f"10.0.0.{i + 1}") for i, n in enumerate(ids)),
        )

    def query(self, cluster: str) -> dict[str, NodeState]:
        return {n: NodeState.RUNNING for n in self.instances.get(cluster, [])}

    def terminate(self, cluster: str) -> None:
        self.terminated.append(cluster)
        self.instances.pop(cluster, None)


def _clouds(**errors: dict[tuple[str, str | None], CloudError]) -> dict[str, FakeCloud]:
    return {name: FakeCloud(name, errors.get(name, {})) for name in ("aws", "gcp", "azure", "lambda")}


def _leaked(clouds: dict[str, FakeCloud], keep: str | None = None) -> dict[str, list[str]]:
    return {
        c.name: ids for c in clouds.values() for name, ids in c.instances.items() if name != keep
    } | {}


def test_capacity_blocks_zone_quota_blocks_region_auth_blocks_cloud() -> None:
    clouds = _clouds(
        aws={
            ("us-east-1", "us-east-1a"): CapacityError("no H100 in 1a", cloud="aws"),
            ("us-east-1", "us-east-1b"): QuotaError("vCPU quota 0", cloud="aws"),
            ("us-west-2", None): AuthError("token expired", cloud="aws"),
        },
        gcp={("us-central1", None): CapacityError("ZONE_RESOURCE_POOL_EXHAUSTED", cloud="gcp")},
    )
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "c1", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__)
        assert (got.placement.cloud, got.placement.region) == ("azure", "eastus")
        assert [(a.cloud, a.zone, a.error_type) for a in got.attempts] == [
            ("aws", "us-east-1a", "CapacityError"),
            ("aws", "us-east-1b", "QuotaError"),
            ("aws", "us-west-2a", "AuthError"),
            ("gcp", "us-central1-a", "CapacityError"),
        ]
        assert got.blocked.zones == {
            ("aws", "us-east-1", "us-east-1a"), ("gcp", "us-central1", "us-central1-a")
        }
        assert got.blocked.regions == {("aws", "us-east-1")}
        assert got.blocked.clouds == {"aws"}
        # every failed partial gang was terminated; only the winner has instances
        assert clouds["aws"].instances == {} and clouds["gcp"].instances == {}
        assert clouds["aws"].terminated == ["c1"] * 3
        assert clouds["azure"].instances["c1"] == ["azure-c1-0", "azure-c1-1"]
        rec = db.require_cluster("c1")
        assert rec.cloud == "azure" and rec.status is ClusterStatus.INIT
        assert [n.node_id for n in db.get_nodes("c1")] == ["azure-c1-0", "azure-c1-1"]
        assert sorted(db.clouds_touched("c1")) == ["aws", "azure", "gcp"]
        assert len(db.usage("c1")) == 1


def test_all_fail_raises_with_whole_history_and_nothing_left() -> None:
    cap = {("us-east-1", None): CapacityError("none", cloud="aws"), ("us-west-2", None): CapacityError("none", cloud="aws")}
    clouds = _clouds(
        aws=cap,  # type: ignore[arg-type]
        gcp={("us-central1", None): QuotaError("quota", cloud="gcp")},
        azure={("eastus", None): CapacityError("SkuNotAvailable", cloud="azure")},
    )
    with StateDB() as db, pytest.raises(ProvisionFailedError) as ei:
        provision_with_failover(FakeTask(), "c2", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__)
    err = ei.value
    assert [a.cloud for a in err.attempts] == ["aws", "aws", "aws", "gcp", "azure"]
    assert "SkuNotAvailable" in str(err) and "us-east-1b" in str(err)
    assert all(not c.instances for c in clouds.values())
    assert "lambda" not in str(err)  # never tried: not enabled


def test_invalid_request_stops_at_once() -> None:
    clouds = _clouds(aws={("us-east-1", "us-east-1a"): InvalidRequestError("bad image", cloud="aws")})
    with StateDB() as db, pytest.raises(ProvisionFailedError, match="invalid") as ei:
        provision_with_failover(FakeTask(), "c3", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__)
    assert [a.error_type for a in ei.value.attempts] == ["InvalidRequestError"]
    assert clouds["aws"].instances == {}
    assert clouds["gcp"].terminated == []


def test_crash_mid_provision_terminates_and_reraises() -> None:
    class Boom(FakeCloud):
        def provision(self, req: ProvisionRequest) -> ClusterInfo:
            self.instances[req.cluster_name] = ["half"]
            raise RuntimeError("SDK exploded")

    clouds: dict[str, FakeCloud] = {"aws": Boom("aws")}
    with StateDB() as db, pytest.raises(RuntimeError):
        provision_with_failover(FakeTask(), "c4", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__)
    assert clouds["aws"].instances == {}
    with StateDB() as db:  # the row (INIT, aws) stays so `down` can still find the cloud
        assert db.require_cluster("c4").cloud == "aws"


def test_confirmation_asked_once_and_again_only_when_cost_rises() -> None:
    clouds = _clouds(aws={("us-east-1", "us-east-1a"): CapacityError("none", cloud="aws")})
    asked: list[float] = []

    def confirm(p: Placement) -> bool:
        asked.append(p.hourly_cost)
        return True

    with StateDB() as db:
        provision_with_failover(FakeTask(), "c5", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__, confirm=confirm)
    assert asked == [20, 22]

    def decline(p: Placement) -> bool:
        return False

    with StateDB() as db, pytest.raises(LaunchAbortedError):
        provision_with_failover(FakeTask(), "c6", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__, confirm=decline)
    assert "c6" not in clouds["aws"].instances


def test_no_enabled_cloud_explains() -> None:
    def only_lambda(task: object, blocked: Blocked) -> FakePlan:
        return FakePlan([ALL[-1]], [False])

    with StateDB() as db, pytest.raises(NoPlacementError, match="lambda"):
        provision_with_failover(FakeTask(), "c7", db, plan_fn=only_lambda, cloud_fn=_clouds().__getitem__)
    with StateDB() as db:
        assert db.get_cluster("c7") is None  # nothing was attempted, nothing recorded


@dataclass
class ReasonedPlan(FakePlan):
    reasons: list[str | None] = field(default_factory=list)
    disabled_reasons: dict[str, str] = field(default_factory=dict)


def test_nothing_launchable_says_why_per_cloud() -> None:
    """An enabled cloud whose placements launcher cannot build (a GCP GPUDirect gang) is
    not reported as 'not enabled': each cloud gets its placements' reasons."""
    def plan(task: object, blocked: Blocked) -> FakePlan:
        return ReasonedPlan([ALL[3], ALL[-1]], [False, False],
                            ["planned only (GPUDirect)", "cloud not enabled"],
                            {"lambda": "no API key: set LAMBDA_API_KEY"})

    with StateDB() as db, pytest.raises(NoPlacementError) as err:
        provision_with_failover(FakeTask(), "c9", db, plan_fn=plan,
                                cloud_fn=_clouds().__getitem__)
    text = str(err.value)
    assert "(gcp: planned only (GPUDirect); lambda: cloud not enabled (no API key: set " \
           "LAMBDA_API_KEY))" in text
    assert "none is launchable" in text and "enabled on this machine" not in text


def test_only_region_restricts_placements() -> None:
    clouds = _clouds()
    with StateDB() as db:
        got = provision_with_failover(
            FakeTask(), "c8", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__,
            only_region=("gcp", "us-central1"),
        )
    assert got.placement.cloud == "gcp"


def test_ledger_bills_from_the_provision_call_at_the_launched_price() -> None:
    """The cost ledger row opens when the winning placement's provision call starts (the
    cloud bills booting nodes) at that placement's price, and keeps it."""
    import time

    class SlowCloud(FakeCloud):
        def provision(self, req: ProvisionRequest) -> ClusterInfo:
            self.called_at = time.time()
            time.sleep(0.2)  # a boot that takes a while
            return super().provision(req)

    clouds: dict[str, FakeCloud] = {n: SlowCloud(n) for n in ("aws", "gcp", "azure", "lambda")}
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "c5", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__)
        done = time.time()
        [entry] = db.usage("c5")
        assert entry.hourly_cost == got.placement.hourly_cost == 20.0  # 2 nodes x $10
        assert entry.num_nodes == 2 and entry.ended_at is None
        called = clouds["aws"].called_at  # type: ignore[attr-defined]
        assert entry.started_at <= called and done - entry.started_at >= 0.2
