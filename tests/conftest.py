"""Shared fixtures. Importable without root: sshd nodes are built only when asked for."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.leaks import WATCH

if TYPE_CHECKING:
    from tests.netns import NetnsLab, SSHNodeSet
    from tests.pg import PgServer


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


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the session (tests/pg.py); skips without one."""
    from tests.pg import PgServer, bin_dir

    if bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run does)")
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh database on the session's server, made the state DB (LAUNCHER_DB_URL)."""
    from launcher.state import engine

    url = pg_server.new_database()
    monkeypatch.setenv("LAUNCHER_DB_URL", url)
    yield url
    engine.dispose_all()
    pg_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_engine(request: pytest.FixtureRequest) -> str:
    """Runs a state DB test once per engine: the SQLite file in LAUNCHER_HOME, and a fresh
    PostgreSQL database (LAUNCHER_DB_URL). Tests marked `sqlite_only` run on SQLite alone."""
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A `sqlite_only` test has no PostgreSQL variant: deselected, not collected and
    skipped (a skip would read as something this machine could not run)."""
    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        on_pg = spec is not None and spec.params.get("db_engine") == "postgresql"
        (drop if on_pg and item.get_closest_marker("sqlite_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
