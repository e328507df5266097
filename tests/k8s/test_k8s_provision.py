"""The `kubernetes` cloud against two API server fakes (no bodies): offers from the
nodes, check, the gang's objects, admission (refusal, rollback), query and teardown."""

from __future__ import annotations

import time

import pytest

from launcher.clouds.base import CapacityError, InvalidRequestError, NodeState, ProvisionRequest
from tests.k8s.conftest import K8sEnv
from tests.k8s_fake import wait_until

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2Wz5lsMw2TwJpNwsvdcR4gGf9ll1x3lcS3FK6T3l9k t@t"


def _req(cluster: str = "kc", region: str = "ctx-a", itype: str = "H100x8of8", n: int = 2,
         **kw: object) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=cluster, cloud="kubernetes", region=region, zone=None,
                            instance_type=itype, num_nodes=n, use_spot=False,
                            ssh_public_key=KEY, **kw)  # type: ignore[arg-type]


def _cloud():  # type: ignore[no-untyped-def]
    """The cloud with no SSH step (these pods have no bodies; test_k8s_e2e has them)."""
    from launcher.clouds.kubernetes.cloud import KubernetesCloud

    return KubernetesCloud(node_waiter=lambda info, deadline: info)


def test_offers_from_nodes(k8s: K8sEnv) -> None:
    from launcher.clouds.kubernetes.offers import kubernetes_offers

    k8s.config(pricing=2.5)
    offers = kubernetes_offers()
    full = [o for o in offers if o.instance_type == "H100x8of8"]
    assert sorted(o.region for o in full) == ["ctx-a", "ctx-b"]
    o = full[0]
    assert (o.accelerator, o.accelerator_count, o.max_nodes, o.price) == ("H100", 8.0, 3, 20.0)
    assert o.vcpus == 86 and o.fabric is None
    assert any(x.instance_type == "cpu16of16" and x.accelerator is None for x in offers)


def test_check_lists_contexts_and_pod_rights(k8s: K8sEnv) -> None:
    k8s.fakes["ctx-b"].tokens["fake-admin-token"] = ("viewer", {"get", "list", "watch"})
    status = _cloud().check()
    assert status.enabled
    assert "ctx-a (namespace default): can create pods" in status.reason
    assert "ctx-b (namespace default): cannot create pods" in status.reason


def test_gang_objects_query_and_teardown(k8s: K8sEnv) -> None:
    cloud = _cloud()
    info = cloud.provision(_req())
    fake = k8s.fakes["ctx-a"]
    pods = {p["metadata"]["name"]: p for p in fake.store.items("pods")}
    assert sorted(pods) == ["kc-0", "kc-1"]
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 2
    limits = pods["kc-0"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"
    assert [n.internal_ip for n in info.nodes] == [pods["kc-0"]["status"]["podIP"],
                                                   pods["kc-1"]["status"]["podIP"]]
    svc = fake.store.get("services", "default", "kc")
    assert svc["spec"]["clusterIP"] == "None"
    assert cloud.query("kc") == {"kc-0": NodeState.RUNNING, "kc-1": NodeState.RUNNING}
    assert cloud.list_tagged_clusters() == {"kc": ["ctx-a/default/kc-0", "ctx-a/default/kc-1"]}
    cloud.terminate("kc")
    assert k8s.leftovers() == []
    assert cloud.query("kc") == {}


def test_too_big_is_refused_fast_naming_the_largest_node(k8s: K8sEnv) -> None:
    t0 = time.monotonic()
    with pytest.raises(CapacityError) as e:
        _cloud().provision(_req(n=4))
    assert time.monotonic() - t0 < 5
    assert "largest node is a-gpu-0 (8x H100" in str(e.value)
    assert k8s.leftovers() == []


def test_unschedulable_gang_rolls_back(k8s: K8sEnv) -> None:
    k8s.config(provision_timeout=1)
    fake = k8s.fakes["ctx-a"]
    fake.store.create("pods", "default", {"metadata": {"name": "hog"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    fake.store.create("pods", "default", {"metadata": {"name": "hog2"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    t0 = time.monotonic()
    with pytest.raises(CapacityError) as e:
        _cloud().provision(_req(n=2))
    assert time.monotonic() - t0 < 10
    assert "Insufficient nvidia.com/gpu" in str(e.value) and "kc-1" in str(e.value)
    assert k8s.leftovers() == []
    reasons = [ev["reason"] for ev in fake.store.items("events")]
    assert "FailedScheduling" in reasons


def test_bad_image_is_the_users_error(k8s: K8sEnv) -> None:
    k8s.fakes["ctx-a"].store.bad_images.add("nope:1")
    with pytest.raises(InvalidRequestError) as e:
        _cloud().provision(_req(image_id="nope:1"))
    assert "ErrImagePull" in str(e.value)
    assert k8s.leftovers() == []


def test_query_tells_pod_fates_apart(k8s: K8sEnv) -> None:
    cloud = _cloud()
    cloud.provision(_req(n=3, itype="H100x4of8"))
    store = k8s.fakes["ctx-a"].store
    store.pod_failed("default", "kc-0", reason="Evicted",
                     message="The node was low on resource: memory.")
    store.pod_failed("default", "kc-1", reason="", message="", container_reason="OOMKilled")
    node2 = store.get("pods", "default", "kc-2")["spec"]["nodeName"]
    store.lose_node(node2)
    assert cloud.query("kc") == {"kc-0": NodeState.PREEMPTED, "kc-1": NodeState.TERMINATED,
                                 "kc-2": NodeState.PREEMPTED}
    why = cloud.describe("kc") or ""
    assert "kc-0: evicted" in why and "kc-1: OOMKilled" in why and "kc-2: node lost" in why
    cloud.terminate("kc")
    assert k8s.leftovers() == []


def test_preempted_pod_is_preempted_then_missing(k8s: K8sEnv) -> None:
    cloud = _cloud()
    cloud.provision(_req(n=2))
    store = k8s.fakes["ctx-a"].store
    store.preempt("default", "kc-1")
    assert cloud.query("kc")["kc-1"] is NodeState.PREEMPTED
    wait_until(lambda: not any(p["metadata"]["name"] == "kc-1" for p in store.items("pods")))
    assert cloud.query("kc") == {"kc-0": NodeState.RUNNING, "kc-1": NodeState.PREEMPTED}
    cloud.terminate("kc")
    assert k8s.leftovers() == []


def test_a_node_removed_from_the_cluster_is_a_lost_node(k8s: K8sEnv) -> None:
    cloud = _cloud()
    cloud.provision(_req(n=1))
    store = k8s.fakes["ctx-a"].store
    store.delete("nodes", "", store.get("pods", "default", "kc-0")["spec"]["nodeName"])
    assert cloud.query("kc") == {"kc-0": NodeState.PREEMPTED}
    assert "node lost" in (cloud.describe("kc") or "")
    cloud.terminate("kc")
    assert k8s.leftovers() == []
