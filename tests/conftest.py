"""Shared fixtures. Importable without root: sshd nodes are built only when asked for."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.leaks import WATCH

if TYPE_CHECKING:
    from tests.netns import NetnsLab, SSHNodeSet


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Fails the session when a test left a process running (tests/leaks.py): set up
    before every other session fixture, so it checks after all of them are torn down."""
    WATCH.start()
    yield
    left = WATCH.leftovers()
    if left:
        WATCH.kill(left)
        pytest.fail(WATCH.report(left), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Remembers when each test ran, to name the test that started a leaked process."""
    WATCH.test_started(item.nodeid)
    yield
    WATCH.test_ended()


@pytest.fixture(autouse=True)
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own LAUNCHER_HOME; the real ~/.launcher is never touched."""
    home = tmp_path / "launcher-home"
    home.mkdir(mode=0o700)  # as launcher creates it (a looser one is tightened, with a warning)
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def netns_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsLab]:
    """One bridge + subnet for the session (skips when sshd nodes cannot be built)."""
    from tests import netns

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"sshd nodes unavailable: {reason}")
    lab = netns.NetnsLab(tmp_path_factory.mktemp("netns"))
    try:
        yield lab
    finally:
        try:
            WATCH.check_lab(lab.live_namespaces())  # before close() kills what runs there
        finally:
            lab.close()


@pytest.fixture(scope="session")
def ssh_nodes(netns_lab: NetnsLab) -> Callable[[int], SSHNodeSet]:
    """Factory: `ssh_nodes(n)` starts n fresh sshd nodes (root login with
    `nodes.client_key_path`, host keys in `nodes[i].host_key`). All are torn down
    at the end of the session; call `nodes.close()` sooner after killing nodes."""
    return netns_lab.start_nodes
