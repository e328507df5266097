"""The state DB: migrations, typed rows, concurrency across processes, cluster locks."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.clouds.base import NodeInfo
from launcher.errors import ClusterBusyError, ClusterNotFoundError
from launcher.state import legacy, migrate
from launcher.state.db import (
    ClusterStatus,
    InvalidClusterNameError,
    PlacementRecord,
    StateDB,
    StateError,
    acquire_cluster_lock,
    cluster_lock,
    validate_cluster_name,
)

PLACEMENT = PlacementRecord(
    cloud="local",
    region="local",
    zone=None,
    instance_type="local-cpu",
    num_nodes=2,
    use_spot=False,
    hourly_cost=1.5,
    resources="2x local-cpu",
)

# every test runs on both engines (tests/conftest.py, db_engine)
pytestmark = pytest.mark.usefixtures("db_engine")


@pytest.mark.sqlite_only
def test_fresh_db_is_wal_and_at_the_newest_revision(launcher_home: Path) -> None:
    with StateDB() as db:
        assert db.path == launcher_home / "state.db"
        assert migrate.current_revision(db._conn) == migrate.HEAD
    conn = sqlite3.connect(str(launcher_home / "state.db"))
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in conn.execute("PRAGMA table_info(clusters)")]
    assert {"name", "cloud", "status", "hourly_cost", "autostop_minutes"} <= set(cols)


def test_head_is_the_newest_revision_of_the_scripts() -> None:
    """migrate.HEAD (the fast path's answer) names the newest script in versions/."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory(str(Path(migrate.__file__).with_name("migrations")))
    assert scripts.get_heads() == [migrate.HEAD]
    assert migrate.HEAD in migrate.known_revisions()


@pytest.mark.sqlite_only
def test_a_db_from_a_newer_launcher_is_refused_and_left_alone(launcher_home: Path) -> None:
    StateDB().close()
    conn = sqlite3.connect(launcher_home / "state.db")
    conn.execute("UPDATE alembic_version SET version_num = 'a1b2c3'")
    conn.commit()
    with pytest.raises(StateError, match=r"revision a1b2c3, which this launcher does not know"
                                         r".*never downgraded"):
        StateDB()
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("a1b2c3",)]
    conn.close()


