"""Kubernetes end to end, minus the container: the real launch path against the API
server fakes, with an sshd body at each pod's IP (tests/k8s/conftest.py).

`launch` plans on the contexts' live offers, creates the Secret, the headless Service
and one pod per node, waits for them to run, connects to the pod IPs, syncs the
workdir, runs setup and the 2-node gang; then exec, queue, logs, status --refresh and
down, after which the fake holds nothing launcher made. A gang no context can
schedule now rolls back and fails over to the second context within a minute.
"""

from __future__ import annotations

import time
from pathlib import Path

from launcher.api import clusters as api
from launcher.api.launch import launch
from tests.cloud_e2e import (
    GANG_RUN,
    NETNS_ONLY,
    assert_cli_status_up,
    assert_job_logged_ranks,
    assert_ranks_ran,
    assert_setup_ran,
    cli,
    down_all,
    exec_and_queue,
    workdir_task,
)
from tests.k8s.conftest import K8sEnv

pytestmark = NETNS_ONLY


def _hog(env: K8sEnv, ctx: str, gpus: int = 8) -> None:
    """Take every GPU node of `ctx` with someone else's pods."""
    store = env.fakes[ctx].store
    for i, node in enumerate(n for n in store.items("nodes") if "gpu" in n["metadata"]["name"]):
        store.create("pods", "default", {"metadata": {"name": f"other-{i}"}, "spec": {
            "nodeName": node["metadata"]["name"], "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})


def test_two_node_launch_exec_logs_down_on_kubernetes(k8s_bodies: K8sEnv, tmp_path: Path) -> None:
    env = k8s_bodies
    task = workdir_task(tmp_path, {"infra": "k8s/ctx-a", "cpus": "8"}, GANG_RUN, num_nodes=2)
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "k8e2e", on_line=lines.append)
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert (result.cloud, result.region) == ("kubernetes", "ctx-a")
        pods = env.fakes["ctx-a"].live_pods()
        assert sorted(p["metadata"]["name"] for p in pods) == ["k8e2e-0", "k8e2e-1"]
        nodes = env.bodies.wait_for([p["metadata"]["uid"] for p in pods])  # type: ignore[attr-defined]
        assert_ranks_ran(lines, {n.hostname for n in nodes.values()})
        assert_setup_ran(nodes.values())

        jobs = exec_and_queue("k8e2e")
        assert_job_logged_ranks("k8e2e", jobs[0].id)
        assert "exec on " in cli("logs", "k8e2e", str(jobs[1].id)).stdout
        assert_cli_status_up("k8e2e")
        check = cli("check").stdout
        assert "ctx-a (namespace default): can create pods" in check, check

        api.down("k8e2e")
        assert env.leftovers() == []
        env.bodies.sync()  # type: ignore[attr-defined]
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        down_all()


def test_unschedulable_gang_fails_over_to_the_next_context(k8s_bodies: K8sEnv, tmp_path: Path) -> None:
    env = k8s_bodies
    env.config(contexts={"ctx-a": {"provision_timeout": 3}})
    _hog(env, "ctx-a")
    task = workdir_task(tmp_path, {"any_of": [{"infra": "k8s/ctx-a", "accelerators": "H100:8"},
                                              {"infra": "k8s/ctx-b", "accelerators": "H100:8"}]},
                        "echo on $(hostname)", num_nodes=2)
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "k8fo", on_line=lines.append)
        took = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.region == "ctx-b"
        assert took < 60, took
        assert not [p for p in env.fakes["ctx-a"].store.items("pods")
                    if p["metadata"]["name"].startswith("k8fo")]
        print(f"failover launch {took:.2f}s")
    finally:
        down_all()
    assert env.leftovers() == []
