"""Gangs through Kueue (`kubernetes.kueue.local_queue_name`): the pods carry Kueue's
plain-pod group labels and are created gated; the fake's minimal Kueue
(tests/k8s_kueue.py) admits the whole group at once or not at all; a gang not admitted
within `provision_timeout` is deleted and the launch fails over."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher.clouds.base import CapacityError
from launcher.errors import ConfigError
from tests.cloud_e2e import NETNS_ONLY, down_all, workdir_task
from tests.k8s.conftest import K8sEnv
from tests.k8s.test_k8s_provision import _cloud, _req

GATE = "kueue.x-k8s.io/admission"


def _kueue(env: K8sEnv, queue: str = "team-q", timeout: float | None = None) -> None:
    ctx: dict[str, object] = {"kueue": {"local_queue_name": queue}}
    if timeout is not None:
        ctx["provision_timeout"] = timeout
    env.config(contexts={"ctx-a": ctx})
    env.fakes["ctx-a"].store.kueue_queues = {queue}


def _pod_history(env: K8sEnv) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    return [(typ, o) for _, typ, res, o in env.fakes["ctx-a"].store.history if res == "pods"]


def test_an_admitted_gang_is_gated_labelled_and_runs(k8s: K8sEnv) -> None:
    _kueue(k8s)
    cloud = _cloud()
    info = cloud.provision(_req(idempotency_token="tok-1"))
    assert len(info.nodes) == 2
    pods = k8s.fakes["ctx-a"].store.items("pods")
    groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods}
    assert len(groups) == 1 and next(iter(groups)).startswith("kc-")
    for p in pods:
        assert p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-q"
        assert p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"
        assert not p["spec"].get("schedulingGates") and p["status"]["phase"] == "Running"
    history = _pod_history(k8s)
    created = [o for typ, o in history if typ == "ADDED"]
    assert len(created) == 2 and all(o["spec"]["schedulingGates"] == [{"name": GATE}] for o in created)
    assert all(c["reason"] == "SchedulingGated" for o in created for c in o["status"]["conditions"])
    # all at once: no pod was bound before the whole group existed
    last_added = max(i for i, (typ, _) in enumerate(history) if typ == "ADDED")
    first_bound = min(i for i, (_, o) in enumerate(history) if o["spec"].get("nodeName"))
    assert first_bound > last_added
    cloud.terminate("kc")
    assert k8s.leftovers() == []


def test_the_pod_group_is_one_per_attempt() -> None:
    from launcher.clouds.kubernetes.manifests import pod_group

    assert pod_group("kc", "t1") == pod_group("kc", "t1") != pod_group("kc", "t2")
    assert len(pod_group("c" * 80, "t")) <= 63


def test_withheld_admission_deletes_the_gang_and_is_a_capacity_error(k8s: K8sEnv) -> None:
    _kueue(k8s, timeout=1.5)
    k8s.fakes["ctx-a"].store.kueue_withhold = True
    t0 = time.monotonic()
    with pytest.raises(CapacityError, match="Kueue did not admit the gang .2 of 2 pod.s. still "
                                            "gated, LocalQueue 'team-q'. within 1.5s"):
        _cloud().provision(_req())
    assert time.monotonic() - t0 < 10
    assert not any(o["spec"].get("nodeName") for _, o in _pod_history(k8s))
    assert k8s.leftovers() == []


def test_a_group_that_does_not_fit_at_once_is_not_half_admitted(k8s: K8sEnv) -> None:
    """Without Kueue one pod of two would be bound while the other waits; through Kueue
    neither is, until the whole gang fits."""
    _kueue(k8s, timeout=1.5)
    store = k8s.fakes["ctx-a"].store
    for i in (0, 1):  # two of the three GPU nodes are someone else's
        store.create("pods", "default", {"metadata": {"name": f"other-{i}"}, "spec": {
            "nodeName": f"a-gpu-{i}", "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    with pytest.raises(CapacityError, match="Kueue did not admit"):
        _cloud().provision(_req())
    assert not any(o["spec"].get("nodeName") for _, o in _pod_history(k8s)
                   if o["metadata"]["name"].startswith("kc-"))
    assert any(e["reason"] == "Pending" and "does not fit at once" in e["message"]
               for e in store.items("events"))
    assert k8s.leftovers() == []


def test_an_unknown_local_queue_is_never_admitted(k8s: K8sEnv) -> None:
    _kueue(k8s, timeout=1)
    k8s.fakes["ctx-a"].store.kueue_queues = set()
    with pytest.raises(CapacityError, match="Kueue did not admit"):
        _cloud().provision(_req(n=1))
    assert any("LocalQueue team-q doesn't exist" in e["message"]
               for e in k8s.fakes["ctx-a"].store.items("events"))
    assert k8s.leftovers() == []


def test_kueue_config_is_checked(k8s: K8sEnv) -> None:
    from launcher.config.kubernetes import parse_kubernetes

    s = parse_kubernetes({"kueue": {"local_queue_name": "q1"},
                          "contexts": {"a": {"kueue": None}, "b": {"kueue": {"local_queue_name": "q2"}}}},
                         "config.yaml")
    assert (s.for_context("a").kueue_queue, s.for_context("b").kueue_queue,
            s.for_context("c").kueue_queue) == (None, "q2", "q1")
    for bad, field in (({"kueue": "q"}, "kubernetes.kueue"),
                       ({"kueue": {"local_queue_name": "Team_Q"}}, "kubernetes.kueue.local_queue_name"),
                       ({"contexts": {"a": {"kueue": {"queue": "q"}}}}, "kubernetes.contexts.a.kueue")):
        with pytest.raises(ConfigError, match=f"field '{field}'"):
            parse_kubernetes(bad, "config.yaml")


@NETNS_ONLY[1]
@NETNS_ONLY[0]
def test_withheld_admission_fails_over_to_the_next_context(k8s_bodies: K8sEnv, tmp_path: Path) -> None:
    from launcher.api.launch import launch

    env = k8s_bodies
    _kueue(env, timeout=2)
    env.fakes["ctx-a"].store.kueue_withhold = True
    task = workdir_task(tmp_path, {"any_of": [{"infra": "k8s/ctx-a", "accelerators": "H100:8"},
                                              {"infra": "k8s/ctx-b", "accelerators": "H100:8"}]},
                        "echo on $(hostname)", num_nodes=2)
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "kq", on_line=lines.append)
        took = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.region == "ctx-b", lines
        assert took < 60, took
        tried = [o for typ, o in _pod_history(env) if typ == "ADDED"]  # ctx-a: gated, never bound
        assert len(tried) == 2 and all(o["spec"]["schedulingGates"] for o in tried)
        assert not any(o["spec"].get("nodeName") for _, o in _pod_history(env))
        assert not [p for p in env.fakes["ctx-a"].store.items("pods")
                    if p["metadata"]["name"].startswith("kq")]
    finally:
        down_all()
    assert env.leftovers() == []



def test_an_admitted_gang_not_running_in_time_is_deleted_too(k8s: K8sEnv) -> None:
    """waitForPodsReady-like: admission is not enough, the gang must run within
    provision_timeout."""
    _kueue(k8s, timeout=1.5)
    store = k8s.fakes["ctx-a"].store
    store.start_delay = 30  # admitted and bound, the containers never start in time
    with pytest.raises(CapacityError, match="within 1.5s|after 1.5s"):
        _cloud().provision(_req())
    assert any(e["reason"] == "Admitted" for e in store.items("events"))
    assert k8s.leftovers() == []
