"""A task's `volumes:` on Kubernetes: PersistentVolumeClaims made by the launch (when
missing), mounted in every pod, deleted by teardown only when the launch made them;
and the fake's PVC semantics (validation, binding) that this relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.clouds.base import CapacityError, CloudError, InvalidRequestError
from launcher.task.volumes import VolumeMount
from tests.cloud_e2e import down_all
from tests.k8s.conftest import K8sEnv
from tests.k8s.test_k8s_provision import _cloud, _req


def _v1(env: K8sEnv, ctx: str = "ctx-a"):  # type: ignore[no-untyped-def]
    from launcher.clouds.kubernetes.api import core

    return core(ctx)


def _user_pvc(env: K8sEnv, name: str, mode: str = "ReadWriteMany") -> None:
    env.fakes["ctx-a"].store.create("persistentvolumeclaims", "default", {
        "metadata": {"name": name, "labels": {"owner": "me"}},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Ti"}}}})


# ---- the fake, through the real client ---------------------------------------------


def test_fake_rejects_what_the_api_server_rejects(k8s: K8sEnv) -> None:
    from kubernetes.client import ApiException

    v1 = _v1(k8s)
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim("default", {
            "metadata": {"name": "nosize"}, "spec": {"accessModes": ["ReadWriteOnce"]}})
    assert err.value.status == 422
    assert "spec.resources[storage]: Required value" in err.value.body
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_persistent_volume_claim("default", {
            "metadata": {"name": "nomode"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}})
    assert err.value.status == 422 and "at least 1 access mode is required" in err.value.body
    assert k8s.fakes["ctx-a"].store.items("persistentvolumeclaims") == []


def test_fake_binds_by_storage_class(k8s: K8sEnv) -> None:
    store = k8s.fakes["ctx-a"].store

    def claim(name: str, cls: str | None) -> dict:
        spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}
        store.create("persistentvolumeclaims", "default", {
            "metadata": {"name": name}, "spec": {**spec, **({"storageClassName": cls} if cls else {})}})
        return store.get("persistentvolumeclaims", "default", name)  # the binder has run

    now = claim("now", None)  # the default class, Immediate
    assert now["spec"]["storageClassName"] == "standard" and now["status"]["phase"] == "Bound"
    assert now["status"]["capacity"] == {"storage": "5Gi"}
    assert claim("later", "local-wffc")["status"]["phase"] == "Pending"
    assert claim("never", "nope")["status"]["phase"] == "Pending"
    assert any(e["reason"] == "ProvisioningFailed" and '"nope" not found' in e["message"]
               for e in store.items("events"))

    def pod(name: str, claim_name: str) -> None:
        store.create("pods", "default", {"metadata": {"name": name}, "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]}})

    pod("uses-later", "later")  # WaitForFirstConsumer: bound with its first pod
    assert store.get("pods", "default", "uses-later")["spec"].get("nodeName")
    assert store.get("persistentvolumeclaims", "default", "later")["status"]["phase"] == "Bound"
    pod("uses-never", "never")
    pod("uses-missing", "missing")
    for name, why in (("uses-never", "pod has unbound immediate PersistentVolumeClaims"),
                      ("uses-missing", 'persistentvolumeclaim "missing" not found')):
        p = store.get("pods", "default", name)
        assert not p["spec"].get("nodeName")
        cond = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["reason"] == "Unschedulable" and why in cond["message"], cond


# ---- the provisioner ---------------------------------------------------------------


VOLUMES = (
    VolumeMount("/mnt/datasets", name="datasets"),  # the user's: used, never deleted
    VolumeMount("/mnt/scratch", size="50GiB", storage_class="local-wffc", labels={"team": "v"}),
    VolumeMount("/mnt/ckpt", name="ckpt", sub_path="run-1", size="10"),  # made: missing
)


def test_volumes_become_pvcs_mounted_in_every_pod_and_teardown_deletes_only_those_made(
        k8s: K8sEnv) -> None:
    _user_pvc(k8s, "datasets")
    store = k8s.fakes["ctx-a"].store
    cloud = _cloud()
    cloud.provision(_req(volumes=VOLUMES))
    pvcs = {c["metadata"]["name"]: c for c in store.items("persistentvolumeclaims")}
    assert sorted(pvcs) == ["ckpt", "datasets", "kc-vol-1"]
    scratch, ckpt = pvcs["kc-vol-1"], pvcs["ckpt"]
    assert scratch["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert scratch["spec"]["storageClassName"] == "local-wffc"
    assert ckpt["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert ckpt["spec"]["storageClassName"] == "standard"  # the cluster's default
    for made in (scratch, ckpt):  # two pods on two nodes share it
        assert made["spec"]["accessModes"] == ["ReadWriteMany"]
        assert made["metadata"]["labels"]["launcher.dev/cluster"] == "kc"
        assert made["status"]["phase"] == "Bound"
    assert scratch["metadata"]["labels"]["team"] == "v"
    assert "launcher.dev/cluster" not in pvcs["datasets"]["metadata"]["labels"]
    pods = store.items("pods")
    assert len(pods) == 2
    for p in pods:
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                  for v in p["spec"]["volumes"] if "persistentVolumeClaim" in v}
        assert claims == {"vol-0": "datasets", "vol-1": "kc-vol-1", "vol-2": "ckpt"}
        mounts = {m["mountPath"]: m for m in p["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["/mnt/ckpt"]["subPath"] == "run-1" and mounts["/mnt/datasets"]["name"] == "vol-0"
    cloud.terminate("kc")
    assert [c["metadata"]["name"] for c in store.items("persistentvolumeclaims")] == ["datasets"]
    assert k8s.leftovers() == []


def test_a_missing_named_volume_without_size_is_refused_and_nothing_is_left(k8s: K8sEnv) -> None:
    with pytest.raises(InvalidRequestError, match="'datasets' does not exist in namespace 'default'"):
        _cloud().provision(_req(volumes=(VolumeMount("/d", name="datasets"),)))
    assert k8s.leftovers() == [] and k8s.fakes["ctx-a"].store.items("pods") == []


def test_a_read_write_once_volume_is_refused_for_pods_on_several_nodes(k8s: K8sEnv) -> None:
    _user_pvc(k8s, "solo", mode="ReadWriteOnce")
    with pytest.raises(InvalidRequestError, match="needs ReadWriteMany"):
        _cloud().provision(_req(volumes=(VolumeMount("/d", name="solo"),)))
    assert k8s.leftovers() == []
    _cloud().provision(_req(n=1, volumes=(VolumeMount("/d", name="solo"),)))  # one node: fine
    _cloud().terminate("kc")
    assert [c["metadata"]["name"] for c in k8s.fakes["ctx-a"].store.items("persistentvolumeclaims")] \
        == ["solo"]


def test_a_volume_that_never_binds_rolls_the_gang_back(k8s: K8sEnv) -> None:
    k8s.config(contexts={"ctx-a": {"provision_timeout": 1.5}})
    with pytest.raises(CapacityError, match="unbound immediate PersistentVolumeClaims"):
        _cloud().provision(_req(volumes=(VolumeMount("/s", size="1Gi", storage_class="nope"),)))
    assert k8s.leftovers() == []


def test_a_lost_create_answer_is_rolled_back_and_a_retry_adopts_its_own_pvc(k8s: K8sEnv) -> None:
    from launcher.clouds.kubernetes.volumes import pvc

    fake = k8s.fakes["ctx-a"]
    vols = (VolumeMount("/s", size="1Gi"),)
    fake.fail("create persistentvolumeclaims", 500, apply=True)  # made, the answer lost
    with pytest.raises(CloudError, match="HTTP 500"):
        _cloud().provision(_req(volumes=vols))
    assert k8s.leftovers() == []  # the rollback deleted it by label all the same
    # an earlier try of this launch made it: adopted
    fake.store.create("persistentvolumeclaims", "default", pvc("kc", 0, vols[0], 2))
    _cloud().provision(_req(volumes=vols))
    assert len(fake.store.items("persistentvolumeclaims")) == 1
    _cloud().terminate("kc")
    assert k8s.leftovers() == []
    # someone else's PVC under that name: refused, and left alone
    _user_pvc(k8s, "kc-vol-0")
    with pytest.raises(InvalidRequestError, match="'kc-vol-0' exists and is not this cluster's"):
        _cloud().provision(_req(volumes=vols))
    assert [c["metadata"]["name"] for c in fake.store.items("persistentvolumeclaims")] == ["kc-vol-0"]


# ---- the task ------------------------------------------------------------------------


def test_volumes_launch_only_where_every_alternative_is_kubernetes() -> None:
    from launcher.errors import TaskValidationError
    from launcher.task.model import Task

    vols = {"/mnt/s": {"size": "10Gi", "config": {"storage_class_name": "fast",
                                                   "access_mode": "ReadWriteMany"}}}
    task = Task.from_dict({"run": "x", "resources": {"infra": "k8s/ctx-a"}, "volumes": vols})
    task.check_values()
    assert task.volumes[0].storage_class == "fast" and task.volumes[0].access_mode == "ReadWriteMany"
    assert Task.from_dict(task.to_dict()).volumes == task.volumes
    mixed = Task.from_dict({"run": "x", "volumes": vols, "resources": {
        "any_of": [{"infra": "k8s/ctx-a"}, {"cloud": "aws"}]}})
    with pytest.raises(TaskValidationError, match="launch on Kubernetes only"):
        mixed.check_values()
    with pytest.raises(TaskValidationError, match="access_mode"):
        Task.from_dict({"run": "x", "volumes": {"/s": {"size": "1Gi", "config": {"access_mode": "RW"}}}})


@pytest.mark.netns
def test_a_launch_with_volumes_mounts_them_and_down_keeps_the_users(k8s_bodies: K8sEnv,
                                                                   tmp_path: Path) -> None:
    """The whole path: the task's volumes reach the provisioner through failover."""
    from launcher.api import clusters
    from launcher.api.launch import launch
    from launcher.task.model import Task

    env = k8s_bodies
    _user_pvc(env, "datasets")
    task = Task.from_dict({"name": "vols", "num_nodes": 2, "run": "echo rank=$LAUNCHER_NODE_RANK",
                           "resources": {"infra": "k8s/ctx-a", "cpus": "8"},
                           "volumes": {"/mnt/datasets": "datasets", "/mnt/scratch": {"size": "20Gi"}}})
    lines: list[str] = []
    try:
        result = launch(task, "kvol", on_line=lines.append)
        assert result.exit_code == 0, lines
        store = env.fakes["ctx-a"].store
        assert sorted(c["metadata"]["name"] for c in store.items("persistentvolumeclaims")) \
            == ["datasets", "kvol-vol-1"]
        for p in env.fakes["ctx-a"].live_pods():
            assert {v["persistentVolumeClaim"]["claimName"] for v in p["spec"]["volumes"]
                    if "persistentVolumeClaim" in v} == {"datasets", "kvol-vol-1"}
    finally:
        down_all()
    assert clusters.status() == [] and env.leftovers() == []
    assert [c["metadata"]["name"] for c in env.fakes["ctx-a"].store.items("persistentvolumeclaims")] \
        == ["datasets"]
