"""Two server replicas (two processes, two homes) on one PostgreSQL share the managed jobs
by leases (launcher/jobs/leases.py): `kill -9` the one holding a job and the other takes
its jobs within 10 s, with no duplicate cluster; a replica paused past its leases
(SIGSTOP) and resumed (SIGCONT) changes nothing of the jobs it lost. The replicas'
homes share one `local` cloud directory, as real replicas share one real cloud."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.jobs.store import JobStore
from tests.server.conftest import ADMIN_TOKEN, Server, cli, free_port
from tests.server.test_server_crash import _dead
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
TTL_S = "3"


def _gated(tmp: Path, go: Path) -> str:
    path = tmp / "gated.yaml"
    path.write_text("name: gated\nresources:\n  infra: local\n  use_spot: true\nrun: |\n"
                    f"  echo started; while [ ! -f {go} ]; do sleep 0.2; done; echo done\n")
    return str(path)


@pytest.fixture
def unstarted(tmp_path: Path, pg_url: str) -> Iterator[tuple[Server, Server]]:
    """Two replicas' homes on one database, not started yet; stopped and cleaned after."""
    a_home, b_home = tmp_path / "replica-a", tmp_path / "replica-b"
    for home in (a_home, b_home):
        home.mkdir(mode=0o700)
    (a_home / "local").mkdir(mode=0o700)
    os.symlink(a_home / "local", b_home / "local")  # one cloud for both
    env = {"LAUNCHER_DB_URL": pg_url, "LAUNCHER_LEASE_TTL_S": TTL_S}
    servers = [Server(home, free_port(), tmp_path, env=dict(env)) for home in (a_home, b_home)]
    try:
        yield servers[0], servers[1]
    finally:
        for srv in servers:
            with contextlib.suppress(OSError, ValueError):
                os.kill(srv.pid(), signal.SIGCONT)
            if (srv.home / "server" / "server.pid").exists():
                cli(srv.home, "api", "stop", env=env)
        from launcher.clouds.local import LocalCloud

        old = os.environ.get("LAUNCHER_HOME")
        os.environ["LAUNCHER_HOME"] = str(a_home)
        try:
            for cdir in (a_home / "local").iterdir():
                LocalCloud().terminate(cdir.name)
        finally:
            if old is not None:
                os.environ["LAUNCHER_HOME"] = old


def _start(srv: Server) -> None:
    r = srv.start()
    assert r.rc == 0, r.out + r.err
    srv.tokens["admin"] = ADMIN_TOKEN
    if "alice" not in srv.tokens:
        made = cli(srv.home, "users", "create", "alice", "--json", env=srv.env)
        if made.rc == 0:
            srv.tokens["alice"] = json.loads(made.out)["token"]


@pytest.fixture
def replicas(unstarted: tuple[Server, Server]) -> tuple[Server, Server]:
    a, b = unstarted
    _start(a)
    _start(b)
    b.tokens["alice"] = a.tokens["alice"]
    return a, b


def _query(sql: str) -> list[tuple[object, ...]]:
    store = JobStore()
    try:
        return [tuple(r) for r in store.rows(sql)]
    finally:
        store.close()


def _holders() -> dict[int, str | None]:
    return {int(r[0]): r[1] for r in _query(  # type: ignore[misc]
        "SELECT id, CASE WHEN lock_expires_at >= EXTRACT(EPOCH FROM clock_timestamp()) "
        "THEN lock_holder END FROM managed_jobs ORDER BY id")}


def _replica_pids() -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in _query(  # type: ignore[call-overload]
        "SELECT id, pid FROM server_replicas")}


def _statuses() -> dict[int, str]:
    return {int(r[0]): str(r[1]) for r in _query(  # type: ignore[call-overload]
        "SELECT id, status FROM managed_jobs ORDER BY id")}


