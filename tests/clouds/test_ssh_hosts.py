"""SSH pool host states (issue 8, item 9): free / held / quarantined until when and why,
in `launcher ssh pools` (and --json) and `launcher check`; `launcher ssh release`; a
quarantined host whose sshd answers again is probed and released sooner."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from launcher.api.ssh_pools import ssh_pools, ssh_release
from launcher.cli import main
from launcher.clouds.base import InvalidRequestError


@pytest.fixture
def banner_server() -> Iterator[int]:
    """A loopback listener that answers like sshd (the banner is all a probe reads)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-test\r\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens: connection refused
    return int(port)


def _setup(home: Path, answering: int, silent: int, *, since_ago: float) -> dict[str, str]:
    hosts = {"held": "127.0.0.1:1", "back": f"127.0.0.1:{answering}",
             "dead": f"127.0.0.1:{silent}", "free": "127.0.0.1:4"}
    (home / "config.yaml").write_text(yaml.safe_dump({"ssh_node_pools": {"lab": {
        "user": "root", "hosts": [{"host": "127.0.0.1", "port": int(a.split(":")[1])}
                                  for a in hosts.values()]}}}))
    now = time.time()
    entry = {"cluster": "train", "since": now - since_ago, "until": now + 600,
             "reason": "sshd unreachable on every probe (confirmed lost)"}
    (home / "ssh_pools.json").write_text(json.dumps({
        "version": 1,
        "allocations": {"train": {"cluster": "train", "pool": "lab", "hosts": [hosts["held"]],
                                  "key_path": "k", "ready": True, "nodes": []}},
        "host_keys": {},
        "quarantine": {hosts["back"]: dict(entry), hosts["dead"]: dict(entry)},
    }))
    return hosts


def _states(home: Path, probe: bool = True) -> dict[str, tuple[str, str | None]]:
    return {h.address: (h.state, h.cluster) for p in ssh_pools(probe=probe) for h in p.hosts}


def test_every_host_state_is_shown(launcher_home: Path, banner_server: int) -> None:
    hosts = _setup(launcher_home, banner_server, _closed_port(), since_ago=1)
    # quarantined only a second ago: not probed yet, both stay quarantined
    assert _states(launcher_home) == {
        hosts["held"]: ("held", "train"), hosts["back"]: ("quarantined", "train"),
        hosts["dead"]: ("quarantined", "train"), hosts["free"]: ("free", None)}
    dead = next(h for p in ssh_pools() for h in p.hosts if h.address == hosts["dead"])
    assert dead.until is not None and dead.until > time.time() + 500
    assert "confirmed lost" in (dead.reason or "")


def test_a_host_whose_sshd_answers_again_is_released_sooner(
        launcher_home: Path, banner_server: int) -> None:
    hosts = _setup(launcher_home, banner_server, _closed_port(), since_ago=120)
    states = _states(launcher_home)
    assert states[hosts["back"]] == ("free", None)
    assert states[hosts["dead"]] == ("quarantined", "train")
    # kept as a cleanup marker: the next cluster on it stops what "train" left there
    entry = json.loads((launcher_home / "ssh_pools.json").read_text())["quarantine"][hosts["back"]]
    assert entry["until"] <= time.time() and "answered again" in entry["reason"]


def test_release_a_fixed_host(launcher_home: Path, banner_server: int) -> None:
    hosts = _setup(launcher_home, banner_server, _closed_port(), since_ago=1)
    released = ssh_release("lab", hosts["dead"])
    assert released.state == "free"
    assert _states(launcher_home, probe=False)[hosts["dead"]] == ("free", None)
    assert ssh_release("lab", hosts["dead"]).state == "free"  # idempotent
    with pytest.raises(InvalidRequestError, match="held by cluster 'train'"):
        ssh_release("lab", hosts["held"])
    with pytest.raises(InvalidRequestError, match="no host"):
        ssh_release("lab", "127.0.0.9:22")
    with pytest.raises(InvalidRequestError, match="several hosts named"):
        ssh_release("lab", "127.0.0.1")
    with pytest.raises(InvalidRequestError, match="No SSH node pool named 'gpu'"):
        ssh_release("gpu", hosts["dead"])


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return int(exit_info.value.code or 0)


def test_cli_ssh_pools_check_and_release(launcher_home: Path, banner_server: int,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    hosts = _setup(launcher_home, banner_server, _closed_port(), since_ago=1)
    assert _cli(["ssh", "pools", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_host = {h["host"]: h for h in doc[0]["hosts"]}
    assert doc[0]["pool"] == "lab" and by_host[hosts["held"]]["cluster"] == "train"
    assert by_host[hosts["dead"]]["state"] == "quarantined" and by_host[hosts["dead"]]["until"]
    assert _cli(["ssh", "pools"]) == 0
    out = capsys.readouterr()
    dead_line = next(ln for ln in out.out.splitlines() if hosts["dead"] in ln)
    assert "quarantined until" in dead_line and "lost while held by train" in dead_line
    assert "launcher ssh release POOL HOST" in out.err
    assert _cli(["check"]) == 0
    check_out = capsys.readouterr().out
    assert any(hosts["held"] in ln and "held by train" in ln for ln in check_out.splitlines())
    assert _cli(["check", "--json"]) == 0
    ssh_row = next(r for r in json.loads(capsys.readouterr().out) if r["cloud"] == "ssh")
    assert {h["state"] for h in ssh_row["pools"][0]["hosts"]} == {"free", "held", "quarantined"}
    assert _cli(["ssh", "release", "lab", hosts["dead"]]) == 0
    assert "free" in capsys.readouterr().err
    assert _cli(["ssh", "release", "lab", "nosuch"]) != 0
    assert "no host 'nosuch'" in capsys.readouterr().err
