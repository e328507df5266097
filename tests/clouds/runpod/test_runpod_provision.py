"""RunPodCloud against the GraphQL fake (tests/runpod_fake.py), with an injected node
waiter (no SSH): provision/query/terminate, spot bids, records, orphans, check, config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    ClusterInfo,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.runpod import records
from launcher.clouds.runpod.cloud import RunPodCloud, Timeouts
from tests.runpod_fake import KEY, RunPodFake

FAST = Timeouts(start=5, ssh=5, teardown=5, poll=0.01)


def _cloud(waiter: Any = None) -> RunPodCloud:
    return RunPodCloud(node_waiter=waiter or (lambda info, deadline: info), timeouts=FAST)


def req(cluster: str = "c1", **kw: Any) -> ProvisionRequest:
    base: dict[str, Any] = dict(cluster_name=cluster, cloud="runpod", region="US",
                                zone="US-KS-2", instance_type="2x_H100-SXM_SECURE",
                                num_nodes=1, use_spot=False, accelerator="H100-SXM",
                                accelerator_count=2, ssh_public_key="ssh-ed25519 AAAAtest k")
    base.update(kw)
    return ProvisionRequest(**base)


def test_provision_query_terminate(runpod_fake: RunPodFake) -> None:
    cloud = _cloud()
    info = cloud.provision(req())
    assert isinstance(info, ClusterInfo) and len(info.nodes) == 1
    (pod_id,) = runpod_fake.inventory()
    pod = runpod_fake.pods[pod_id]
    node = info.head
    assert node.node_id == pod_id and node.external_ip == pod["_ip"]
    assert node.ssh_port == pod["_port"] != 22 and node.ssh_user == "root"
    inp = pod["_input"]
    assert pod["_op"] == "podFindAndDeployOnDemand"
    assert inp["gpuTypeId"] == "NVIDIA H100 80GB HBM3" and inp["gpuCount"] == 2
    assert inp["cloudType"] == "SECURE" and inp["dataCenterId"] == "US-KS-2"
    assert inp["ports"] == "22/tcp" and pod["_env"]["PUBLIC_KEY"] == "ssh-ed25519 AAAAtest k"
    assert pod["name"] == "launcher-c1-0"
    assert (records.read("c1") or {})["pods"] == {"launcher-c1-0": pod_id}
    assert cloud.query("c1") == {pod_id: NodeState.RUNNING}
    assert cloud.list_tagged_clusters() == {"c1": [pod_id]}
    cloud.terminate("c1")
    assert runpod_fake.inventory() == [] and records.read("c1") is None
    cloud.terminate("c1")  # idempotent
    assert cloud.query("c1") == {}


def test_spot_pod_bids_and_interruption_is_preemption(runpod_fake: RunPodFake) -> None:
    cloud = _cloud()
    info = cloud.provision(req(use_spot=True, instance_type="1x_A100-80GB_COMMUNITY"))
    pod = runpod_fake.pods[info.head.node_id]
    assert pod["_op"] == "podRentInterruptable"
    assert pod["_input"]["bidPerGpu"] == pytest.approx(0.695)
    assert pod["_input"]["cloudType"] == "COMMUNITY"
    runpod_fake.interrupt(info.head.node_id)
    assert cloud.query("c1") == {info.head.node_id: NodeState.PREEMPTED}
    cloud.terminate("c1")
    assert runpod_fake.inventory() == []


def test_on_demand_exited_is_stopped_and_gone_is_terminated(runpod_fake: RunPodFake) -> None:
    cloud = _cloud()
    pod_id = cloud.provision(req()).head.node_id
    runpod_fake.pods[pod_id].update(desiredStatus="EXITED", runtime=None)
    assert cloud.query("c1") == {pod_id: NodeState.STOPPED}
    del runpod_fake.pods[pod_id]
    assert cloud.query("c1") == {pod_id: NodeState.TERMINATED}
    cloud.terminate("c1")


def test_no_spot_bid_is_capacity(runpod_fake: RunPodFake) -> None:
    runpod_fake.spot_available = False
    with pytest.raises(CapacityError):
        _cloud().provision(req(use_spot=True))
    assert runpod_fake.inventory() == []


def test_multi_node_is_refused_with_a_reason(runpod_fake: RunPodFake) -> None:
    with pytest.raises(InvalidRequestError, match="Instant Clusters"):
        _cloud().provision(req(num_nodes=2))
    assert runpod_fake.calls == []


def test_bad_instance_type_is_invalid(runpod_fake: RunPodFake) -> None:
    with pytest.raises(InvalidRequestError):
        _cloud().provision(req(instance_type="p5.48xlarge"))


def test_waiter_failure_terminates_the_pod(runpod_fake: RunPodFake) -> None:
    def broken(info: ClusterInfo, deadline: float) -> ClusterInfo:
        raise TimeoutError("ssh never came up")

    with pytest.raises(TimeoutError):
        _cloud(broken).provision(req())
    assert runpod_fake.inventory() == [] and records.read("c1") is None


def test_pod_recorded_by_name_is_found_without_its_id(runpod_fake: RunPodFake) -> None:
    """A client killed after the deploy but before recording the id: `down` finds the pod
    by its name."""
    cloud = _cloud()
    pod_id = cloud.provision(req()).head.node_id
    records.add_pod("c1", "launcher-c1-0", "")  # as written before the deploy
    with records.update("c1") as data:
        data["pods"] = {"launcher-c1-0": ""}
    assert cloud.query("c1") == {pod_id: NodeState.RUNNING}
    cloud.terminate("c1")
    assert runpod_fake.inventory() == []


def test_check(runpod_fake: RunPodFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    status = RunPodCloud().check()
    assert status.enabled and "tester@example.com" in status.reason
    monkeypatch.setenv("RUNPOD_API_KEY", "wrong")
    bad = RunPodCloud().check()
    assert not bad.enabled and "Unauthorized" in bad.reason
    with pytest.raises(AuthError):
        _cloud().provision(req())


def test_check_without_key_touches_no_network(runpod_fake: RunPodFake, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    status = RunPodCloud().check()
    assert not status.enabled and "RUNPOD_API_KEY" in status.reason
    assert runpod_fake.calls == []
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text(f'[default]\napi_key = "{KEY}"\n')
    assert RunPodCloud().check().enabled


def test_rate_limit_is_retried(runpod_fake: RunPodFake, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.clouds.runpod import api

    monkeypatch.setattr(api, "BACKOFF_S", 0.01)
    runpod_fake.rate_limit("podFindAndDeployOnDemand", times=2)
    runpod_fake.rate_limit("pod", times=2)
    info = _cloud().provision(req())
    assert runpod_fake.calls.count("podFindAndDeployOnDemand") == 3
    assert json.dumps(info.head.node_id)
    _cloud().terminate("c1")
