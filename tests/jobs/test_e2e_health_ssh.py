"""The health watch end to end on real sshd nodes in network namespaces (an SSH node
pool) whose "image" puts the fake nvidia-smi (tests/fakes/bin) first on PATH and points
LAUNCHER_HEALTH_KMSG_PATH at ~/kern.log, which the tests append XID lines to mid-run.

- a managed job: an Xid 79 on node 1 is found by the head agent's watch; the controller
  excludes the host (quarantined in the pool), replaces it with the spare host in place
  within 60 s of the detection, and the gang resumes from its checkpoint;
- a plain cluster: `status --refresh` shows DEGRADED (node 1: Xid 79); the job gets
  SIGTERM with `on_failure: stop`, and goes on without it.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.fakes import BIN_DIR
from tests.waiting import wait_until

pytestmark = pytest.mark.netns

EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"
NODE_ENV = {"PATH": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin",
            "LAUNCHER_HEALTH_KMSG_PATH": "~/kern.log"}
XID_79 = "[ 9123.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus."
_wait = functools.partial(wait_until, timeout=60.0, poll=0.1)


@pytest.fixture
def pool(ssh_nodes: Callable[..., object], launcher_home: Path, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A pool `lab` of 4 GPU-image hosts sharing a checkpoint_dir (see test_e2e_ssh)."""
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    nodes = ssh_nodes(4, envs=[NODE_ENV] * 4)
    for node in nodes:  # type: ignore[attr-defined]
        (node.home / "kern.log").write_text("[    0.000000] Linux version 5.15.0\n")
    hosts = "\n".join(
        f'      - {{host: {n.host}, port: {n.port}, host_key: "{n.host_key}"}}'  # type: ignore[attr-defined]
        for n in nodes  # type: ignore[attr-defined]
    )
    ckpt = tmp_path / "shared-ckpt"
    ckpt.mkdir()
    (launcher_home / "config.yaml").write_text(
        "ssh_node_pools:\n  lab:\n    user: root\n    gpus: {H100: 8}\n"
        f"    identity_file: {nodes.client_key_path}\n"  # type: ignore[attr-defined]
        f"    checkpoint_dir: {ckpt}\n    hosts:\n{hosts}\n"
    )
    try:
        yield nodes
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)
        nodes.close()  # type: ignore[attr-defined]


def _checkpoint(tmp_path: Path, job_id: int) -> int:
    try:
        doc = json.loads((tmp_path / "shared-ckpt" / str(job_id) / "count.json").read_text())
        return int(doc["count"])
    except (FileNotFoundError, ValueError):
        return 0


def _gang_task(tmp_path: Path, count_to: int) -> str:
    run = ('if [ "$LAUNCHER_NODE_RANK" = 0 ]; then python3 count_resumable.py && '
           'touch "$LAUNCHER_CHECKPOINT_DIR/done"; else '
           'while [ ! -f "$LAUNCHER_CHECKPOINT_DIR/done" ]; do sleep 0.1; done; fi')
    path = tmp_path / "gang.yaml"
    path.write_text(
        f"name: gang\nnum_nodes: 3\nworkdir: {EXAMPLES}\nresources:\n  infra: ssh/lab\n"
        "  health: {watch_seconds: 0.3}\n"
        f"envs:\n  COUNT_TO: '{count_to}'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        f"run: |\n  {run}\n"
    )
    return str(path)


def test_an_xid_79_mid_run_replaces_the_node_and_the_job_resumes(
        pool: object, tmp_path: Path) -> None:
    from launcher.clouds.ssh_pool_state import PoolStateFile

    nodes = pool
    job = api.jobs_launch(_gang_task(tmp_path, count_to=40))
    store = JobStore()
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
        before = store.attempts(job.id)[0].node_ids
        addr = [f"{n.host}:{n.port}" for n in nodes]  # type: ignore[attr-defined]
        assert before == tuple(addr[:3])
        _wait(lambda: _checkpoint(tmp_path, job.id) >= 5, what="progress")
        with open(nodes[1].home / "kern.log", "a") as f:  # type: ignore[index]
            f.write(XID_79 + "\n")
        final = api.jobs_wait(job.id, timeout=120)
        detail = api.jobs_detail(job.id)
        reasons = [e.reason for e in detail.events]
        assert final.status == "SUCCEEDED", reasons
        assert final.recoveries == 1
        (att,) = store.attempts(job.id)
        assert att.node_ids == (addr[0], addr[3], addr[2])  # the spare took rank 1's place
        (rec,) = [e for e in detail.events if e.to_status == "RECOVERING"]
        assert rec.reason.startswith(
            f"node 1 ({addr[1]}) failed the health watch: Xid 79 (GPU has fallen off the bus)")
        assert "quarantined in the pool" in rec.reason
        # the replacement started within 60 s of the watch's detection (preempted_at)
        assert att.preempted_at is not None and 0 <= rec.at - att.preempted_at < 60
        entry = PoolStateFile().read().quarantine[addr[1]]
        assert entry["health"] is True and "Xid 79" in str(entry["reason"])
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("resum" in ln.lower() for ln in lines), lines[-20:]
        assert _checkpoint(tmp_path, job.id) == 40
    finally:
        store.close()


