"""A follower that vanishes (kill -9) frees what its stream held on the server: the
stream's thread, the worker thread parked on its queue and the call following the job,
even while the job prints nothing more (the bug: all stayed until the next line)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.server.conftest import Server, cli
from tests.server.test_requests import Client
from tests.waiting import wait_until


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _quiet_task(tmp: Path) -> str:
    path = tmp / "quiet.yaml"
    path.write_text("name: quiet\nresources:\n  infra: local\n"
                    "run: |\n  echo started; sleep 600\n")
    return str(path)


def _settled(pid: int) -> int:
    """The server's thread count once it has stayed the same for a few samples."""
    seen: list[int] = []

    def steady() -> bool:
        seen.append(_threads(pid))
        return len(seen) >= 4 and len(set(seen[-4:])) == 1

    wait_until(steady, timeout=20, poll=0.25, what=f"a steady thread count: {seen}")
    return seen[-1]


def test_a_killed_follower_frees_its_server_threads(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    sub = cli(alice, "jobs", "launch", _quiet_task(tmp_path), "-y", "-d")
    assert sub.rc == 0, sub.err
    wait_until(lambda: "started" in cli(alice, "jobs", "logs", "1", "--no-follow").out,
               timeout=30, what="the job's first line")
    pid = server.pid()
    for _ in range(4):  # the worker pool at its size for one request at a time
        assert cli(alice, "jobs", "queue").rc == 0
    before = _settled(pid)

    for args in (("jobs", "logs", "1"), ("logs", _cluster(server))):
        follower = Client(alice, *args)
        follower.wait_for("started", where="out")
        assert _threads(pid) > before  # the stream holds at least its thread
        follower.proc.kill()
        follower.finish()
        # freed within the stream's disconnect check and the call's poll interval
        wait_until(lambda: _threads(pid) <= before, timeout=5, poll=0.1,
                   what=f"the server back to {before} threads, has {_threads(pid)}")
    assert cli(alice, "jobs", "cancel", "1", "-y").rc == 0


def _cluster(server: Server) -> str:
    r = server.embedded("jobs", "queue", "--json")
    return str(json.loads(r.out)[0]["cluster"])
