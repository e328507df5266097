"""Asynchronous requests: a `launch` through the server is a request whose log the
client streams; Ctrl-C detaches (naming `api logs` and `api cancel`), a killed client
cancels nothing, `api logs REQ` re-attaches, `api cancel REQ` cancels the job."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
from pathlib import Path

from tests.server.conftest import CLI, FAST, Server, cli
from tests.waiting import wait_until


class Client:
    """A CLI process whose stdout and stderr lines are collected as they come."""

    def __init__(self, home: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **FAST, "LAUNCHER_HOME": str(home)})
        self.out: list[str] = []
        self.err: list[str] = []
        self._q: queue.Queue[None] = queue.Queue()
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream: object, sink: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            sink.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, where: str = "err", timeout: float = 30) -> re.Match[str]:
        lines = self.err if where == "err" else self.out
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for m in (re.search(pattern, ln) for ln in list(lines)) if m]
            return bool(found)

        wait_until(seen, timeout=timeout, what=f"{pattern!r} in {where}: {lines}")
        return found[0]

    def finish(self, timeout: float = 30) -> int:
        rc = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.proc.stderr.close()  # type: ignore[union-attr]
        return rc


def _waiting_task(tmp: Path, go: Path) -> str:
    path = tmp / f"wait-{go.name}.yaml"
    path.write_text("name: waiter\nresources:\n  infra: local\nrun: |\n"
                    f"  while [ ! -f {go} ]; do echo tick; sleep 0.2; done; echo released\n")
    return str(path)


def test_detach_reattach_and_a_killed_client(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    go = tmp_path / "go"
    first = Client(alice, "launch", _waiting_task(tmp_path, go), "-y", "-c", "req1")
    rid = first.wait_for(r"Server request ([0-9a-f]+) ").group(1)
    first.wait_for(r"\(rank 0\) tick", where="out")
    first.proc.send_signal(signal.SIGINT)  # Ctrl-C: detach
    assert first.finish() == 130
    said = "\n".join(first.err)
    assert f"`launcher api logs {rid}` re-attaches" in said
    assert f"`launcher api cancel {rid}` cancels it" in said

    # re-attach, then vanish without a word (kill -9): the request goes on
    second = Client(alice, "api", "logs", rid)
    second.wait_for(r"\(rank 0\) tick", where="out")
    second.proc.kill()
    second.finish()
    status = cli(alice, "queue", "req1", "--json")
    assert [j["status"] for j in json.loads(status.out)] == ["RUNNING"], status.err

    # a third client re-attaches and sees the job to its end
    third = Client(alice, "api", "logs", rid)
    third.wait_for(r"\(rank 0\) tick", where="out")
    go.touch()
    assert third.finish() == 0, third.err
    assert "(rank 0) released" in third.out
    assert f"Request {rid}: SUCCEEDED." in third.err
    # bob cannot follow or cancel alice's request
    bob = server.client("bob")
    assert cli(bob, "api", "logs", rid).rc != 0
    assert cli(bob, "api", "cancel", rid).rc != 0
    cli(alice, "down", "req1", "-y")


def test_api_cancel_cancels_the_launch(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    launch = Client(alice, "launch", _waiting_task(tmp_path, tmp_path / "never"), "-y",
                    "-c", "req2")
    rid = launch.wait_for(r"Server request ([0-9a-f]+) ").group(1)
    launch.wait_for(r"Job (\d+) submitted to req2")
    launch.wait_for(r"tick", where="out")
    r = cli(alice, "api", "cancel", rid)
    assert r.rc == 0 and f"Request {rid}: cancel requested" in r.err, r.err
    rc = launch.finish()
    assert rc == 1 and any(f"Request {rid} was cancelled" in ln for ln in launch.err), launch.err
    # the request ends at once; the agent stops the job's ranks right after
    wait_until(lambda: [j["status"] for j in json.loads(cli(alice, "queue", "req2", "--json").out)]
               == ["CANCELLED"], 30, "the job CANCELLED")
    again = cli(alice, "api", "logs", rid)
    assert again.rc == 130 and f"Request {rid}: CANCELLED." in again.err
    cli(alice, "down", "req2", "-y")
