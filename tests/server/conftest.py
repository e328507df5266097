"""An API server on loopback for each test: its own LAUNCHER_HOME, a free port, a fixed
admin token (LAUNCHER_API_ADMIN_TOKEN) and two users, alice and bob; clients are CLI
processes in their own homes, logged in with `launcher api login`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
ADMIN_TOKEN = "lk_test-admin-token-0123456789abcdefghijklmnop"
FAST = {
    "LAUNCHER_JOBS_POLL_MIN_S": "0.1", "LAUNCHER_JOBS_POLL_MAX_S": "0.3",
    "LAUNCHER_JOBS_CONFIRM_S": "0.3", "LAUNCHER_AGENT_KILL_GRACE": "1",
    "LAUNCHER_API_MAX_BODY": "200000", "LAUNCHER_API_MAX_UPLOAD": "100000",
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's report on the item (`item.rep_call`), for fixtures that keep
    evidence of a failure (the dashboard's browser saves a screenshot and the page)."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{rep.when}", rep)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Run:
    rc: int
    out: str
    err: str


def cli(home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **FAST, "LAUNCHER_HOME": str(home), **(env or {})})
    return Run(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class Server:
    home: Path
    port: int
    tmp: Path
    tokens: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Run:
        return cli(self.home, "api", "start", "--port", str(self.port),
                   env={"LAUNCHER_API_ADMIN_TOKEN": ADMIN_TOKEN, **self.env})

    def embedded(self, *args: str) -> Run:
        """The CLI on the server's own home, not logged in: embedded mode."""
        return cli(self.home, *args)

    def client(self, user: str, name: str | None = None) -> Path:
        """A fresh client home logged in as `user`."""
        home = self.tmp / f"client-{name or user}"
        home.mkdir(mode=0o700, exist_ok=True)
        r = cli(home, "api", "login", "-e", self.url, "--token", self.tokens[user])
        assert r.rc == 0, r.err
        return home

    def pid(self) -> int:
        return int(json.loads((self.home / "server" / "server.pid").read_text())["pid"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    home = tmp_path / "server-home"
    home.mkdir(mode=0o700)
    srv = Server(home, free_port(), tmp_path)
    r = srv.start()
    assert r.rc == 0, r.out + r.err
    assert "First admin token" not in r.out  # it came from LAUNCHER_API_ADMIN_TOKEN
    srv.tokens["admin"] = ADMIN_TOKEN
    for user in ("alice", "bob"):  # on the server's machine: embedded `users create`
        made = srv.embedded("users", "create", user, "--json")
        assert made.rc == 0, made.err
        srv.tokens[user] = json.loads(made.out)["token"]
    try:
        yield srv
    finally:
        cli(home, "api", "stop")
        from launcher.clouds.local import LocalCloud

        root = home / "local"
        if root.exists():
            old = os.environ.get("LAUNCHER_HOME")
            os.environ["LAUNCHER_HOME"] = str(home)
            try:
                for cdir in root.iterdir():
                    LocalCloud().terminate(cdir.name)
            finally:
                if old is not None:
                    os.environ["LAUNCHER_HOME"] = old


def task_file(tmp: Path, count: int = 400, step: float = 0.1, secret: bool = False) -> str:
    lines = ["name: counter", "resources:", "  infra: local", "  use_spot: true"]
    if secret:
        lines += ["secrets:", "  API_KEY: null"]
    lines += ["run: |", f"  for i in $(seq 1 {count}); do echo count $i; sleep {step}; done"]
    path = tmp / f"task-{count}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)
