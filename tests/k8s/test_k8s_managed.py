"""A managed job on Kubernetes recovers when its pod is evicted (node pressure) and
when its node is lost, as after a spot preemption, and resumes from its checkpoint (a
directory on this machine every body sees, standing in for a ReadWriteMany PVC)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from launcher.api import jobs as api
from tests.cloud_e2e import NETNS_ONLY, down_all
from tests.k8s.conftest import K8sEnv
from tests.waiting import wait_until

pytestmark = NETNS_ONLY
EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"
_wait = functools.partial(wait_until, timeout=120.0, poll=0.1)


def _count(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / "count.json").read_text())["count"])
    except (FileNotFoundError, ValueError, KeyError):
        return 0


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_to: int,
         extra: str = "") -> tuple[int, Path]:
    """A managed 1-node job counting to `count_to` (`extra`: more task YAML)."""
    for k, v in {"LAUNCHER_JOBS_POLL_MIN_S": "0.2", "LAUNCHER_JOBS_POLL_MAX_S": "0.5",
                 "LAUNCHER_JOBS_CONFIRM_S": "0.3", "LAUNCHER_JOBS_IDLE_EXIT_S": "120"}.items():
        monkeypatch.setenv(k, v)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ckpt.chmod(0o777)
    task = tmp_path / "count.yaml"
    task.write_text(
        f"name: count\nworkdir: {EXAMPLES}\ncheckpoint: {ckpt}\nresources:\n"
        "  infra: k8s/ctx-a\n  accelerators: H100:8\n"
        f"envs:\n  COUNT_TO: '{count_to}'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        "run: python3 count_resumable.py\n" + extra)
    return api.jobs_launch(str(task)).id, ckpt


def _running_pod(env: K8sEnv) -> dict:  # type: ignore[type-arg]
    pods = env.fakes["ctx-a"].live_pods()
    assert len(pods) == 1, pods
    return pods[0]


@pytest.mark.parametrize("fate", ["evicted", "node lost"])
def test_managed_job_recovers_and_resumes(k8s_bodies: K8sEnv, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, fate: str) -> None:
    env = k8s_bodies
    job_id, ckpt = _job(tmp_path, monkeypatch, 40)
    store = env.fakes["ctx-a"].store
    try:
        _wait(lambda: api.jobs_status(job_id).status == "RUNNING", what="running")
        _wait(lambda: _count(ckpt) >= 5, what="progress")
        pod = _running_pod(env)
        name = pod["metadata"]["name"]
        if fate == "evicted":
            store.pod_failed("default", name, reason="Evicted",
                             message="The node was low on resource: ephemeral-storage.")
        else:
            store.lose_node(pod["spec"]["nodeName"])
        env.bodies.kill([pod["metadata"]["uid"]])  # type: ignore[attr-defined]
        final = api.jobs_wait(job_id, timeout=180)
        detail = api.jobs_detail(job_id)
        assert final.status == "SUCCEEDED", [e.reason for e in detail.events]
        assert final.recoveries >= 1
        lines: list[str] = []
        api.jobs_logs(job_id, lines.append, follow=False)
        assert any("resum" in ln.lower() for ln in lines), lines[-20:]
        assert _count(ckpt) == 40
        bound = {o["metadata"]["uid"]: o["spec"]["nodeName"] for _, _, res, o in store.history
                 if res == "pods" and o["spec"].get("nodeName")}
        assert len(bound) == 2, bound  # the relaunch made a new pod
        if fate == "node lost":  # ... away from the lost node
            assert len(set(bound.values())) == 2, bound
    finally:
        api.jobs_controller_stop()
        down_all()
    assert env.leftovers() == []
