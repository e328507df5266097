"""What the kubernetes cloud reads from node labels and allocatable, the RDMA request
of a gang, pod_config merging, and config.yaml's `kubernetes:` section errors."""

from __future__ import annotations

import pytest

from launcher.clouds.kubernetes import labels as L
from launcher.clouds.kubernetes import manifests as M
from launcher.config.kubernetes import parse_kubernetes
from launcher.errors import ConfigError
from tests.k8s.conftest import K8sEnv
from tests.k8s.test_k8s_provision import _cloud, _req
from tests.k8s_store import make_node


@pytest.mark.parametrize(("key", "value", "name"), [
    ("skypilot.co/accelerator", "h100", "H100"),
    ("skypilot.co/accelerator", "a100-80gb", "A100-80GB"),
    ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb", "H100"),
    ("cloud.google.com/gke-accelerator", "nvidia-tesla-t4", "T4"),
    ("karpenter.k8s.aws/instance-gpu-name", "a10g", "A10G"),
    ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB", "A100-80GB"),
    ("nvidia.com/gpu.product", "NVIDIA-H200", "H200"),
    ("gpu.nvidia.com/class", "H100_NVLINK_80GB", "H100"),
    ("gpu.nvidia.com/class", "A40", "A40"),
    ("amd.com/gpu.product-name", "AMD_Instinct_MI300X_OAM", "MI300X"),
])
def test_gpu_type_from_each_label_scheme(key: str, value: str, name: str) -> None:
    assert L.gpu_type({key: value}) == (name, key)


def test_first_scheme_wins_and_counts_and_fabric() -> None:
    both = {"skypilot.co/accelerator": "l4", "nvidia.com/gpu.product": "NVIDIA-H100"}
    assert L.gpu_type(both)[0] == "L4"
    assert L.gpu_type({"kubernetes.io/arch": "amd64"}) == (None, None)
    assert L.gpu_resource({"amd.com/gpu": "8", "cpu": "64"}) == ("amd.com/gpu", 8)
    assert L.gpu_resource({"cpu": "64"}) == (None, 0)
    ib = L.fabric({}, {"rdma/ib": "1", "cpu": "8"})
    assert ib is not None and (ib.fabric, ib.resource, ib.per_node) == ("infiniband", "rdma/ib", 1)
    roce = L.fabric({"launcher.dev/fabric": "roce"}, {"nvidia.com/hostdev": "8"})
    assert roce is not None and roce.fabric == "roce"
    efa = L.fabric({}, {"vpc.amazonaws.com/efa": "32"})
    assert efa is not None and (efa.fabric, efa.per_node) == ("efa", 32)
    cw = L.fabric({"ib.coreweave.cloud/speed": "400G"}, {})
    assert cw is not None and (cw.fabric, cw.gbps, cw.resource) == ("infiniband", 400.0, None)
    assert L.fabric({}, {"cpu": "8"}) is None


def test_rdma_gang_requests_the_fabric_and_sets_nccl(k8s: K8sEnv) -> None:
    fake = k8s.fakes["ctx-b"]
    for i in range(2):
        fake.add_node(make_node(f"ib-{i}", ip=f"172.31.0.{i + 1}", cpu=128, memory_gi=2048, gpus=8,
                                labels={"nvidia.com/gpu.product": "NVIDIA-H200"},
                                extra={"rdma/ib": "1"}))
    from launcher.clouds.kubernetes.offers import kubernetes_offers

    rows = [o for o in kubernetes_offers() if o.accelerator == "H200"]
    assert {o.fabric for o in rows} == {"infiniband"}
    cloud = _cloud()
    cloud.provision(_req(region="ctx-b", itype="H200x8of8", fabric="infiniband", fabric_asked="rdma"))
    pod = fake.store.get("pods", "default", "kc-0")
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["rdma/ib"] == "1" and c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}]}]
    cloud.terminate("kc")
    cloud.provision(_req(cluster="plain", region="ctx-b", itype="H200x8of8", fabric="infiniband"))
    c = fake.store.get("pods", "default", "plain-0")["spec"]["containers"][0]
    assert "rdma/ib" not in c["resources"]["limits"]
    assert not any(e["name"].startswith("NCCL_") for e in c["env"])
    cloud.terminate("plain")
    assert k8s.leftovers() == []


def test_context_settings_reach_the_pods(k8s: K8sEnv) -> None:
    k8s.config(contexts={"ctx-a": {
        "service_account": "trainer", "priority_class": "research", "image": "acme/train:1",
        "pod_config": {"metadata": {"labels": {"team": "ml"}},
                       "spec": {"tolerations": [{"key": "x", "operator": "Exists"}],
                                "containers": [{"env": [{"name": "EXTRA", "value": "1"}]}]}}}})
    _cloud().provision(_req(n=1))
    pod = k8s.fakes["ctx-a"].store.get("pods", "default", "kc-0")
    spec = pod["spec"]
    assert (spec["serviceAccountName"], spec["priorityClassName"]) == ("trainer", "research")
    assert spec["containers"][0]["image"] == "acme/train:1"
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"][M.CLUSTER_LABEL] == "kc"
    assert {"key": "x", "operator": "Exists"} in spec["tolerations"]
    assert any(e["name"] == "EXTRA" for e in spec["containers"][0]["env"])
    _cloud().terminate("kc")


@pytest.mark.parametrize(("body", "field"), [
    ({"pricing": -1}, "kubernetes.pricing"),
    ({"allowed_contexts": 3}, "kubernetes.allowed_contexts"),
    ({"contexts": {"a": {"namespace": ""}}}, "kubernetes.contexts.a.namespace"),
    ({"contexts": {"a": {"pod_config": "x"}}}, "kubernetes.contexts.a.pod_config"),
    ({"contexts": {"a": {"nope": 1}}}, "kubernetes.contexts.a.nope"),
    ({"kueue": {}}, "kubernetes.kueue.local_queue_name"),  # known since Kueue support
])
def test_bad_config_names_the_field(body: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as e:
        parse_kubernetes(body, "config.yaml")
    assert f"field '{field}'" in str(e.value)


def test_an_allowed_context_the_kubeconfig_lacks_is_named(k8s: K8sEnv) -> None:
    k8s.config(allowed_contexts=["ctx-a", "nope"])
    status = _cloud().check()
    assert not status.enabled and "names nope" in status.reason and "ctx-a, ctx-b" in status.reason
