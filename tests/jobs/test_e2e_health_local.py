"""The health watch on the real local cloud: a managed 2-node job whose nodes have the fake
GPU tools first on PATH and their kernel log at ~/kern.log (LAUNCHER_HEALTH_KMSG_PATH,
the documented override; `~` is each node's home). An Xid 79 written into node 1's log
mid-run: the local cloud reclaims that node (excluded: never reused), a fresh one replaces
it in place, and the gang resumes from its checkpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.fakes import fake_path
from tests.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"
XID_79 = "[ 9123.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus."


@pytest.fixture(autouse=True)
def fast_controller(launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.1")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    monkeypatch.setenv("LAUNCHER_AGENT_KILL_GRACE", "1")
    monkeypatch.setenv("PATH", fake_path())
    monkeypatch.setenv("LAUNCHER_HEALTH_KMSG_PATH", "~/kern.log")
    monkeypatch.delenv("LAUNCHER_FAKE_GPU_CONFIG", raising=False)
    yield launcher_home
    api.jobs_controller_stop()
    from launcher.clouds.local import LocalCloud, local_root

    root = local_root()
    for name in sorted(p.name for p in root.iterdir()) if root.exists() else []:
        LocalCloud().terminate(name)


def test_an_xid_79_reclaims_the_local_node_and_the_gang_resumes(tmp_path: Path) -> None:
    from launcher.clouds.local import LocalCloud

    task = tmp_path / "t.yaml"
    task.write_text(
        f"name: counter\nnum_nodes: 2\nworkdir: {EXAMPLES}\nresources:\n  infra: local\n"
        "  health: {watch_seconds: 0.3}\nenvs:\n  COUNT_TO: '30'\n  STEP_S: '0.1'\n"
        "run: |\n  if [ \"$LAUNCHER_NODE_RANK\" = 0 ]; then python3 count_resumable.py; fi\n")
    job = api.jobs_launch(str(task))
    store = JobStore()
    try:
        wait_until(lambda: store.job(job.id).status == "RUNNING", timeout=60, what="running")
        att = store.attempts(job.id)[0]
        ckpt = Path(att.checkpoint_dir or "") / "count.json"
        wait_until(lambda: ckpt.exists() and json.loads(ckpt.read_text())["count"] >= 5,
                   timeout=60, what="progress")
        with open(LocalCloud().node_dir(att.cluster_name, 1) / "kern.log", "a") as f:
            f.write(XID_79 + "\n")
        final = api.jobs_wait(job.id, timeout=120)
        detail = api.jobs_detail(job.id)
        reasons = [e.reason for e in detail.events]
        assert final.status == "SUCCEEDED", reasons
        assert final.recoveries == 1
        (rec,) = [e for e in detail.events if e.to_status == "RECOVERING"]
        assert "failed the health watch: Xid 79 (GPU has fallen off the bus)" in rec.reason
        assert "local node(s) 1 reclaimed" in rec.reason
        assert any("replaced 1 node" in r for r in reasons)
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("resum" in ln.lower() for ln in lines), lines[-20:]
        assert json.loads(ckpt.read_text())["count"] == 30
    finally:
        store.close()
