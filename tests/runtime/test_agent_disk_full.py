"""A full disk, for real: the agent's home and the client's LAUNCHER_HOME on a 2 MB tmpfs.

A job that writes more output than fits must not take the agent down: the job's exit is
still recorded, its logs are marked truncated (the follow ends with "log truncated: no
space left on MOUNT"), the daemon keeps serving, and client commands say "disk full"
instead of SQLite's "disk I/O error". Skipped with a reason where tmpfs cannot be mounted
(not root, or no mount permission in this container).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.runtime import agent as core
from tests.runtime.test_agent import Agent

SIZE = "2m"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A fresh 2 MB tmpfs, unmounted (lazily, whatever still holds it) afterwards."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip() or res.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path) -> Path:
    """Fill the file system to the last block; returns the filler file."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        with contextlib.suppress(OSError):  # and the last partial block
            while os.write(fd, b"\0"):
                pass
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def full_agent(small_fs: Path) -> Iterator[Agent]:
    a = Agent(small_fs / "cluster", num_nodes=1)
    a.setup()
    try:
        yield a
    finally:
        a.close()


# Writes ~3 MB into its log on a 2 MB file system, then carries on and exits 7.
FLOOD = "head -c 3000000 /dev/zero | tr '\\0' x; echo; sleep 0.3; exit 7"


def test_job_that_fills_the_disk_ends_recorded_and_the_agent_survives(
        full_agent: Agent, small_fs: Path) -> None:
    job = full_agent.submit(FLOOD, num_nodes=1)
    lines, rec = full_agent.logs(job, "--follow")  # must end, not hang
    assert rec["status"] == "FAILED" and rec["exit_code"] == 7
    msg = f"log truncated: no space left on {small_fs}"
    assert rec["log_truncated"] == msg
    assert lines[-1] == f"launcher: {msg}"
    assert core.daemon_running(core.Paths(str(full_agent.home)))
    queued = full_agent.doc("queue")["jobs"]
    assert queued[0]["log_truncated"] == msg and queued[0]["status"] == "FAILED"
    assert any(e["kind"] == "disk_full" for e in full_agent.events())
    # Still full: a new submission is refused with a clear error, not a traceback.
    filler = _fill(small_fs)
    res = full_agent.run("submit", stdin=json.dumps({"run": "echo x", "num_nodes": 1}),
                         check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert json.loads(res.stdout) == {"error": f"disk full: no space left on {small_fs}",
                                      "kind": "disk_full"}
    filler.unlink()
    # Space comes back: the same daemon runs the next job, whose logs are whole.
    daemon = full_agent.daemon_pid()
    (full_agent.home / "logs" / str(job) / "rank-0.log").unlink()
    job2 = full_agent.submit("echo after", num_nodes=1)
    lines2, rec2 = full_agent.logs(job2, "--follow")
    assert rec2["status"] == "SUCCEEDED" and rec2["log_truncated"] is None
    assert lines2 == ["(rank 0) after"]
    assert full_agent.daemon_pid() == daemon


def test_follower_whose_client_went_away_exits(full_agent: Agent) -> None:
    """No orphan `agent.py logs --follow`: when its client (parent) dies, it stops."""
    job = full_agent.submit("sleep 30", num_nodes=1)
    full_agent.wait_status(job, ("RUNNING",))
    # parent: a shell that starts the follower in the background and exits a second later
    agent_cmd = f"{sys.executable} -S {full_agent.home / 'agent.py'} logs {job} --follow"
    sh = subprocess.run(["sh", "-c", f"{agent_cmd} >/dev/null 2>&1 & echo $!; sleep 1"],
                        env=full_agent.env, capture_output=True, text=True, timeout=10)
    pid = int(sh.stdout.strip())
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.1)
    alive = Path(f"/proc/{pid}").exists()
    if alive:
        with open(f"/proc/{pid}/stat") as f:
            alive = f.read().rsplit(")", 1)[1].split()[0] != "Z"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    assert not alive, "the follower outlived its client"


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAUNCHER_HOME=str(home),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-c", "from launcher.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_client_commands_say_disk_full(small_fs: Path) -> None:
    home = small_fs / "home"
    assert _cli("status", home=home).returncode == 0  # creates the state DB while there is room
    filler = _fill(small_fs)
    try:
        for args in (("status",), ("queue", "nosuch"), ("jobs", "queue")):
            res = _cli(*args, home=home)
            assert res.returncode != 0, args
            assert f"disk full: no space left on {small_fs}" in res.stderr, (args, res.stderr)
            assert "Traceback" not in res.stderr and "disk I/O error" not in res.stderr, res.stderr
    finally:
        filler.unlink()
    assert json.loads(_cli("status", "--json", home=home).stdout) == []
