"""SkyPilot's Kubernetes tasks, planned with real placements on a fake context: the
offers come from the context's nodes (tests/k8s/conftest.py: 3 nodes of 8 x H100 and
2 CPU nodes per context), so a placement is launchable and a request no node can hold
is refused at once, naming the largest node."""

from __future__ import annotations

import textwrap
import time

import pytest

from launcher.provisioning.planning import UnsatisfiableTaskError, plan
from launcher.task.model import Task
from tests.k8s.conftest import K8sEnv


def load(text: str) -> Task:
    import yaml

    return Task.from_dict(yaml.safe_load(textwrap.dedent(text)))


def test_coreweave_label_task_plans_on_the_contexts(k8s: K8sEnv) -> None:
    p = plan(load("resources:\n  infra: k8s\n  accelerators: H100_NVLINK_80GB:8\nrun: x\n"))
    assert p.chosen is not None and all(p.enabled)
    assert {(x.region, x.instance_type) for x in p.placements} == {
        ("ctx-a", "H100x8of8"), ("ctx-b", "H100x8of8")}
    from launcher.provisioning.planning import KUBERNETES_PLAN_ONLY

    assert KUBERNETES_PLAN_ONLY not in p.notes


def test_named_context_and_gang_and_pricing(k8s: K8sEnv) -> None:
    k8s.config(contexts={"ctx-b": {"pricing": 3.0}})
    p = plan(load("""\
        num_nodes: 2
        resources:
          infra: k8s/ctx-b
          accelerators: H100:4
        run: x
        """))
    (pl,) = p.placements
    assert (pl.region, pl.instance_type, pl.num_nodes, pl.hourly_cost) == ("ctx-b", "H100x4of8", 2, 24.0)
    assert p.enabled == [True]


def test_kubernetes_beside_clouds_is_launchable(k8s: K8sEnv) -> None:
    p = plan(load("""\
        resources:
          accelerators: H100:8
          any_of:
            - cloud: aws
            - infra: kubernetes
        run: x
        """))
    k8s_rows = [i for i, x in enumerate(p.placements) if x.cloud == "kubernetes"]
    assert k8s_rows and all(p.enabled[i] for i in k8s_rows)


def test_a_request_no_node_can_hold_is_refused_fast(k8s: K8sEnv) -> None:
    t0 = time.monotonic()
    with pytest.raises(UnsatisfiableTaskError) as e:
        plan(load("resources:\n  infra: k8s/ctx-a\n  accelerators: H100:16\nrun: x\n"))
    assert time.monotonic() - t0 < 5
    assert "a-gpu-0 (8x H100" in str(e.value), str(e.value)
    with pytest.raises(UnsatisfiableTaskError) as e:
        plan(load("num_nodes: 4\nresources:\n  infra: k8s/ctx-a\n  accelerators: H100:8\nrun: x\n"))
    assert "max 3 nodes" in str(e.value) or "3 node" in str(e.value), str(e.value)


def test_gpus_shows_free_and_total_per_node_type(k8s: K8sEnv) -> None:
    from tests.cloud_e2e import cli

    store = k8s.fakes["ctx-a"].store
    store.create("pods", "default", {"metadata": {"name": "other"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}})
    out = cli("gpus", "H100", "--cloud", "kubernetes").stdout
    assert "H100x8of8" in out and "ctx-a" in out
    rows = [ln.split() for ln in out.splitlines()[out.splitlines().index(
        "Kubernetes GPU nodes (free = not requested by a running pod):") + 2:] if ln.strip()]
    assert ["ctx-a", "H100", "8", "3", "21", "24"] in rows, out
    assert ["ctx-b", "H100", "8", "3", "24", "24"] in rows, out


def test_owned_capacity_ranks_beside_the_clouds(k8s: K8sEnv) -> None:
    task = "resources:\n  accelerators: H100:8\nrun: x\n"
    p = plan(load(task))
    assert p.placements[p.chosen or 0].cloud == "kubernetes"  # price 0 beats any cloud
    assert {x.cloud for x in p.placements} > {"kubernetes"}
    k8s.config(pricing=100.0)  # $800/h a node: every cloud is cheaper
    p = plan(load(task))
    assert p.placements[0].cloud != "kubernetes"
    assert any(x.cloud == "kubernetes" and x.hourly_cost == 800.0 for x in p.placements)
    # the nodes advertise no RDMA: a 2-node gang asking for it is not placed there
    rdma = plan(load("num_nodes: 2\nresources:\n  accelerators: H100:8\n"
                     "  network: {fabric: rdma}\nrun: x\n"))
    assert all(x.cloud != "kubernetes" for x in rdma.placements)


def test_a_kubeconfig_alone_is_not_asked_for_a_task_naming_no_cloud(k8s: K8sEnv) -> None:
    """Without `kubernetes.allowed_contexts`, a plan that names no cloud never calls an API
    server (a stale current context would slow every `cost` and `--dryrun`); a task that
    names kubernetes still plans on the current context's nodes."""
    k8s.config(allowed_contexts=[])
    for f in k8s.fakes.values():
        f.calls.clear()
    p = plan(load("resources:\n  accelerators: H100:8\nrun: x\n"))
    assert all(x.cloud != "kubernetes" for x in p.placements)
    assert [c for f in k8s.fakes.values() for c in f.calls] == []
    named = plan(load("resources:\n  infra: k8s\n  accelerators: H100:8\nrun: x\n"))
    assert named.placements[named.chosen or 0].cloud == "kubernetes"
    assert any(f.calls for f in k8s.fakes.values())
