"""What the per-cloud end-to-end tests share (tests/clouds/*/test_*e2e*.py, and the
cross-cloud recovery test): the shapes each of them had written again.

Launch tests: `NETNS_ONLY` (their pytestmark), `cli(...)` (the CLI in its own process),
`workdir_task(...)` (a task whose workdir holds f.txt = "synced"), `assert_ranks_ran`,
`assert_setup_ran`, `exec_and_queue` (exec, then both jobs SUCCEEDED in the queue),
`assert_job_logged_ranks`, `assert_cli_status_up`, `down_all`.

Managed spot jobs: `managed_jobs(...)` (fast controller polls, and on the way out the
controller stopped and every cluster down), `resumable_task(...)` (the resumable
counter of task_examples/count_resumable.py with a checkpoint store),
`assert_recovered_once(...)` (SUCCEEDED after exactly one preemption recovery),
`saved_count(...)` / `s3_saved_count(...)` (the highest count a bucket holds).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from launcher.api import clusters as api
from launcher.api import jobs as jobs_api
from launcher.api.exec_job import exec_
from launcher.jobs.store import AttemptRow, JobStore
from launcher.task.model import Task
from tests import netns
from tests.checkpoint_view import committed_now

NETNS_ONLY = [
    pytest.mark.netns,
    pytest.mark.skipif(netns.unavailable_reason() is not None,
                       reason=f"sshd nodes unavailable: {netns.unavailable_reason()}"),
]
REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "task_examples"
# What a gang's ranks print in the launch tests: rank, host and the synced file.
GANG_RUN = 'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt)"'
SETUP = "echo setup on $(hostname) > ~/setup.txt"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`launcher ARGS` in its own process (only the documented settings reach a fake);
    asserts it succeeded without a traceback."""
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def workdir_task(tmp_path: Path, resources: dict[str, Any], run: str, *,
                 setup: str = SETUP, num_nodes: int | None = None) -> Task:
    """Task "e2e" whose workdir (tmp_path/wd) holds f.txt = "synced"."""
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    spec: dict[str, Any] = {"name": "e2e", "workdir": str(work), "resources": resources,
                            "setup": setup, "run": run}
    if num_nodes is not None:
        spec["num_nodes"] = num_nodes
    return Task.from_dict(spec)


def assert_ranks_ran(lines: list[str], hostnames: set[str], ranks: int = 2) -> None:
    """Each rank printed GANG_RUN's line once, from one of `hostnames`, with the file."""
    for rank in range(ranks):
        got = [ln for ln in lines if ln.startswith(f"(rank {rank}) rank={rank} host=")]
        assert len(got) == 1, lines
        assert got[0].split("host=")[1].split()[0] in hostnames and got[0].endswith("f=synced")


class _Body(Protocol):
    home: Path


def assert_setup_ran(nodes: Iterable[_Body], prefix: str = "setup on ") -> None:
    """SETUP wrote ~/setup.txt on every body."""
    for node in nodes:
        assert (node.home / "setup.txt").read_text().startswith(prefix)


def exec_and_queue(cluster: str, marker: str = "exec on ") -> list[Any]:
    """`exec` a command that prints `marker`, then the queue: the launch's job and the
    exec's, both SUCCEEDED. Returns the queue."""
    out: list[str] = []
    r = exec_(cluster, "echo exec on $(hostname)", on_line=out.append)
    assert r.exit_code == 0 and any(marker in ln for ln in out), out
    jobs = api.queue(cluster)
    assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
    return jobs


def assert_job_logged_ranks(cluster: str, job_id: int, ranks: int = 2) -> None:
    """The job's logs (not followed) hold one "rank=" line per rank."""
    lines: list[str] = []
    api.logs(cluster, job_id, follow=False, on_line=lines.append)
    assert sum("rank=" in ln for ln in lines) == ranks, lines


def assert_cli_status_up(cluster: str) -> None:
    """`launcher status --refresh --json` (asking the cloud) lists `cluster` alone, UP."""
    rows = json.loads(cli("status", "--refresh", "--json").stdout)
    assert [r["name"] for r in rows] == [cluster] and rows[0]["status"] == "UP", rows


