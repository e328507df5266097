"""NebiusCloud against the in-process gRPC fake (tests/nebius_fake.py), node waiter
injected: what provision creates (GPU cluster on the region's fabric for an InfiniBand
gang, boot disks, instances with the cloud-init key, preemptible spec for spot), what
query reports (a stopped preemptible instance is PREEMPTED), terminate (everything gone,
idempotent, also with no record), orphans by label, check without credentials."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any

import pytest

from launcher.clouds.base import ClusterInfo, InvalidRequestError, NodeState, ProvisionRequest
from launcher.clouds.nebius import records
from launcher.clouds.nebius.cloud import NebiusCloud, Timeouts
from tests.nebius_fake import FABRIC, PROJECT, SUBNET_ID, NebiusFake

IB = "gpu-h100-sxm_8gpu-128vcpu-1600gb"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeHostKeyForTestsOnly"
FAST = Timeouts(poll=0.02, create=20, teardown=20)


class FakeWaiter:
    def __init__(self) -> None:
        self.calls: list[ClusterInfo] = []

    def __call__(self, info: ClusterInfo, deadline: float) -> ClusterInfo:
        self.calls.append(info)
        return dataclasses.replace(info, nodes=tuple(
            dataclasses.replace(n, ssh_host_key=HOST_KEY) for n in info.nodes))


def req(name: str = "c1", **kw: Any) -> ProvisionRequest:
    base: dict[str, Any] = dict(cluster_name=name, cloud="nebius", region="eu-north1",
                                zone=None, instance_type=IB, num_nodes=2, use_spot=False,
                                accelerator="H100", accelerator_count=8, fabric="infiniband",
                                ssh_public_key="ssh-ed25519 AAAAtestkey user@test")
    base.update(kw)
    return ProvisionRequest(**base)


@pytest.fixture
def cloud(nebius_fake: NebiusFake) -> NebiusCloud:
    return NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)


def test_infiniband_gang_gets_a_gpu_cluster_and_everything_is_deleted(
        nebius_fake: NebiusFake, cloud: NebiusCloud) -> None:
    info = cloud.provision(req(use_spot=True))
    fake = nebius_fake
    (gc,) = fake.gpu_clusters.values()
    assert gc.spec.infiniband_fabric == FABRIC and gc.metadata.parent_id == PROJECT
    insts = sorted(fake.instances.values(), key=lambda i: i.metadata.name)
    assert [i.metadata.name for i in insts] == ["c1-0", "c1-1"]
    for rank, inst in enumerate(insts):
        spec = inst.spec
        assert (spec.resources.platform, spec.resources.preset) == (
            "gpu-h100-sxm", "8gpu-128vcpu-1600gb")
        assert spec.gpu_cluster.id == gc.metadata.id
        assert spec.preemptible.on_preemption.name == "STOP"
        assert spec.network_interfaces[0].subnet_id == SUBNET_ID
        assert spec.network_interfaces[0].check_presence("public_ip_address")
        assert NebiusFake.ssh_key(inst) == "ssh-ed25519 AAAAtestkey user@test"
        assert dict(inst.metadata.labels) == {"launcher-cluster": "c1",
                                              "launcher-rank": str(rank)}
        disk: Any = fake.disks[NebiusFake.boot_disk(inst)]
        assert disk.spec.source_image_family.image_family == "ubuntu22.04-cuda12"
        assert disk.spec.size_gibibytes == 200
    assert [n.internal_ip for n in info.nodes] == [NebiusFake.private_ip(i) for i in insts]
    assert all(n.external_ip and n.external_ip.startswith("192.0.2.") for n in info.nodes)
    assert all(n.ssh_user == "ubuntu" and n.ssh_host_key == HOST_KEY for n in info.nodes)
    assert fake.tokens == {"Bearer fake-iam-token"}

    assert cloud.query("c1") == {n.node_id: NodeState.RUNNING for n in info.nodes}
    fake.preempt(info.nodes[1].node_id)
    assert cloud.query("c1")[info.nodes[1].node_id] == NodeState.PREEMPTED
    assert cloud.list_tagged_clusters() == {"c1": sorted(n.node_id for n in info.nodes)}
    kinds = [r.kind for r in cloud.list_tagged_resources()["c1"]]
    assert kinds.count("instance") == len(info.nodes) and "disk" in kinds  # every kind

    cloud.terminate("c1")
    assert fake.inventory() == []
    assert records.read("c1") is None
    cloud.terminate("c1")  # idempotent
    assert cloud.query("c1") == {}


def test_single_node_on_demand_internal_ips_no_gpu_cluster(
        nebius_fake: NebiusFake, launcher_home: Any) -> None:
    from tests.nebius_fake import write_config

    write_config(launcher_home, nebius_fake.endpoint, use_internal_ips=True, ssh_user="root",
                 disk_size_gb=100)
    cloud = NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)
    info = cloud.provision(req(num_nodes=1, instance_type="cpu-d3_4vcpu-16gb",
                               accelerator=None, accelerator_count=0, fabric=None))
    (inst,) = nebius_fake.instances.values()
    assert not nebius_fake.gpu_clusters and not inst.spec.check_presence("gpu_cluster")
    assert not inst.spec.check_presence("preemptible")
    assert not inst.spec.network_interfaces[0].check_presence("public_ip_address")
    disk: Any = nebius_fake.disks[NebiusFake.boot_disk(inst)]
    assert disk.spec.source_image_family.image_family == "ubuntu22.04-driverless"
    assert info.head.external_ip is None and info.head.ssh_user == "root"
    assert cloud.query("c1") == {info.head.node_id: NodeState.RUNNING}
    nebius_fake.instances[info.head.node_id].status.state = \
        type(inst.status.state).STOPPED
    assert cloud.query("c1") == {info.head.node_id: NodeState.STOPPED}  # on-demand
    cloud.terminate("c1")
    assert nebius_fake.inventory() == []


def test_no_fabric_for_the_region_is_refused_before_any_call(
        nebius_fake: NebiusFake, cloud: NebiusCloud) -> None:
    with pytest.raises(InvalidRequestError, match=r"nebius\.fabrics\.us-central1"):
        cloud.provision(req(region="us-central1"))
    assert nebius_fake.calls == [] and nebius_fake.inventory() == []


def test_bad_instance_type_is_an_invalid_request(nebius_fake: NebiusFake,
                                                 cloud: NebiusCloud) -> None:
    with pytest.raises(InvalidRequestError, match="platform"):
        cloud.provision(req(instance_type="h100x8"))


def test_terminate_without_ids_finds_everything_by_label(nebius_fake: NebiusFake,
                                                         cloud: NebiusCloud) -> None:
    """A client killed after the creates, before the ids were recorded: the record has
    only the project; `down` finds instances, disks and the GPU cluster by label."""
    cloud.provision(req())
    data = records.read("c1")
    assert data is not None
    data.pop("instance_ids")
    records.write("c1", data)
    records.drop("c1")  # and even with no record at all (configured project)
    cloud.terminate("c1")
    assert nebius_fake.inventory() == []


def test_record_is_written_before_the_first_create(nebius_fake: NebiusFake,
                                                   cloud: NebiusCloud) -> None:
    seen: list[Any] = []
    orig = nebius_fake._create_gpu_cluster

    def spy(r: Any) -> Any:
        seen.append(records.read("c1"))
        return orig(r)

    nebius_fake._create_gpu_cluster = spy  # type: ignore[method-assign,assignment]
    nebius_fake.close()
    nebius_fake.start()  # handlers bound again with the spy
    from tests.nebius_fake import write_config

    write_config(cloud_home(), nebius_fake.endpoint)
    NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST).provision(req())
    assert seen and seen[0]["project"] == PROJECT and seen[0]["region"] == "eu-north1"
    NebiusCloud(timeouts=FAST).terminate("c1")
    assert nebius_fake.inventory() == []


def cloud_home() -> Any:
    from launcher.config.settings import launcher_home

    return launcher_home()


def test_check_without_credentials_imports_no_sdk(tmp_path: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEBIUS_")}
    env["HOME"] = str(tmp_path)
    code = ("import sys; from launcher.clouds.nebius.cloud import NebiusCloud; "
            "s = NebiusCloud().check(); "
            "print(s.enabled, s.reason); "
            "print(any(m == 'nebius' or m.startswith(('nebius.', 'grpc')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=30, check=True).stdout.splitlines()
    assert out[0].startswith("False no Nebius credentials"), out
    assert out[1] == "False", out


def test_check_with_token_lists_the_project(nebius_fake: NebiusFake,
                                            cloud: NebiusCloud) -> None:
    status = cloud.check()
    assert status.enabled and PROJECT in status.reason and "NEBIUS_IAM_TOKEN" in status.reason
    nebius_fake.faults["InstanceService.List"] = ["auth"]
    status = NebiusCloud(timeouts=FAST).check()
    assert not status.enabled and "PERMISSION_DENIED" in status.reason


def test_projects_per_region(nebius_fake: NebiusFake, launcher_home: Any) -> None:
    """Nebius projects are regional: with `nebius.projects`, each region's resources go
    to its project, and a region without one is a QuotaError (failover blocks it)."""
    from launcher.clouds.base import QuotaError
    from tests.nebius_fake import write_config

    write_config(launcher_home, nebius_fake.endpoint,
                 projects={"eu-north1": "project-e00north", "us-central1": "project-e01us"})
    cloud = NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)
    cloud.provision(req(num_nodes=1))
    assert {i.metadata.parent_id for i in nebius_fake.instances.values()} == {"project-e00north"}
    assert cloud.list_tagged_clusters().keys() == {"c1"}
    with pytest.raises(QuotaError, match="eu-west1"):
        cloud.provision(req("c2", num_nodes=1, region="eu-west1"))
    cloud.terminate("c1")
    assert nebius_fake.inventory() == []
