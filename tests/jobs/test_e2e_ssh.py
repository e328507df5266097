"""Managed jobs on an SSH node pool of real sshd nodes in network namespaces: the
controller process, the SSH cloud's own view of lost hosts, in-place node replacement
with a spare host of the pool, resume from a checkpoint on storage the nodes share."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.waiting import wait_until

pytestmark = pytest.mark.netns

EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"


@pytest.fixture(params=[4])
def pool(request: pytest.FixtureRequest, ssh_nodes: Callable[[int], object],
         launcher_home: Path, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A pool `lab` of 4 hosts (or `request.param`) whose checkpoint_dir is shared by
    every node (/tmp is not private to the namespaces: only /root is)."""
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    monkeypatch.setenv("LAUNCHER_SSH_LOST_CONFIRM_S", "1")
    nodes = ssh_nodes(request.param)
    hosts = "\n".join(
        f'      - {{host: {n.host}, port: {n.port}, host_key: "{n.host_key}"}}'  # type: ignore[attr-defined]
        for n in nodes  # type: ignore[attr-defined]
    )
    ckpt = tmp_path / "shared-ckpt"
    ckpt.mkdir()
    (launcher_home / "config.yaml").write_text(
        "ssh_node_pools:\n  lab:\n    user: root\n"
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


_wait = functools.partial(wait_until, timeout=60.0, poll=0.1)


def _gang_task(tmp_path: Path, count_to: int) -> str:
    # rank 0 counts (checkpointed in the shared dir); the other ranks wait for it.
    run = ('if [ "$LAUNCHER_NODE_RANK" = 0 ]; then python3 count_resumable.py && '
           'touch "$LAUNCHER_CHECKPOINT_DIR/done"; else '
           'while [ ! -f "$LAUNCHER_CHECKPOINT_DIR/done" ]; do sleep 0.1; done; fi')
    path = tmp_path / "gang.yaml"
    path.write_text(
        f"name: gang\nnum_nodes: 3\nworkdir: {EXAMPLES}\nresources:\n  infra: ssh/lab\n"
        f"envs:\n  COUNT_TO: '{count_to}'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        f"run: |\n  {run}\n"
    )
    return str(path)


def _checkpoint(tmp_path: Path, job_id: int) -> int:
    try:
        doc = json.loads((tmp_path / "shared-ckpt" / str(job_id) / "count.json").read_text())
        return int(doc["count"])
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.parametrize("lost", [2, 0], ids=["worker", "head"])
def test_lost_ssh_node_is_replaced_by_a_spare_and_the_gang_resumes(
        pool: object, tmp_path: Path, lost: int) -> None:
    nodes = pool
    job = api.jobs_launch(_gang_task(tmp_path, count_to=40))
    store = JobStore()
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
        before = store.attempts(job.id)[0].node_ids
        addr = [f"{n.host}:{n.port}" for n in nodes]  # type: ignore[attr-defined]
        assert before == tuple(addr[:3])
        _wait(lambda: _checkpoint(tmp_path, job.id) >= 5, what="progress")
        nodes[lost].kill()  # type: ignore[index]  # node lost: sshd and every process gone
        final = api.jobs_wait(job.id, timeout=120)
        detail = api.jobs_detail(job.id)
        assert final.status == "SUCCEEDED", [e.reason for e in detail.events]
        assert final.recoveries == 1
        (att,) = store.attempts(job.id)
        expect = list(before)
        expect[lost] = addr[3]  # the spare took the lost node's rank; the others kept theirs
        assert att.node_ids == tuple(expect)
        assert any("replaced 1 node" in e.reason for e in detail.events)
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        resumed = [ln for ln in lines if "resum" in ln.lower()]
        assert resumed, lines[-20:]
        assert _checkpoint(tmp_path, job.id) == 40
    finally:
        store.close()


@pytest.mark.parametrize("pool", [3], indirect=True)
def test_lost_ssh_node_without_a_spare_host_ends_failed_no_resource(
        pool: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_JOBS_NO_CAPACITY_RETRIES", "2")
    monkeypatch.setenv("LAUNCHER_JOBS_BACKOFF_MAX_S", "0.5")
    job = api.jobs_launch(_gang_task(tmp_path, count_to=200))
    _wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
    _wait(lambda: _checkpoint(tmp_path, job.id) >= 2, what="progress")
    pool[1].kill()  # type: ignore[index]
    final = api.jobs_wait(job.id, timeout=120)
    reasons = [e.reason for e in api.jobs_detail(job.id).events]
    assert final.status == "FAILED_NO_RESOURCE", reasons
    assert any("TERMINATED" in r for r in reasons)  # a confirmed loss, not exit 255
    assert not any("exit code 255" in r for r in reasons)