def _plain_task(on_failure: str | None) -> object:
    from launcher.task.model import Task

    health: dict[str, object] = {"watch_seconds": 0.3}
    if on_failure:
        health["on_failure"] = on_failure
    run = "trap 'echo got-sigterm; exit 143' TERM; echo up; while true; do sleep 0.1; done"
    return Task.from_dict({"name": "p", "num_nodes": 2, "run": run, "resources": {
        "infra": "ssh/lab", "accelerators": "H100:8", "health": health}})


def _pool_plan(task: object, blocked: object) -> object:
    from tests.api.test_clusters_ssh import _pool_plan as plan

    return plan(task, blocked)  # type: ignore[arg-type]


@pytest.mark.parametrize("on_failure", ["stop", None], ids=["stop", "warn-by-default"])
def test_a_plain_cluster_shows_degraded_and_stop_sigterms_warn_does_not(
        pool: object, on_failure: str | None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.api import clusters
    from launcher.api.launch import launch

    monkeypatch.setenv("LAUNCHER_HEALTH_HISTORY_S", "0.5")  # metric rows every 0.5 s
    nodes = pool
    res = launch(_plain_task(on_failure), "pc", plan_fn=_pool_plan,  # type: ignore[arg-type]
                 detach_run=True)
    job_id = res.job_id
    assert job_id is not None
    _wait(lambda: clusters.queue("pc")[-1].status.value == "RUNNING", what="running")
    time.sleep(1.0)  # the watch's first samples
    with open(nodes[1].home / "kern.log", "a") as f:  # type: ignore[index]
        f.write(XID_79 + "\n")

    def degraded() -> bool:
        rows = {r.name: r for r in clusters.status(refresh=True)}
        return rows["pc"].status == "DEGRADED"

    _wait(degraded, what="DEGRADED")
    (row,) = [r for r in clusters.status() if r.name == "pc"]  # kept for every later status
    assert row.status == "DEGRADED" and row.status_reason == "health: node 1: Xid 79"
    if on_failure == "stop":
        _wait(lambda: clusters.queue("pc")[-1].status.value == "FAILED", what="SIGTERM")
        rec = clusters.queue("pc")[-1]
        assert rec.reason == "health: node 1: Xid 79" and rec.failed_rank == 1
    else:
        time.sleep(2.0)
        assert clusters.queue("pc")[-1].status.value == "RUNNING"
    from launcher.api.node_health import watch_history

    view = watch_history("pc")
    assert view.job_id == job_id and view.degraded is not None
    assert any(XID_79 in e["detail"] for e in view.events)
    from launcher.cli import main

    with pytest.raises(SystemExit) as code:
        main(["status"])
    assert code.value.code == 0
    assert "DEGRADED (node 1: Xid 79)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as code:
        main(["health", "pc", "--history"])
    out = capsys.readouterr().out
    assert code.value.code == 0
    assert f"Job {job_id} on pc: DEGRADED (Xid 79 (GPU has fallen off the bus), node 1)" in out
    assert f"health-fail: node 1: Xid 79 (GPU has fallen off the bus) | {XID_79}" in out
    assert "UTIL MIN" in out


def test_a_straggler_and_a_hang_on_ssh_workers_are_events(pool: object) -> None:
    from launcher.api import clusters
    from launcher.api.launch import launch
    from launcher.api.node_health import watch_history
    from launcher.task.model import Task

    run = ('if [ "$LAUNCHER_NODE_RANK" = 2 ]; then P=0.35; else P=0.5; fi; '
           'echo "LAUNCHER_PROGRESS=$P"; sleep 600')  # then silent, GPUs idle: a hang
    task = Task.from_dict({"name": "h", "num_nodes": 3, "run": run, "resources": {
        "infra": "ssh/lab", "health": {"watch_seconds": 0.3, "hang_minutes": 0.05}}})
    res = launch(task, "hc", plan_fn=_pool_plan, detach_run=True)  # type: ignore[arg-type]

    def events() -> list[dict]:
        return watch_history("hc", res.job_id).events

    _wait(lambda: any("hang:" in e["detail"] for e in events()), what="the hang")
    details = [(e["kind"], e["detail"]) for e in events()]
    (straggler,) = [(k, d) for k, d in details if "straggler" in d]  # once, and only node 2
    assert straggler[0] == "health-warn"
    assert straggler[1].startswith(
        "node 2: straggler: progress 0.35 is 30% behind the other ranks' 0.5 | ")
    assert straggler[1].endswith("rank 2: LAUNCHER_PROGRESS=0.35")  # the ranks' lines
    (hang,) = [d for k, d in details if "hang:" in d]
    assert hang.startswith("hang: no output from any rank and no busy GPU for ")
    assert "node 2: util 0.0%" in hang  # sampled on the ssh worker through the fakes
    assert clusters.queue("hc")[-1].status.value == "RUNNING"  # on_failure unset: no SIGTERM
