"""Managed jobs and clusters through the server: owners, same output as embedded mode,
secrets never echoed or stored in clear, the closed laptop, and kill -9 of the server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

from launcher.jobs.store import JobStore
from tests.server.conftest import Server, cli, task_file
from tests.waiting import wait_until

SECRET = "s3cr3t-value-never-echoed-0xC0FFEE"


def _job(server: Server, job_id: int = 1) -> dict[str, object]:
    r = server.embedded("jobs", "queue", "--json")
    assert r.rc == 0, r.err
    return next(j for j in json.loads(r.out) if j["id"] == job_id)


def _attempt_clusters(server: Server, job_id: int = 1) -> list[str]:
    old = os.environ["LAUNCHER_HOME"]
    os.environ["LAUNCHER_HOME"] = str(server.home)
    try:
        store = JobStore()
        try:
            return [a.cluster_name for a in store.attempts(job_id)]
        finally:
            store.close()
    finally:
        os.environ["LAUNCHER_HOME"] = old


def _live_local_clusters(server: Server) -> list[str]:
    root = server.home / "local"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_owners_same_output_and_secrets(server: Server, tmp_path: Path) -> None:
    alice, bob = server.client("alice"), server.client("bob")
    admin = server.client("admin")
    task = task_file(tmp_path, count=600, secret=True)
    sub = cli(alice, "jobs", "launch", task, "-y", "-d", "--secret", f"API_KEY={SECRET}")
    assert sub.rc == 0, sub.err
    assert "Managed job 1 (counter) submitted" in sub.err
    wait_until(lambda: _job(server)["status"] == "RUNNING", timeout=30, what="job running")
    cluster = _job(server)["cluster"]
    assert isinstance(cluster, str)

    # each routed verb: the same stdout and exit code as embedded mode on the server's home
    for args in (["status", "--json"], ["queue", cluster, "--json"], ["queue", "nosuch"],
                 ["logs", "nosuch"], ["jobs", "logs", "99", "--no-follow"],
                 ["jobs", "cancel", "99", "-y"], ["autostop", cluster, "--cancel"]):
        here, there = server.embedded(*args), cli(alice, *args)
        assert (there.rc, there.out, there.err) == (here.rc, here.out, here.err), args
    here, there = server.embedded("jobs", "queue", "--json"), cli(alice, "jobs", "queue", "--json")
    moving = {"duration_s": 0, "node_hours": 0, "cost_so_far": 0}  # grow while it runs
    assert [{**j, **moving} for j in json.loads(there.out)] == \
           [{**j, **moving} for j in json.loads(here.out)]
    logs = cli(alice, "jobs", "logs", "1", "--no-follow")
    assert logs.rc == 0 and "=== attempt 1" in logs.out and "count 1" in logs.out

    # bob sees nothing of alice's and cannot act on it; --all-users is for admins
    assert json.loads(cli(bob, "jobs", "queue", "--json").out) == []
    assert json.loads(cli(bob, "status", "--json").out) == []
    denied = cli(bob, "jobs", "cancel", "1", "-y")
    assert denied.rc == 4 and "No managed job with id 1" in denied.err
    assert cli(bob, "queue", cluster).rc == 4
    assert cli(bob, "down", cluster, "-y").rc == 4
    refused = cli(bob, "jobs", "queue", "--all-users")
    assert refused.rc == 1 and "needs the admin role" in refused.err
    # the admin sees it with --all-users and can cancel it
    assert json.loads(cli(admin, "jobs", "queue", "--json").out) == []
    every = json.loads(cli(admin, "jobs", "queue", "--all-users", "--json").out)
    assert [j["id"] for j in every] == [1]
    assert [r["name"] for r in json.loads(cli(admin, "status", "--all-users", "--json").out)] == [cluster]
    cancel = cli(admin, "jobs", "cancel", "1", "-y")
    assert cancel.rc == 0 and "Managed job 1: CANCELLED." in cancel.err

    # who did what is recorded
    import sqlite3

    with sqlite3.connect(server.home / "state.db") as db:
        assert db.execute("SELECT launched_by, cancelled_by FROM managed_jobs WHERE id = 1"
                          ).fetchone() == ("alice", "admin")
        actions = db.execute("SELECT user, action FROM api_audit ORDER BY id").fetchall()
    assert ("alice", "launch") in actions and ("admin", "cancel") in actions

    # the secret: in no response above, in no file the server keeps (the local cloud's
    # node directories under local/ are the nodes' own disks, as a VM's would be)
    for args in (["jobs", "queue", "--json"], ["jobs", "logs", "1", "--no-follow"],
                 ["jobs", "logs", "1", "--controller"], ["status", "--json"]):
        assert SECRET not in cli(admin, *args).out
    for path in server.home.rglob("*"):
        if path.is_file() and "local" not in path.relative_to(server.home).parts[:1]:
            assert SECRET.encode() not in path.read_bytes(), path


def test_closed_laptop(server: Server, tmp_path: Path) -> None:
    """Submit, delete the client's home, preempt: the job recovers with no client; a fresh
    client in another home sees the job, its recovery and every attempt's log."""
    laptop = server.client("alice", "laptop")
    sub = cli(laptop, "jobs", "launch", task_file(tmp_path, count=600), "-y", "-d")
    assert sub.rc == 0, sub.err
    wait_until(lambda: _job(server)["status"] == "RUNNING", timeout=30, what="job running")
    first = _job(server)["cluster"]
    shutil.rmtree(laptop)  # the laptop is gone
    pre = server.embedded("local", "preempt", str(first))  # the cloud takes the node
    assert pre.rc == 0, pre.err
    wait_until(lambda: _job(server)["recoveries"] == 1 and _job(server)["status"] == "RUNNING",
               timeout=45, what="recovered on a new cluster")
    fresh = server.client("alice", "fresh")
    row = json.loads(cli(fresh, "jobs", "queue", "--json").out)[0]
    assert row["recoveries"] == 1 and row["cluster"] != first
    wait_until(lambda: "=== attempt 2" in cli(fresh, "jobs", "logs", "1", "--no-follow").out,
               timeout=20, what="attempt 2's log")
    logs = cli(fresh, "jobs", "logs", "1", "--no-follow").out
    assert "=== attempt 1" in logs and "=== attempt 2" in logs and "count 1" in logs
    assert cli(fresh, "jobs", "cancel", "1", "-y").rc == 0


def test_kill9_of_the_server_then_restart_resumes(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    sub = cli(alice, "jobs", "launch", task_file(tmp_path, count=60, step=0.1), "-y", "-d")
    assert sub.rc == 0, sub.err
    wait_until(lambda: _job(server)["status"] == "RUNNING", timeout=30, what="job running")
    os.kill(server.pid(), signal.SIGKILL)
    down = cli(alice, "jobs", "queue")
    assert down.rc == 1 and server.url in down.err and "launcher api status" in down.err
    time.sleep(0.5)  # let the job run on with no controller at all
    again = server.start()
    assert again.rc == 0, again.err
    follow = cli(alice, "jobs", "logs", "1")  # follows to the end, through the new server
    assert follow.rc == 0, follow.err
    assert "count 60" in follow.out
    assert _job(server)["status"] == "SUCCEEDED" and _job(server)["recoveries"] == 0
    assert len(_attempt_clusters(server)) == 1  # no second cluster was made
    wait_until(lambda: _live_local_clusters(server) == [], timeout=20, what="cluster torn down")
