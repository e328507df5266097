"""A state DB written by the release before Alembic (tests/state/fixtures, made by
make_release_db.py with that release's code) opens with this one: migrated forward in
place, every row of every table still there, and usable through the typed APIs."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

from launcher.api.server_store import ServerStore
from launcher.jobs import deadline_store
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore
from launcher.state import migrate
from launcher.state.db import ClusterStatus, StateDB

FIXTURES = Path(__file__).with_name("fixtures")
EXPECTED = json.loads((FIXTURES / "release_state.json").read_text())


def _install(home: Path) -> Path:
    path = home / "state.db"
    shutil.copyfile(FIXTURES / "release_state.db", path)
    os.chmod(path, 0o600)
    return path


def _rows(path: Path, table: str) -> list[dict[str, object]]:
    conn = sqlite3.connect(path)
    try:
        cur = conn.execute(f"SELECT * FROM {table}")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.close()


def test_every_row_of_every_table_survives_the_migration(launcher_home: Path) -> None:
    path = _install(launcher_home)
    StateDB(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
        (migrate.HEAD,)]
    conn.close()
    for table, rows in EXPECTED.items():
        now = _rows(path, table)
        if table == "schema_version":  # the chains the file lacked were run to their end
            assert [r for r in now if r in rows] == rows
            assert {r["component"] for r in now if r not in rows} == {"provisioning"}
        else:  # columns and values unchanged (later revisions' new columns are empty)
            assert [{k: r[k] for k in old} for r, old in zip(now, rows, strict=True)] == rows, \
                table
            added = {k for r in now for k in r} - {k for r in rows for k in r}
            assert all(r[k] is None for r in now for k in added), table
    assert sum(len(r) for r in EXPECTED.values()) > 30


def test_the_migrated_db_answers_through_the_typed_apis(launcher_home: Path) -> None:
    path = _install(launcher_home)
    with StateDB(path) as db:
        names = [c.name for c in db.list_clusters()]
        assert sorted(names) == ["alpha", "beta", "mj-1-1"]
        alpha = db.require_cluster("alpha")
        assert alpha.status is ClusterStatus.UP and alpha.ssh_key_path == "/k/alpha"
        assert [n.node_id for n in db.get_nodes("alpha")] == ["n0", "n1"]
        assert db.get_nodes("alpha")[1].ssh_port == 2222
        beta = db.require_cluster("beta")
        assert (beta.autostop_minutes, beta.autostop_down, beta.use_spot) == (30.0, True, True)
        events = {c: len(db.events(c)) for c in names}
        assert sum(events.values()) == len(EXPECTED["cluster_events"])
        assert [e.kind for e in db.events("alpha")][-1] == "note"
        assert [(u.cluster, u.ended_at) for u in db.usage()] == [("beta", 2000.0)] or len(
            db.usage()) == len(EXPECTED["cost_ledger"])
        # new writes work on the old rows
        db.set_status("beta", ClusterStatus.UP, "started")
        db.create_cluster("gamma", db.cluster_info("alpha") and _placement())
    store = JobStore(path)
    try:
        jobs = store.jobs()
        assert [j.name for j in jobs] == ["one", "prep", "train", "dl"]
        one = jobs[0]
        assert one.status is S.RUNNING and one.recover_on_exit_codes == (3, 4)
        assert store.attempt(one.id, 1).node_ids == ("n0", "n1")
        assert len(store.blocks(one.id, now=0)) == 1
        train = jobs[2]
        assert train.after_job_id == jobs[1].id and train.pipeline_name == "pipe"
        dl = jobs[3]
        assert dl.deadline is not None and dl.deadline.progress == "reported"
        assert dl.cancel_requested
        assert deadline_store.log_rows(store, dl.id)[0].reason == "spot is cheaper"
        n_events = sum(len(store.events(j.id)) for j in jobs)
        assert n_events == len(EXPECTED["managed_job_events"])
        new = store.add_job(name="after", task_yaml="{}", task_source=None, strategy="FAILOVER",
                            max_restarts_on_errors=0, recover_on_exit_codes=())
        assert new.id == max(j.id for j in jobs) + 1
        store.transition(one.id, S.SUCCEEDED, "done")
    finally:
        store.close()
    with ServerStore(path) as srv:
        assert srv.authenticate("lk_fixture-token").name == "alice"  # type: ignore[union-attr]
        assert srv.audit()[0][1:] == ("alice", "launch", "alpha")
        assert srv.request("req-1").status == "SUCCEEDED"  # type: ignore[union-attr]
        assert srv.cluster_owners()["alpha"] == "alice"


def _placement():  # type: ignore[no-untyped-def]
    from launcher.state.db import PlacementRecord

    return PlacementRecord("local", "local", None, "cpu", 1, False)
