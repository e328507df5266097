"""Faults at every API call the Kubernetes provisioner makes, and kill -9 of the
client at each step: nothing is leaked in the fake. A failed provision deletes what it
made itself; where even that fails (or the client is killed), every object carries the
cluster's label, the orphan scan lists it and `terminate` removes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.clouds.base import CloudError
from tests.k8s.conftest import K8sEnv
from tests.k8s.test_k8s_provision import _cloud, _req

# (route, skip): every call of a 2-pod provision, in order
PROVISION_CALLS = [("list nodes", 0), ("create secrets", 0), ("create services", 0),
                   ("create pods", 0), ("create pods", 1), ("list pods", 0), ("watch pods", 0)]
ROLLBACK_CALLS = ["deletecollection pods", "list services", "delete services",
                  "deletecollection secrets", "deletecollection persistentvolumeclaims"]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("route", "skip"), PROVISION_CALLS)
def test_a_fault_at_each_provision_call_leaks_nothing(k8s: K8sEnv, route: str, skip: int) -> None:
    fake = k8s.fakes["ctx-a"]
    fake.store.start_delay = 0.5  # the gang is watched, not found running at once
    fake.fail(route, 500, skip=skip)
    cloud = _cloud()
    try:
        info = cloud.provision(_req())
    except CloudError as exc:
        assert "HTTP 500" in str(exc) and "injected fault" in str(exc)
        assert route != "watch pods"  # a dropped watch is re-listed, never fatal
    else:  # the watch was retried: the gang is up
        assert route == "watch pods" and len(info.nodes) == 2
        cloud.terminate("kc")
    assert (route, 500) in fake.calls
    assert k8s.leftovers() == []


@pytest.mark.parametrize("route", ROLLBACK_CALLS)
def test_a_fault_in_the_rollback_leaves_only_labelled_objects(k8s: K8sEnv, route: str) -> None:
    fake = k8s.fakes["ctx-a"]
    fake.fail("create pods", 500, skip=1)
    fake.fail(route, 500)
    cloud = _cloud()
    with pytest.raises(CloudError):
        cloud.provision(_req())
    assert (route, 500) in fake.calls
    left = k8s.leftovers()
    assert left, "the rollback's failed call left something behind"
    assert "kc" in cloud.list_tagged_resources()
    cloud.terminate("kc")
    assert k8s.leftovers() == []


_CHILD = """
import sys
from launcher.clouds.kubernetes.cloud import KubernetesCloud
from tests.k8s.test_k8s_provision import _req
KubernetesCloud(node_waiter=lambda info, d: info).provision(_req())
"""


@pytest.mark.parametrize(("route", "skip"), [("create secrets", 0), ("create services", 0),
                                             ("create pods", 0), ("create pods", 1),
                                             ("watch pods", 0)])
def test_kill_9_at_each_step_then_down_leaks_nothing(k8s: K8sEnv, route: str, skip: int) -> None:
    fake = k8s.fakes["ctx-a"]
    fake.store.start_delay = 0.5
    fake.hold(route, skip=skip)
    child = subprocess.Popen([sys.executable, "-c", _CHILD], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert fake.arrived.wait(30), child.communicate(timeout=5)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        fake.release()
        if child.poll() is None:
            child.kill()
    cloud = _cloud()
    assert k8s.leftovers(), "the held call was carried out"
    assert "kc" in cloud.list_tagged_resources()
    cloud.terminate("kc")
    assert k8s.leftovers() == []


def test_orphans_show_in_status_refresh_and_down_orphan_removes_them(k8s: K8sEnv) -> None:
    """A client killed after its pods were made leaves a gang no cluster record owns:
    `status --refresh` names it by label, `down --orphan` removes everything."""
    from tests.cloud_e2e import cli

    fake = k8s.fakes["ctx-b"]
    fake.hold("create pods", skip=1)
    child = subprocess.Popen([sys.executable, "-c", _CHILD.replace("_req()", "_req(region='ctx-b')")],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert fake.arrived.wait(30), child.communicate(timeout=5)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        fake.release()
    out = cli("status", "--refresh")
    assert "kc" in out.stdout + out.stderr and "kubernetes" in out.stdout + out.stderr, out
    cli("down", "--orphan", "kc", "--cloud", "kubernetes")
    assert k8s.leftovers() == []


def _recorded_calls(k8s: K8sEnv, provision: Callable[[], object]) -> list[tuple[str, int]]:
    """(route, how many of that route came before) of every call a clean provision makes,
    in order; the gang is then taken down."""
    fake = k8s.fakes["ctx-a"]
    fake.calls.clear()
    provision()
    routes = [r for r, _ in fake.calls]
    _cloud().terminate("kc")
    assert k8s.leftovers() == []
    return [(r, routes[:i].count(r)) for i, r in enumerate(routes)]


def _volumes_setup(k8s: K8sEnv) -> Callable[[], object]:
    from launcher.task.volumes import VolumeMount

    k8s.fakes["ctx-a"].store.create("persistentvolumeclaims", "default", {
        "metadata": {"name": "datasets"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}}}})
    vols = (VolumeMount("/mnt/datasets", name="datasets"),
            VolumeMount("/mnt/scratch", size="5GiB"),
            VolumeMount("/mnt/ckpt", name="ckpt", size="10"))
    return lambda: _cloud().provision(_req(volumes=vols))


def _kueue_setup(k8s: K8sEnv) -> Callable[[], object]:
    k8s.config(contexts={"ctx-a": {"kueue": {"local_queue_name": "team-q"}}})
    k8s.fakes["ctx-a"].store.kueue_queues = {"team-q"}
    return lambda: _cloud().provision(_req(idempotency_token="tok-f"))


@pytest.mark.parametrize("setup", [_volumes_setup, _kueue_setup], ids=["volumes", "kueue"])
def test_a_fault_at_each_call_of_a_volume_or_kueue_provision_leaks_nothing(
        k8s: K8sEnv, setup: Callable[[K8sEnv], Callable[[], object]]) -> None:
    """Every call the provision makes (recorded from a clean run: the PVC reads and
    creates, the gated pods, the admission watch...) fails in turn: the provision fails
    or recovers, and nothing launcher made is left (the user's own PVC stays)."""
    provision = setup(k8s)
    fake = k8s.fakes["ctx-a"]
    calls = _recorded_calls(k8s, provision)
    assert len(calls) >= 6  # nodes, secret, service, 2 pods, their state (+ PVCs)
    for route, skip in calls:
        fake.calls.clear()
        fake.fail(route, 500, skip=skip)
        try:
            provision()
        except CloudError:
            pass
        else:
            _cloud().terminate("kc")
        assert (route, 500) in fake.calls, (route, skip)
        assert k8s.leftovers() == [], (route, skip)
        assert not fake.store.items("pods"), (route, skip)
    if setup is _volumes_setup:
        assert [c["metadata"]["name"] for c in fake.store.items("persistentvolumeclaims")] == [
            "datasets"]