@pytest.mark.sqlite_only
def test_a_legacy_chain_newer_than_the_launcher_is_refused(launcher_home: Path) -> None:
    conn = sqlite3.connect(launcher_home / "state.db")
    conn.execute("CREATE TABLE schema_version (component TEXT NOT NULL, version INTEGER NOT "
                 "NULL, description TEXT NOT NULL, applied_at REAL NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES ('core', 7, 'future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(StateError, match="'core' schema version 7, newer than this launcher"):
        StateDB()


def test_query_reads_a_table_and_refuses_writes() -> None:
    with StateDB() as db:
        with db.transaction() as conn:
            conn.executemany("INSERT INTO api_audit (at, \"user\", action, target) "
                             "VALUES (?, 'u', ?, 't')", [(1, "a"), (2, "b")])
        assert db.query("SELECT at, action FROM api_audit ORDER BY id") == [(1, "a"), (2, "b")]
        assert db.query_one("SELECT action FROM api_audit WHERE at = ?", (2,)) == ("b",)
        assert db.query_one("SELECT action FROM api_audit WHERE at = ?", (3,)) is None
        with pytest.raises(ValueError, match="for reads; got 'DELETE'"):
            db.query("DELETE FROM api_audit")
        assert len(db.query("SELECT * FROM api_audit")) == 2


def _open(home: str, q: mp.Queue) -> None:  # type: ignore[type-arg]
    os.environ["LAUNCHER_HOME"] = home
    try:
        with StateDB():
            pass
        q.put("ok")
    except Exception as exc:  # reported to the parent
        q.put(repr(exc))


def test_concurrent_first_open_migrates_once(launcher_home: Path) -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_open, args=(str(launcher_home), q)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    results = [q.get(timeout=5) for _ in procs]
    assert results == ["ok"] * 4
    with StateDB() as db:
        assert db.query("SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]
        assert db.query("SELECT component, version FROM schema_version") == [("job-secrets", 1)]


def test_cluster_rows_roundtrip_typed() -> None:
    with StateDB() as db:
        rec = db.create_cluster("c1", PLACEMENT, task_name="t", ssh_key_path="/k")
        assert rec.status is ClusterStatus.INIT and rec.num_nodes == 2 and rec.use_spot is False
        with pytest.raises(ClusterBusyError):
            db.create_cluster("c1", PLACEMENT)
        nodes = [
            NodeInfo(rank=r, node_id=f"c1-{r}", internal_ip="127.0.0.1", local_root=f"/n{r}")
            for r in (1, 0)
        ]
        db.set_nodes("c1", nodes)
        db.set_status("c1", ClusterStatus.UP)
        db.set_autostop("c1", 10, True)
        info = db.cluster_info("c1")
        assert [n.rank for n in info.nodes] == [0, 1]
        assert info.head.local_root == "/n0" and info.ssh_key_path == "/k"
        rec = db.require_cluster("c1")
        assert rec.status is ClusterStatus.UP
        assert (rec.autostop_minutes, rec.autostop_down) == (10, True)
        assert [c.name for c in db.list_clusters()] == ["c1"]
        with pytest.raises(ClusterNotFoundError, match="Known clusters: c1"):
            db.require_cluster("nope")
        db.delete_cluster("c1")
        db.delete_cluster("c1")  # idempotent
        assert db.get_cluster("c1") is None and db.get_nodes("c1") == []
        kinds = [e.kind for e in db.events("c1")]
        assert kinds[0] == "created" and kinds[-1] == "deleted"


def test_clouds_touched_lists_every_provision_attempt() -> None:
    with StateDB() as db:
        db.create_cluster("c2", PLACEMENT)
        db.set_placement("c2", PlacementRecord("aws", "us-east-1", "us-east-1a", "p5", 1, True))
        db.set_placement("c2", PlacementRecord("gcp", "us-central1", None, "a3", 1, True))
        assert sorted(db.clouds_touched("c2")) == ["aws", "gcp", "local"]
        assert db.require_cluster("c2").cloud == "gcp"


def test_cost_ledger_opens_once_and_closes_on_delete() -> None:
    with StateDB() as db:
        rec = db.create_cluster("c3", PLACEMENT)
        db.open_usage(rec, started_at=time.time() - 3600)
        db.open_usage(rec)  # already open: no second entry
        db.close_usage("c3", "stopped")
        db.open_usage(rec)
        db.delete_cluster("c3")
        entries = db.usage("c3")
        assert [e.end_reason for e in entries] == ["stopped", "down"]
        assert entries[0].cost() == pytest.approx(1.5, rel=0.01)


@pytest.mark.parametrize("bad", ["", "Upper", "1abc", "a_b", "a-", "x" * 64, "../etc"])
def test_invalid_cluster_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidClusterNameError):
        validate_cluster_name(bad)


def test_valid_cluster_name() -> None:
    assert validate_cluster_name("launcher-1a2b") == "launcher-1a2b"


_WRITER = textwrap.dedent(
    """
    import sys
    from launcher.state import StateDB, PlacementRecord
    p = PlacementRecord("local", "local", None, "cpu", 1, False)
    with StateDB() as db:
        for i in range(40):
            db.create_cluster(f"{sys.argv[1]}-{i}", p)
            db.add_event(f"{sys.argv[1]}-{i}", "note", "x")
    """
)


def test_two_processes_writing_at_once_both_succeed(launcher_home: Path) -> None:
    env = {**os.environ, "LAUNCHER_HOME": str(launcher_home)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, name], env=env, stderr=subprocess.PIPE)
        for name in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    with StateDB() as db:
        assert len(db.list_clusters()) == 80


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from launcher.state import acquire_cluster_lock
    lock = acquire_cluster_lock("busy", purpose="launch")
    print("held", flush=True)
    time.sleep(60)
    """
)


def test_cluster_lock_refuses_second_holder_and_recovers_after_holder_dies(launcher_home: Path) -> None:
    env = {**os.environ, "LAUNCHER_HOME": str(launcher_home)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ClusterBusyError, match=rf"process {holder.pid} \(launch\)"):
            acquire_cluster_lock("busy")
        t0 = time.monotonic()
        with pytest.raises(ClusterBusyError):
            acquire_cluster_lock("busy", wait=0.3)
        assert time.monotonic() - t0 >= 0.3
        with cluster_lock("other"):  # other names are independent
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the kernel dropped the dead holder's lock: no stale-lock cleanup needed
    with cluster_lock("busy", purpose="down") as lock:
        assert lock.path.read_text().startswith(str(os.getpid()))


def test_lock_wait_succeeds_when_holder_releases() -> None:
    first = acquire_cluster_lock("w")
    import threading

    threading.Timer(0.2, first.release).start()
    with cluster_lock("w", wait=5):
        pass


@pytest.mark.sqlite_only
def test_core_migration_2_adds_the_launching_process_to_existing_clusters(
        launcher_home: Path) -> None:
    """A DB written before migration 2 (no launch_pid / launch_host): its clusters are
    kept, with no launching process known; new rows record the creating process."""
    path = launcher_home / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (component TEXT NOT NULL, version INTEGER NOT "
                 "NULL, description TEXT NOT NULL, applied_at REAL NOT NULL, PRIMARY KEY "
                 "(component, version))")
    for stmt in legacy.CORE_MIGRATIONS[0].statements:
        conn.execute(stmt)
    conn.execute("INSERT INTO schema_version VALUES ('core', 1, 'v1', 0)")
    conn.execute("INSERT INTO clusters (name, cloud, region, instance_type, num_nodes, use_spot,"
                 " status, launched_at, status_changed_at) VALUES ('old', 'local', 'local',"
                 " 'local-cpu', 1, 0, 'INIT', 1, 1)")
    conn.commit()
    conn.close()
    os.chmod(path, 0o600)
    with StateDB() as db:
        assert migrate.current_revision(db._conn) == migrate.HEAD
        assert db.query_one("SELECT MAX(version) FROM schema_version WHERE component = 'core'"
                            ) == (2,)
        old = db.require_cluster("old")
        assert (old.launch_pid, old.launch_host) == (None, None)
        new = db.create_cluster("new", PLACEMENT)
        assert new.launch_pid == os.getpid() and new.launch_host
        db.claim_launch("old")
        assert db.require_cluster("old").launch_pid == os.getpid()
