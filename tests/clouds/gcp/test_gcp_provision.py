"""GCPCloud against the Compute REST fake (no bodies: an injected node waiter).

provision/query/stop/start/terminate; the insert request's shape (labels, metadata
ssh-keys, SPOT scheduling, requestId UUID5); compact placement created and deleted;
GPUDirect types refused for gangs; error mapping per class, from HTTP errors and from
errors inside DONE operations (the fake answers in the API's shapes); failover through
`provision_with_failover` across zones, regions and clouds.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from launcher.catalog.offer import Offer
from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    CloudQuotaError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionFailedError,
    ProvisionRequest,
    QuotaError,
)
from launcher.clouds.gcp.cloud import GCPCloud, Timeouts
from launcher.clouds.gcp.provision import request_id
from launcher.clouds.gcp.session import Clients
from launcher.config.settings import GCPSettings
from launcher.errors import NoPlacementError
from launcher.optimizer.ranking import Blocked, Placement
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from launcher.task.resources import ResourceCandidate
from tests.gcp_fake import PROJECT, Fault, GCPFake

SETTINGS = GCPSettings(project=PROJECT, use_internal_ips=True, ssh_user="root")


def make_cloud(fake: GCPFake, anonymous: bool = True) -> GCPCloud:
    """The product's cloud on the fake: AnonymousCredentials + the fake's endpoint
    injected (anonymous), or the documented env settings of `gcp_env` (not)."""
    clients = None
    if anonymous:
        from google.auth.credentials import AnonymousCredentials

        clients = Clients(SETTINGS, credentials=AnonymousCredentials(), endpoint=fake.endpoint)
    return GCPCloud(clients=clients, settings=SETTINGS, node_waiter=lambda info, _d: info,
                    timeouts=Timeouts(poll=0.01, running=10, teardown=10), sleep=lambda _s: None)


def req(name: str = "c1", zone: str = "us-central1-a", n: int = 2, **kw: Any) -> ProvisionRequest:
    fields: dict[str, Any] = dict(cluster_name=name, cloud="gcp", region=zone.rsplit("-", 1)[0],
                                  zone=zone, instance_type="n2-standard-2", num_nodes=n,
                                  use_spot=False, idempotency_token=f"tok-{name}")
    fields.update(kw)
    return ProvisionRequest(**fields)


def test_provision_query_stop_start_terminate(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    info = cloud.provision(req())
    assert [n.node_id for n in info.nodes] == ["c1-0", "c1-1"]
    assert [n.internal_ip for n in info.nodes] == [i["networkInterfaces"][0]["networkIP"]
                                                   for i in sorted(gcp_env.live(),
                                                                   key=lambda i: i["name"])]
    body = gcp_env.state.instances[("us-central1-a", "c1-0")]
    assert body["labels"]["launcher-cluster"] == "c1" and body["labels"]["launcher-rank"] == "0"
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["ssh-keys"].startswith("root:ssh-ed25519 ") and items["launcher-cluster"] == "c1"
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith(
        "/ubuntu-os-cloud/global/images/ubuntu-2204-lts-v20260101")
    assert "scheduling" not in body  # on-demand CPU
    assert cloud.query("c1") == {"c1-0": NodeState.RUNNING, "c1-1": NodeState.RUNNING}
    assert cloud.list_tagged_clusters() == {"c1": ["c1-0", "c1-1"]}

    cloud.stop("c1")
    assert cloud.query("c1") == {"c1-0": NodeState.STOPPED, "c1-1": NodeState.STOPPED}
    again = cloud.start("c1")
    assert [n.node_id for n in again.nodes] == ["c1-0", "c1-1"]
    assert cloud.query("c1") == {"c1-0": NodeState.RUNNING, "c1-1": NodeState.RUNNING}

    cloud.terminate("c1")
    cloud.terminate("c1")  # idempotent
    assert gcp_env.leaks() == {"instances": [], "policies": [], "firewalls": []}
    assert cloud.query("c1") == {}


def test_spot_preemption_is_told_apart_from_a_user_delete(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    cloud.provision(req("s1", use_spot=True, disk_size_gb=120))
    body = gcp_env.state.instances[("us-central1-a", "s1-0")]
    assert body["scheduling"] == {"provisioningModel": "SPOT",
                                  "instanceTerminationAction": "DELETE",
                                  "automaticRestart": False}
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "120"
    gcp_env.preempt(["s1-0"])
    # s1-1 deleted by a user (no preemption operation): TERMINATED, not PREEMPTED
    from google.cloud import compute_v1

    op = cloud.clients.instances().delete_unary(project=PROJECT, zone="us-central1-a",
                                                instance="s1-1")
    cloud.clients.zone_operations().wait(project=PROJECT, zone="us-central1-a",
                                         operation=op.name)
    assert isinstance(op, compute_v1.Operation) and op.id > 0  # numeric operation ids
    assert cloud.query("s1") == {"s1-0": NodeState.PREEMPTED, "s1-1": NodeState.TERMINATED}
    with pytest.raises(InvalidRequestError):
        cloud.provision(req("s2", n=2, instance_type="a3-highgpu-8g", accelerator="H100",
                            accelerator_count=8))
    cloud.terminate("s1")
    assert gcp_env.leaks()["instances"] == []


def test_compact_placement_policy_per_gpu_gang_and_deleted_with_it(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    cloud.provision(req("g1", instance_type="a2-highgpu-8g", accelerator="A100",
                        accelerator_count=8))
    assert gcp_env.leaks()["policies"] == ["launcher-g1"]
    policy = gcp_env.state.policies[("us-central1", "launcher-g1")]
    assert policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
    body = gcp_env.state.instances[("us-central1-a", "g1-1")]
    assert body["resourcePolicies"] == [
        f"projects/{PROJECT}/regions/us-central1/resourcePolicies/launcher-g1"]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert "deeplearning-platform-release" in body["disks"][0]["initializeParams"]["sourceImage"]
    cloud.terminate("g1")
    assert gcp_env.leaks() == {"instances": [], "policies": [], "firewalls": []}


def test_n1_gpus_are_guest_accelerators_and_ports_rule_is_per_cluster(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    cloud.provision(req("t4", n=1, instance_type="n1-standard-4", accelerator="T4",
                        accelerator_count=1, ports=("8080",)))
    body = gcp_env.state.instances[("us-central1-a", "t4-0")]
    assert body["guestAccelerators"] == [{
        "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
        "acceleratorCount": 1}]
    assert "launcher-t4-ports" in gcp_env.state.firewalls
    cloud.terminate("t4")
    assert gcp_env.leaks() == {"instances": [], "policies": [], "firewalls": []}


def test_request_id_is_a_stable_uuid_per_attempt_and_rank() -> None:
    a = request_id("tok", 0)
    assert a is not None and uuid.UUID(a).version == 5
    assert a == request_id("tok", 0) != request_id("tok", 1) != request_id("tok2", 1)
    assert request_id(None, 0) is None


def test_a_retried_insert_with_the_same_request_id_creates_nothing_new(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    cloud.provision(req("r1", n=1))
    from launcher.clouds.gcp.provision import NodePlan, insert_request

    plan = NodePlan(project=PROJECT, zone="us-central1-a", region="us-central1", cluster="r1",
                    machine_type="n2-standard-2", num_nodes=1, use_spot=False,
                    source_image="x", ssh_user="root", public_key="k", network="default",
                    token="tok-r1")
    op = cloud.clients.instances().insert_unary(request=insert_request(plan, 0))
    assert op.status.name == "DONE"  # the first call's operation, not a new insert
    assert len(gcp_env.live()) == 1
    cloud.terminate("r1")


def test_project_wide_gpu_quota_and_auth_and_check(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env, anonymous=False)  # ADC file + CLOUDSDK endpoint override
    status = cloud.check()
    assert status.enabled and status.reason == (
        f"project {PROJECT}, account launcher@{PROJECT}.iam.gserviceaccount.com")
    gcp_env.quota["us-central1"] = "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."
    with pytest.raises(CloudQuotaError) as err:
        cloud.provision(req("q1"))
    assert isinstance(err.value, QuotaError) and isinstance(err.value, AuthError)
    assert gcp_env.leaks()["instances"] == []


# ---- error mapping: every class, from the HTTP error and from inside the operation ----

CASES = [
    (Fault(503, "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources",
           in_operation=True), CapacityError),
    (Fault(503, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "no a2 now", in_operation=True),
     CapacityError),
    (Fault(400, "UNSUPPORTED_OPERATION", "type not supported in zone", in_operation=True),
     CapacityError),
    (Fault(503, "insufficientCapacity", "no capacity"), CapacityError),
    (Fault(403, "QUOTA_EXCEEDED", "Quota 'CPUS' exceeded. Limit: 8.0 in region us-central1.",
           in_operation=True), QuotaError),
    (Fault(403, "quotaExceeded", "Quota 'NVIDIA_A100_GPUS' exceeded."), QuotaError),
    (Fault(403, "QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.",
           in_operation=True), CloudQuotaError),
    (Fault(401, "authError", "Request had invalid authentication credentials."), AuthError),
    (Fault(403, "forbidden", "Required 'compute.instances.create' permission"), AuthError),
    (Fault(400, "invalid", "Invalid value for field 'resource.disks[0]'"), InvalidRequestError),
    (Fault(400, "badRequest", "bad request"), InvalidRequestError),
    (Fault(500, "backendError", "internal"), CloudError),
]


@pytest.mark.parametrize("fault,cls", CASES, ids=[f"{c[0].reason}-{'op' if c[0].in_operation else 'http'}"
                                                  for c in CASES])
def test_insert_errors_are_typed_and_nothing_is_left(gcp_env: GCPFake, fault: Fault,
                                                     cls: type) -> None:
    cloud = make_cloud(gcp_env)
    cloud.provision(req("warm", n=1))  # firewall rules and image resolved: first call = insert
    cloud.terminate("warm")
    gcp_env.fail_call(3, fault)  # machineType, image, insert(rank 0), insert(rank 1) <- here
    with pytest.raises(CloudError) as err:
        cloud.provision(req("e1"))
    assert type(err.value) is cls, err.value
    assert err.value.cloud == "gcp"
    # a 401 makes google-auth try to refresh the credentials first (anonymous ones
    # cannot be refreshed): still an AuthError, with that reason
    assert fault.reason in str(err.value) or fault.http == 401
    assert gcp_env.leaks() == {"instances": [], "policies": [], "firewalls": []}


def test_a_type_the_zone_does_not_offer_is_capacity(gcp_env: GCPFake) -> None:
    gcp_env.unoffered.add(("us-central1-a", "n2-standard-2"))
    with pytest.raises(CapacityError, match="not offered in us-central1-a"):
        make_cloud(gcp_env).provision(req("u1"))


# ---- through provision_with_failover ----------------------------------------------------


@dataclass
class FakeTask:
    name: str | None = "t"
    num_nodes: int = 2
    config: Any = None


@dataclass
class Plan:
    placements: list[Placement]
    enabled: list[bool]


def _placement(cloud: str, region: str, zone: str | None) -> Placement:
    offer = Offer(cloud=cloud, region=region, zone=zone, instance_type="n2-standard-2",
                  accelerator=None, accelerator_count=0, accelerator_memory_gib=None, vcpus=2,
                  memory_gib=8, price=0.1, spot_price=None, fabric=None, fabric_gbps=None,
                  nvlink=None, max_nodes=None, arch="x86_64", source="test",
                  fetched_at="2026-01-01")
    return Placement(cloud=cloud, region=region, zone=zone, instance_type="n2-standard-2",
                     accelerator=None, accelerator_count=0, num_nodes=2, use_spot=False,
                     node_price=0.1, hourly_cost=0.2, total_cost=None, fabric=None,
                     fabric_gbps=None, offer=offer,
                     candidate=ResourceCandidate(accelerator=None, accelerator_count=0))


def plan_over(placements: list[Placement]) -> Any:
    def plan(task: object, blocked: Blocked) -> Plan:
        out = [p for p in placements if p.cloud not in blocked.clouds
               and (p.cloud, p.region) not in blocked.regions
               and (p.cloud, p.region, p.zone or "") not in blocked.zones]
        if not out:
            raise NoPlacementError("nothing left")
        return Plan(out, [True] * len(out))
    return plan


class OtherCloud:
    name = "ssh"

    def check(self) -> CredentialStatus:
        return CredentialStatus(True)

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        return ClusterInfo(req.cluster_name, "ssh", req.region, None, req.instance_type, False,
                           (NodeInfo(0, "h0", "10.0.0.1"), NodeInfo(1, "h1", "10.0.0.2")))

    def query(self, cluster: str) -> dict[str, NodeState]:
        return {}

    def terminate(self, cluster: str) -> None:
        return None


def _run(fake: GCPFake, name: str, placements: list[Placement], **clouds: Any) -> Any:
    gcp = make_cloud(fake)
    with StateDB() as db:
        return provision_with_failover(FakeTask(), name, db,  # type: ignore[arg-type]
                                       plan_fn=plan_over(placements),
                                       cloud_fn={"gcp": gcp, **clouds}.__getitem__)


def test_failover_zone_exhaustion_twice_then_the_third_zone(gcp_env: GCPFake) -> None:
    gcp_env.exhaust("us-central1-a")
    gcp_env.exhaust("us-central1-b", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    got = _run(gcp_env, "zx", [_placement("gcp", "us-central1", z)
                               for z in ("us-central1-a", "us-central1-b", "us-central1-c")])
    assert [(a.zone, a.error_type) for a in got.attempts] == [
        ("us-central1-a", "CapacityError"), ("us-central1-b", "CapacityError")]
    assert got.cluster.zone == "us-central1-c"
    assert {i["zone"].rsplit("/", 1)[-1] for i in gcp_env.live()} == {"us-central1-c"}


def test_failover_region_quota_then_the_next_region(gcp_env: GCPFake) -> None:
    gcp_env.quota["us-central1"] = "Quota 'CPUS' exceeded. Limit: 0.0 in region us-central1."
    got = _run(gcp_env, "qx", [_placement("gcp", "us-central1", "us-central1-a"),
                               _placement("gcp", "us-central1", "us-central1-b"),
                               _placement("gcp", "us-east1", "us-east1-b")])
    assert [(a.region, a.error_type) for a in got.attempts] == [("us-central1", "QuotaError")]
    assert got.cluster.region == "us-east1" and len(gcp_env.live()) == 2


def test_failover_gpus_all_regions_blocks_the_cloud(gcp_env: GCPFake) -> None:
    gcp_env.quota["us-central1"] = "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally."
    got = _run(gcp_env, "gx", [_placement("gcp", "us-central1", "us-central1-a"),
                               _placement("gcp", "us-east1", "us-east1-b"),
                               _placement("ssh", "lab", None)], ssh=OtherCloud())
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("gcp", "CloudQuotaError")]
    assert got.cluster.cloud == "ssh" and gcp_env.live() == []


def test_failover_invalid_request_stops_at_once(gcp_env: GCPFake) -> None:
    gcp_env.fail_call(3, Fault(400, "invalid", "Invalid value for field 'resource.name'"))
    with pytest.raises(ProvisionFailedError) as err:
        _run(gcp_env, "ix", [_placement("gcp", "us-central1", "us-central1-a"),
                             _placement("gcp", "us-east1", "us-east1-b")])
    assert [a.error_type for a in err.value.attempts] == ["InvalidRequestError"]
    assert gcp_env.live() == []


def test_task_config_gcp_keys_are_laid_over_the_config(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    info = cloud.provision(req("tc", n=1, settings={"gcp": {"use_internal_ips": False,
                                                            "vpc_name": "other-vpc"}}))
    nic = gcp_env.state.instances[("us-central1-a", "tc-0")]["networkInterfaces"][0]
    assert nic["network"] == f"projects/{PROJECT}/global/networks/other-vpc"
    assert nic["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"
    assert info.nodes[0].external_ip == nic["accessConfigs"][0]["natIP"]
    assert "launcher-other-vpc-ssh" in gcp_env.state.firewalls
    cloud.terminate("tc")


def test_autostop_action_powers_the_nodes_off_and_refuses_spot_stop() -> None:
    nodes = (NodeInfo(0, "a-0", "10.0.0.2", ssh_user="root"),
             NodeInfo(1, "a-1", "10.0.0.3", ssh_user="root"))
    info = ClusterInfo("a", "gcp", "us-central1", "us-central1-a", "n2-standard-2", False, nodes)
    cloud = GCPCloud(settings=SETTINGS)
    action = cloud.autostop_action(info, down=False)
    assert "root@10.0.0.3" in action and action.endswith("sudo shutdown -h now")
    assert cloud.autostop_action(info, down=True) == ""
    import dataclasses

    with pytest.raises(InvalidRequestError):
        cloud.autostop_action(dataclasses.replace(info, use_spot=True), down=False)


def test_orphans_are_found_and_removed_without_a_record(gcp_env: GCPFake) -> None:
    """A gang the state DB does not know (a client killed after the inserts), with its
    zone record lost too: listed as an orphan, removed by label through aggregatedList."""
    from launcher.clouds.gcp import records
    from launcher.provisioning.orphans import find_orphans
    from launcher.provisioning.teardown import terminate_orphan

    cloud = make_cloud(gcp_env)
    cloud.provision(req("lost", n=2, instance_type="a2-highgpu-8g", accelerator="A100",
                        accelerator_count=8))
    assert gcp_env.leaks()["policies"] == ["launcher-lost"]
    records.drop_cluster("lost")
    scan = find_orphans(["gcp"], cloud_fn={"gcp": cloud}.__getitem__)
    assert [(o.cloud, o.cluster, o.node_ids) for o in scan.orphans] == [
        ("gcp", "lost", ("lost-0", "lost-1"))], scan
    terminate_orphan("gcp", "lost", cloud_fn={"gcp": cloud}.__getitem__)
    assert gcp_env.leaks() == {"instances": [], "policies": [], "firewalls": []}


def test_check_says_why_when_the_token_endpoint_is_unreachable(
        gcp_env: GCPFake, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import os
    import time
    from pathlib import Path

    info = json.loads(Path(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).read_text())
    info["token_uri"] = "http://127.0.0.1:9/token"  # nothing listens there
    bad = tmp_path / "bad-adc.json"
    bad.write_text(json.dumps(info))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bad))
    t0 = time.monotonic()
    status = GCPCloud(settings=SETTINGS).check()
    assert not status.enabled and "unusable" in status.reason and str(bad) in status.reason
    assert time.monotonic() - t0 < 10


def test_check_without_credentials_or_project(tmp_path: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    status = GCPCloud(settings=GCPSettings()).check()
    assert not status.enabled and status.reason.startswith("no GCP credentials")
    (tmp_path / "application_default_credentials.json").write_text('{"type": "authorized_user"}')
    status = GCPCloud(settings=GCPSettings()).check()
    assert not status.enabled and "no project" in status.reason
    (tmp_path / "configurations").mkdir()
    (tmp_path / "configurations" / "config_default").write_text(
        "[core]\nproject = from-gcloud\naccount = alice@example.com\n")
    from launcher.clouds.gcp.session import local_credentials

    local = local_credentials(GCPSettings())
    assert (local.project, local.account) == ("from-gcloud", "alice@example.com")