def down_all() -> None:
    for row in api.status():
        api.down(row.name)


# ---- managed spot jobs --------------------------------------------------------------


@contextlib.contextmanager
def managed_jobs(monkeypatch: pytest.MonkeyPatch, *, log_sync: bool = False,
                 launcher_home: Path | None = None) -> Iterator[None]:
    """The controller polls fast (and syncs logs every 0.5 s with `log_sync`); with
    `launcher_home`, the nodes save checkpoints every second. On exit the controller is
    stopped and every cluster taken down."""
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    if log_sync:
        monkeypatch.setenv("LAUNCHER_JOBS_LOG_SYNC_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    if launcher_home is not None:
        config = launcher_home / "config.yaml"
        config.write_text(config.read_text() + "jobs:\n  checkpoint_save_interval: 1\n")
    try:
        yield
    finally:
        try:
            jobs_api.jobs_controller_stop()
        finally:  # a stuck controller must not leave the clusters behind too
            down_all()


def resumable_task(tmp_path: Path, name: str, resources: str, store: str,
                   count_to: int) -> str:
    """A 2-node spot task file: rank 0 runs count_resumable.py (0.15 s a step, a
    checkpoint every step) to `count_to` with its checkpoint at /root/ckpt saved to
    `store`; `resources`: the YAML lines under `resources:` (indented two spaces)."""
    run = ('if [ "$LAUNCHER_NODE_RANK" = 0 ]; then python3 count_resumable.py; '
           "else echo worker up; fi")
    path = tmp_path / "spot.yaml"
    path.write_text(
        f"name: {name}\nnum_nodes: 2\nworkdir: {EXAMPLES}\n"
        f"resources:\n{resources}"
        f"checkpoint:\n  path: /root/ckpt\n  store: {store}\n"
        f"envs:\n  COUNT_TO: '{count_to}'\n  STEP_S: '0.15'\n  CKPT_EVERY: '1'\n"
        f"run: |\n  {run}\n"
    )
    return str(path)


def assert_recovered_once(job_id: int, store: JobStore,
                          timeout: float = 90) -> tuple[list[str], list[AttemptRow]]:
    """The job ends SUCCEEDED after exactly one recovery, its first attempt PREEMPTED
    and its second caused by that preemption. Returns (event reasons, attempts)."""
    final = jobs_api.jobs_wait(job_id, timeout=timeout)
    reasons = [e.reason for e in jobs_api.jobs_detail(job_id).events]
    assert final.status == "SUCCEEDED", reasons
    assert final.recoveries == 1, reasons
    attempts = store.attempts(job_id)
    assert len(attempts) == 2, attempts
    assert attempts[0].outcome and "PREEMPT" in attempts[0].outcome.upper(), attempts[0]
    assert attempts[1].cause == "preemption", attempts[1]
    return reasons, attempts


class _BucketFake(Protocol):
    def keys(self, bucket: str, prefix: str = "") -> list[str]: ...

    def read(self, bucket: str, name: str) -> str: ...


def saved_count(fake: _BucketFake, bucket: str, prefix: str = "run/") -> int:
    """The count in the latest save the nodes committed under `prefix` (the store's
    root: its one task's saves, read through their manifests; 0 before the first), in a
    GCS or Blob fake."""
    view = committed_now(lambda: fake.keys(bucket, prefix), lambda k: fake.read(bucket, k),
                         prefix, per_task=True)
    return int(json.loads(view["count.json"])["count"]) if "count.json" in view else 0


def s3_saved_count(aws: Any, bucket: str, prefix: str = "jobs/") -> int:
    """The count in the latest save the nodes committed to `bucket` under `prefix` in
    moto's S3 (`aws`: tests.aws_moto.AWSFake; 0 before the first)."""
    s3 = aws.client("s3")

    def keys() -> list[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def read(key: str) -> str:
        return str(s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode())

    view = committed_now(keys, read, prefix, per_task=True)
    return int(json.loads(view["count.json"])["count"]) if "count.json" in view else 0