def _clusters(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def _submit(srv: Server, tmp: Path, task: str, n: int) -> None:
    alice = srv.client("alice", f"alice-{srv.port}")
    for _ in range(n):
        r = cli(alice, "jobs", "launch", task, "-y", "-d")
        assert r.rc == 0, r.err


def test_kill9_of_a_replica_hands_its_jobs_to_the_other_within_10s(
        replicas: tuple[Server, Server], tmp_path: Path) -> None:
    a, b = replicas
    go = tmp_path / "go"
    _submit(a, tmp_path, _gated(tmp_path, go), 4)
    wait_until(lambda: set(_statuses().values()) == {"RUNNING"}, timeout=120,
               what="all 4 jobs running")
    holders = _holders()
    assert all(holders.values()) and len(holders) == 4
    status = cli(a.home, "api", "status", env=a.env)
    assert "Replicas sharing the state DB" in status.out and "job(s) held" in status.out
    shown = json.loads(cli(a.home, "api", "status", "--json", env=a.env).out)["replicas"]
    assert sorted(r["jobs"] for r in shown) in ([0, 4], [1, 3], [2, 2]) or sum(
        r["jobs"] for r in shown) == 4
    pids = _replica_pids()
    victim = holders[1]
    assert victim is not None
    victim_pid = pids[victim]
    survivor = next(s for s in (a, b) if s.pid() != victim_pid)
    clusters_before = _clusters(a.home / "local")
    assert len(clusters_before) == 4
    os.kill(victim_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: all(h is not None and h != victim for h in _holders().values()),
               timeout=15, what="the survivor holding every job")
    taken_over_s = time.monotonic() - killed_at
    print(f"\njobs taken over {taken_over_s:.1f} s after kill -9 (lease {TTL_S} s)")
    assert taken_over_s <= 10.0, taken_over_s
    # every job goes on from where it was: no job relaunched, no second cluster
    assert set(_statuses().values()) == {"RUNNING"}
    assert _clusters(a.home / "local") == clusters_before
    go.touch()
    wait_until(lambda: set(_statuses().values()) == {"SUCCEEDED"}, timeout=120,
               what="the survivor finishing every job")
    attempts = _query("SELECT job_id, COUNT(*) FROM managed_job_attempts GROUP BY job_id")
    assert sorted(int(n) for _, n in attempts) == [1, 1, 1, 1]  # type: ignore[call-overload]
    wait_until(lambda: _clusters(a.home / "local") == [], timeout=60,
               what="the clusters torn down")
    assert survivor.pid() != victim_pid


def test_a_replica_paused_past_its_leases_cannot_write_over_the_new_holder(
        replicas: tuple[Server, Server], tmp_path: Path) -> None:
    a, b = replicas
    go = tmp_path / "go"
    _submit(b, tmp_path, _gated(tmp_path, go), 2)
    wait_until(lambda: set(_statuses().values()) == {"RUNNING"}, timeout=120,
               what="both jobs running")
    holder = _holders()[1]
    assert holder is not None
    paused_pid = _replica_pids()[holder]
    os.kill(paused_pid, signal.SIGSTOP)
    try:
        wait_until(lambda: _holders()[1] not in (None, holder), timeout=15,
                   what="the other replica taking job 1")
        new_holder = _holders()[1]
        events_before = _query("SELECT COUNT(*) FROM managed_job_events")
    finally:
        os.kill(paused_pid, signal.SIGCONT)
    # the resumed replica renews: it learns the job is gone and stops its driver
    paused = next(s for s in (a, b) if s.pid() == paused_pid)
    wait_until(lambda: "lease lost" in (paused.home / "managed_jobs" / "controller.log")
               .read_text(errors="replace"), timeout=15, what="the resumed replica noticing")
    assert _holders()[1] == new_holder
    assert _query("SELECT COUNT(*) FROM managed_job_events") == events_before
    go.touch()
    wait_until(lambda: set(_statuses().values()) == {"SUCCEEDED"}, timeout=120,
               what="both jobs finished")
    assert len(_query("SELECT job_id FROM managed_job_attempts")) == 2  # no relaunch


@pytest.mark.parametrize("point", ["attempt_recorded", "provisioned", "running_recorded"])
def test_a_replica_dying_at_a_step_of_the_launch_leaves_the_job_to_the_other(
        unstarted: tuple[Server, Server], tmp_path: Path, point: str) -> None:
    """Replica A holds the job and dies (the controller's crash point: os._exit, as
    kill -9) at `point` of its launch; replica B, started after, takes the job over once
    A's lease expires and finishes it on one cluster, leaving nothing behind."""
    a, b = unstarted
    a.env["LAUNCHER_CONTROLLER_CRASH_AT"] = point
    _start(a)
    go = tmp_path / "go"
    _submit(a, tmp_path, _gated(tmp_path, go), 1)
    wait_until(lambda: _dead(a.pid()), timeout=60, what=f"replica A dying at {point}")
    _start(b)
    wait_until(lambda: _statuses() == {1: "RUNNING"}, timeout=60, what="B running the job")
    assert len(_clusters(a.home / "local")) == 1  # one cluster, never a second
    go.touch()
    wait_until(lambda: _statuses() == {1: "SUCCEEDED"}, timeout=60, what="B finishing it")
    clusters = [str(r[0]) for r in _query("SELECT cluster_name FROM managed_job_attempts")]
    assert len(clusters) == len(set(clusters)) >= 1
    wait_until(lambda: _clusters(a.home / "local") == [], timeout=60,
               what="every cluster torn down")


def test_a_replica_dying_in_a_recovery_leaves_it_to_the_other(
        unstarted: tuple[Server, Server], tmp_path: Path) -> None:
    """Replica A runs the job; its cluster is preempted and A dies just after recording
    the preemption; B takes the job over and recovers it on a new cluster."""
    a, b = unstarted
    a.env["LAUNCHER_CONTROLLER_CRASH_AT"] = "preemption_recorded"
    _start(a)
    go = tmp_path / "go"
    _submit(a, tmp_path, _gated(tmp_path, go), 1)
    wait_until(lambda: _statuses() == {1: "RUNNING"}, timeout=60, what="A running the job")
    (first,) = _clusters(a.home / "local")
    assert cli(a.home, "local", "preempt", first, env=a.env).rc == 0
    wait_until(lambda: _dead(a.pid()), timeout=60, what="replica A dying after the preemption")
    _start(b)
    wait_until(lambda: _statuses() == {1: "RUNNING"} and len(
        _query("SELECT attempt FROM managed_job_attempts")) == 2, timeout=90,
        what="B recovering the job")
    go.touch()
    wait_until(lambda: _statuses() == {1: "SUCCEEDED"}, timeout=60, what="B finishing it")
    clusters = [str(r[0]) for r in _query("SELECT cluster_name FROM managed_job_attempts")]
    assert len(clusters) == 2 and first in clusters and len(set(clusters)) == 2
    wait_until(lambda: _clusters(a.home / "local") == [], timeout=60,
               what="every cluster torn down")
