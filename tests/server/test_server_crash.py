"""kill -9 of the server at each step of a managed job's life and recovery, and of a
remote launch, then `api start` again: no lost job, no duplicate cluster, no leaked
local-cloud node.

The managed job's steps are the controller's crash points (launcher/jobs/crash.py):
the controller runs inside the server, so `LAUNCHER_CONTROLLER_CRASH_AT` set for the
server makes the whole server die there with `os._exit(137)`, as kill -9 does. One
job meets them in order, the server restarted with the next point each time. A remote
launch has no crash points: the server is killed when its request log shows a step.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.server.conftest import Server, cli
from tests.server.test_jobs_through_server import _attempt_clusters, _job, _live_local_clusters
from tests.server.test_requests import Client
from tests.waiting import wait_until

CRASH_ENV = "LAUNCHER_CONTROLLER_CRASH_AT"


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _restart(server: Server, crash_at: str | None) -> int:
    if crash_at:
        server.env[CRASH_ENV] = crash_at
    else:
        server.env.pop(CRASH_ENV, None)
    r = server.start()
    if r.rc != 0:  # it resumed straight into the crash point, before `api start` saw it up
        assert crash_at and "did not come up" in r.err and _dead(server.pid()), r.out + r.err
    return server.pid()


def _wait_dead(pid: int, point: str) -> None:
    wait_until(lambda: _dead(pid), timeout=30, what=f"the server to die at {point}")


def _gated_task(tmp: Path, go: Path) -> str:
    path = tmp / "gated.yaml"
    path.write_text("name: gated\nresources:\n  infra: local\n  use_spot: true\nrun: |\n"
                    f"  echo started; while [ ! -f {go} ]; do sleep 0.2; done; echo done\n")
    return str(path)


def test_kill9_at_each_step_of_a_managed_job_and_its_recovery(server: Server,
                                                               tmp_path: Path) -> None:
    alice = server.client("alice")
    go = tmp_path / "go"
    cli(server.home, "api", "stop")
    pid = _restart(server, "attempt_recorded")
    sub = cli(alice, "jobs", "launch", _gated_task(tmp_path, go), "-y", "-d")
    assert sub.rc == 0, sub.err
    _wait_dead(pid, "attempt_recorded")
    # the first attempt's life, then a preemption and the recovery's attempt
    for point in ("provisioned", "running_recorded"):
        _wait_dead(_restart(server, point), point)
    pid = _restart(server, "preemption_recorded")
    wait_until(lambda: _job(server)["status"] == "RUNNING", timeout=30, what="job running")
    first = str(_job(server)["cluster"])
    assert server.embedded("local", "preempt", first).rc == 0
    _wait_dead(pid, "preemption_recorded")
    for point in ("attempt_recorded", "provisioned", "running_recorded"):
        _wait_dead(_restart(server, point), f"{point} (recovery)")
    pid = _restart(server, "job_finished")
    wait_until(lambda: _job(server)["status"] == "RUNNING", timeout=30, what="recovered")
    go.touch()
    _wait_dead(pid, "job_finished")
    _wait_dead(_restart(server, "teardown_done"), "teardown_done")
    _restart(server, None)

    wait_until(lambda: _job(server)["status"] == "SUCCEEDED", timeout=30, what="job succeeded")
    job = _job(server)
    assert job["recoveries"] == 1, job
    clusters = _attempt_clusters(server)
    assert len(clusters) == 2 and len(set(clusters)) == 2, clusters  # one per attempt
    wait_until(lambda: _live_local_clusters(server) == [], timeout=20,
               what=f"no local node left: {_live_local_clusters(server)}")
    done = cli(alice, "jobs", "logs", "1", "--no-follow")
    assert "done" in done.out, done.out


def _launch_task(tmp: Path, go: Path) -> str:
    path = tmp / "launch.yaml"
    path.write_text("name: web\nresources:\n  infra: local\nsetup: echo setting-up\nrun: |\n"
                    f"  echo started; while [ ! -f {go} ]; do sleep 0.2; done; echo done\n")
    return str(path)


def test_kill9_at_each_step_of_a_remote_launch(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    go = tmp_path / "go"
    task = _launch_task(tmp_path, go)
    steps = (("Server request", "err"), ("Provisioning", "err"),
             (r"\(setup\) setting-up", "out"), (r"\(rank 0\) started", "out"))
    for n, (marker, where) in enumerate(steps, 1):
        name = f"web{n}"
        pid = server.pid()
        client = Client(alice, "launch", task, "-c", name, "-y")
        try:
            client.wait_for(marker, where=where)
        except AssertionError:
            client.proc.kill()
            client.finish()
            raise AssertionError(f"{marker}: out={client.out} err={client.err}") from None
        os.kill(pid, signal.SIGKILL)
        client.finish()
        _wait_dead(pid, marker)
        _restart(server, None)
        # the request is over (FAILED: cut short); the cluster is there at most once,
        # and launching the same name again reuses it
        again = cli(alice, "launch", task, "-c", name, "-y", "-d")
        assert again.rc == 0, again.out + again.err
        status = cli(alice, "status")
        assert status.out.count(name) == 1, status.out
        assert len(_live_local_clusters(server)) == 1, _live_local_clusters(server)
        assert cli(alice, "down", name, "-y").rc == 0
        assert _live_local_clusters(server) == []
