from __future__ import annotations

import os
import sqlite3

import pytest

from launcher.jobs.state_machine import IllegalTransitionError
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore, ManagedJobNotFoundError
from launcher.state import legacy, migrate
from launcher.state.files import StateError
from launcher.state.store import INTEGRITY_ERRORS

# every test runs on both engines (tests/conftest.py, db_engine)
pytestmark = pytest.mark.usefixtures("db_engine")


@pytest.mark.sqlite_only
def test_schema_is_at_head_wal_and_explicit(launcher_home) -> None:
    st = JobStore()
    conn = sqlite3.connect(launcher_home / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrate.HEAD,)]
    cols = {r[1]: r[2] for r in conn.execute("PRAGMA table_info(managed_jobs)")}
    assert cols["status"] == "TEXT" and cols["recoveries"] == "INTEGER"
    assert not any(t == "BLOB" for t in cols.values())
    # reopening is idempotent and keeps one version row
    st.close()
    JobStore().close()
    assert conn.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1


@pytest.mark.sqlite_only
def test_newer_schema_is_refused(launcher_home) -> None:
    JobStore().close()
    conn = sqlite3.connect(launcher_home / "state.db")
    conn.execute("UPDATE alembic_version SET version_num = 'f00d'")
    conn.commit()
    with pytest.raises(StateError, match="revision f00d, which this launcher does not know"):
        JobStore()


@pytest.mark.sqlite_only
def test_newer_legacy_jobs_schema_is_refused(launcher_home) -> None:
    """A file from before Alembic whose managed-jobs chain is past the last one known."""
    conn = sqlite3.connect(launcher_home / "state.db")
    conn.execute("CREATE TABLE managed_jobs_schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO managed_jobs_schema_version VALUES (99)")
    conn.commit()
    with pytest.raises(StateError, match="'managed-jobs' schema version 99, newer"):
        JobStore()


def test_job_roundtrip_and_task_id(launcher_home) -> None:
    st = JobStore()
    a = st.add_job(name="a", task_yaml="run: x", task_source="/t.yaml", strategy="FAILOVER",
                   max_restarts_on_errors=2, recover_on_exit_codes=(33, 34))
    b = st.add_job(name="b", task_yaml="run: y", task_source=None, strategy="EAGER_NEXT_REGION",
                   max_restarts_on_errors=0, recover_on_exit_codes=())
    assert a.recover_on_exit_codes == (33, 34) and b.recover_on_exit_codes == ()
    assert a.task_id != b.task_id and a.task_id.startswith(f"mj-{a.id}-")
    assert st.live_job_ids() == [a.id, b.id]
    st.transition(b.id, S.CANCELLED, "user")
    assert st.live_job_ids() == [a.id]
    with pytest.raises(ManagedJobNotFoundError):
        st.job(999)


def test_attempt_fields_and_transition_are_atomic(launcher_home) -> None:
    st = JobStore()
    j = st.add_job(name="a", task_yaml="run: x", task_source=None, strategy="FAILOVER",
                   max_restarts_on_errors=0, recover_on_exit_codes=())
    st.add_attempt(j.id, 1, "mj-1-1", "initial")
    with pytest.raises(IllegalTransitionError):
        # illegal: nothing of the attempt update may land
        st.transition(j.id, S.RUNNING, "x", attempt=1, attempt_fields={"phase": "RUNNING"})
    assert st.attempt(j.id, 1).phase == "PROVISIONING"
    with pytest.raises(INTEGRITY_ERRORS):
        st.add_attempt(j.id, 2, "mj-1-1", "initial")  # cluster names are unique
    st.update_attempt(j.id, 1, node_ids=("n0", "n1"), use_spot=True)
    a = st.attempt(j.id, 1)
    assert a.node_ids == ("n0", "n1") and a.use_spot is True
    with pytest.raises(ValueError):
        st.update_attempt(j.id, 1, cluster_name="other")


@pytest.mark.sqlite_only
def test_v2_replace_intent_migrates_to_typed_columns(launcher_home) -> None:
    # a file from before Alembic whose managed-jobs chain is at v2 (JSON intent, no
    # typed columns), written by that chain's own SQL
    conn = sqlite3.connect(launcher_home / "state.db")
    for script in legacy.JOBS_MIGRATIONS[:2]:
        conn.executescript(script)
    conn.execute("CREATE TABLE managed_jobs_schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO managed_jobs_schema_version VALUES (2)")
    conn.execute("INSERT INTO managed_jobs (id, name, status, task_yaml, task_id, strategy, "
                 "max_restarts_on_errors, recover_on_exit_codes, submitted_at, updated_at) "
                 "VALUES (1, 'a', 'PENDING', 'run: x', 'mj-1-0', 'FAILOVER', 0, '', 1, 1)")
    for n, cause in ((1, "initial"), (2, "preemption")):
        conn.execute("INSERT INTO managed_job_attempts (job_id, attempt, cluster_name, cause, "
                     "phase, created_at) VALUES (1, ?, ?, ?, 'PROVISIONING', 1)",
                     (n, f"mj-1-{n}", cause))
    conn.execute("UPDATE managed_job_attempts SET preempted_at = 123.0, replace_intent = ? "
                 "WHERE attempt = 2", ('{"lost": ["n2"], "at": 123.0, "reason": "x", '
                                       '"old_job_id": 1}',))
    conn.commit()
    conn.close()
    os.chmod(launcher_home / "state.db", 0o600)
    st = JobStore()
    a1, a2 = st.attempts(1)
    assert not a1.replacing and a1.replace_at is None
    assert a2.replacing and a2.replace_at == 123.0  # recovered as an interrupted replacement
    cols = {r[1]: r[2] for r in sqlite3.connect(launcher_home / "state.db").execute(
        "PRAGMA table_info(managed_job_attempts)")}
    assert cols["replace_lost"] == "TEXT" and cols["replace_at"] == "REAL"
    a2 = st.update_attempt(1, 2, replace_lost=("n1", "n3"), replace_at=5.0)
    assert a2.replace_lost == ("n1", "n3") and a2.replace_at == 5.0
    st.close()
