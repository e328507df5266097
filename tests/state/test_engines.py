"""Choosing the state DB's engine, and what a user sees when the PostgreSQL one is wrong,
unreachable, newer than the code or goes away mid-run (launcher/state/engine.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore
from launcher.state import engine
from launcher.state.db import PlacementRecord, StateDB
from launcher.state.files import StateError
from launcher.state.store import StoreError, StoreUnavailableError

PLACEMENT = PlacementRecord("local", "local", None, "cpu", 1, False, hourly_cost=1.0)


@pytest.fixture(autouse=True)
def _fresh_engines() -> None:
    engine.dispose_all()


def test_mask_url_hides_only_the_password() -> None:
    assert engine.mask_url("postgresql://bob:s3cr:t@db.example:5432/l") == (
        "postgresql://bob:***@db.example:5432/l")
    assert engine.mask_url("postgresql://bob@db/l") == "postgresql://bob@db/l"


def test_a_url_that_is_not_postgresql_is_one_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_DB_URL", "mysql://bob:hunter2@db.example/launcher")
    with pytest.raises(StoreError) as info:
        StateDB()
    text = str(info.value)
    assert "mysql://bob:***@db.example/launcher is not a PostgreSQL URL" in text
    assert "hunter2" not in text


def test_an_unreachable_server_names_the_url_with_the_password_masked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_DB_URL", "postgresql://bob:hunter2@127.0.0.1:1/launcher")
    with pytest.raises(StoreUnavailableError) as info:
        StateDB()
    text = str(info.value)
    assert text.startswith(
        "Cannot connect to the state DB at postgresql://bob:***@127.0.0.1:1/launcher")
    assert "hunter2" not in text


def test_the_cli_says_so_in_one_paragraph_without_a_traceback(launcher_home: Path) -> None:
    env = {**os.environ, "LAUNCHER_HOME": str(launcher_home),
           "LAUNCHER_DB_URL": "postgresql://bob:hunter2@127.0.0.1:1/launcher"}
    proc = subprocess.run([sys.executable, "-c", "from launcher.cli import main; main()",
                           "status"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode != 0
    assert "Cannot connect to the state DB at postgresql://bob:***@127.0.0.1:1/launcher" in (
        proc.stderr)
    assert "Traceback" not in proc.stderr and "hunter2" not in proc.stderr + proc.stdout


def test_db_in_config_yaml_chooses_postgresql(pg_server, launcher_home: Path,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    url = pg_server.new_database()
    try:
        monkeypatch.delenv("LAUNCHER_DB_URL", raising=False)
        (launcher_home / "config.yaml").write_text(f"db: {url}\n")
        with StateDB() as db:
            db.create_cluster("c1", PLACEMENT)
            assert not db.is_sqlite
        assert not (launcher_home / "state.db").exists()
        monkeypatch.setenv("LAUNCHER_DB_URL", url)  # the same DB, named the other way
        with StateDB() as db:
            assert [c.name for c in db.list_clusters()] == ["c1"]
    finally:
        engine.dispose_all()
        pg_server.drop_database(url)


def test_a_postgresql_db_newer_than_the_code_is_refused(pg_url: str) -> None:
    StateDB().close()
    with StateDB() as db, db.transaction() as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffff'")
    with pytest.raises(StateError, match=r"revision ffff, which this launcher does not know.*"
                                         r"never downgraded"):
        StateDB()
    with pytest.raises(StateError, match="revision ffff"):
        JobStore()


def test_a_dropped_connection_is_replaced_for_a_read(pg_server, pg_url: str) -> None:  # type: ignore[no-untyped-def]
    with StateDB() as db:
        db.create_cluster("c1", PLACEMENT)
        pg_server.kick_connections(pg_url)
        assert [c.name for c in db.list_clusters()] == ["c1"]  # retried on a new connection


def test_a_connection_lost_inside_a_write_rolls_it_back_whole(pg_server, pg_url: str) -> None:  # type: ignore[no-untyped-def]
    store = JobStore()
    try:
        job = store.add_job(name="a", task_yaml="{}", task_source=None, strategy="FAILOVER",
                            max_restarts_on_errors=0, recover_on_exit_codes=())
        with pytest.raises(StoreUnavailableError, match="transaction was rolled back"), \
                store.write() as c:
            c.execute("UPDATE managed_jobs SET status = 'STARTING' WHERE id = ?", (job.id,))
            pg_server.kick_connections(pg_url)
            c.execute("INSERT INTO managed_job_events (job_id, at, to_status, reason) "
                      "VALUES (?, 0, 'STARTING', 'half')", (job.id,))
        # the same store works again, and nothing of the broken transaction landed
        assert store.job(job.id).status is S.PENDING
        assert [e.reason for e in store.events(job.id)] == ["submitted"]
        store.transition(job.id, S.STARTING, "controller started")
        assert store.job(job.id).status is S.STARTING
    finally:
        store.close()


def test_a_server_that_comes_back_is_waited_for_with_back_off(  # type: ignore[no-untyped-def]
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole server goes away for a moment: a read outside a transaction retries on a
    new connection (with back-off) and succeeds once it is back."""
    from tests.pg import PgServer, bin_dir

    if bin_dir() is None:
        pytest.skip("PostgreSQL is not installed")
    server = PgServer()
    try:
        url = server.new_database()
        monkeypatch.setenv("LAUNCHER_DB_URL", url)
        with StateDB() as db:
            db.create_cluster("c1", PLACEMENT)
            server._run("pg_ctl", "stop", "-D", str(server.data), "-m", "fast", "-w")
            restarted = threading.Event()

            def restart() -> None:
                server._run("pg_ctl", "start", "-w", "-D", str(server.data), "-l",
                            str(server.log), "-o", f"-k {server.sock} -c listen_addresses=''")
                restarted.set()

            threading.Timer(1.0, restart).start()
            assert [c.name for c in db.list_clusters()] == ["c1"]
            assert restarted.wait(30)
    finally:
        engine.dispose_all()
        server.stop()


def test_db_in_config_yaml_must_be_a_url() -> None:
    from launcher.config.settings import ConfigError, parse_config

    assert parse_config("db: postgresql://u@h/l\n").db == "postgresql://u@h/l"
    with pytest.raises(ConfigError, match="field 'db': must be a database URL"):
        parse_config("db: 5\n")
