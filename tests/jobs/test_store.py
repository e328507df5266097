from __future__ import annotations

import sqlite3

import pytest

from launcher.jobs.state_machine import IllegalTransitionError
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import SCHEMA_VERSION, JobStore, ManagedJobNotFoundError


def test_schema_is_versioned_wal_and_explicit(launcher_home) -> None:
    st = JobStore()
    conn = sqlite3.connect(launcher_home / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM managed_jobs_schema_version").fetchone()[0] == (
        SCHEMA_VERSION)
    cols = {r[1]: r[2] for r in conn.execute("PRAGMA table_info(managed_jobs)")}
    assert cols["status"] == "TEXT" and cols["recoveries"] == "INTEGER"
    assert not any(t == "BLOB" for t in cols.values())
    # reopening is idempotent and keeps one version row
    st.close()
    JobStore().close()
    assert conn.execute("SELECT count(*) FROM managed_jobs_schema_version").fetchone()[0] == 1


def test_newer_schema_is_refused(launcher_home) -> None:
    JobStore().close()
    conn = sqlite3.connect(launcher_home / "state.db")
    conn.execute("UPDATE managed_jobs_schema_version SET version = 99")
    conn.commit()
    with pytest.raises(Exception, match="newer"):
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
    with pytest.raises(sqlite3.IntegrityError):
        st.add_attempt(j.id, 2, "mj-1-1", "initial")  # cluster names are unique
    st.update_attempt(j.id, 1, node_ids=("n0", "n1"), use_spot=True)
    a = st.attempt(j.id, 1)
    assert a.node_ids == ("n0", "n1") and a.use_spot is True
    with pytest.raises(ValueError):
        st.update_attempt(j.id, 1, cluster_name="other")


def test_v2_replace_intent_migrates_to_typed_columns(launcher_home) -> None:
    st = JobStore()
    job = st.add_job(name="a", task_yaml="run: x", task_source=None, strategy="FAILOVER",
                     max_restarts_on_errors=0, recover_on_exit_codes=())
    st.add_attempt(job.id, 1, "mj-1-1", "initial")
    st.add_attempt(job.id, 2, "mj-1-2", "preemption")
    st.close()
    # turn the DB back into v2: JSON intent, no typed columns
    conn = sqlite3.connect(launcher_home / "state.db")
    for col in ("replace_lost", "replace_at", "replace_reason"):
        conn.execute(f"ALTER TABLE managed_job_attempts DROP COLUMN {col}")
    for col in ("pipeline_id", "pipeline_name", "stage_index", "stage_count", "after_job_id"):
        conn.execute(f"ALTER TABLE managed_jobs DROP COLUMN {col}")  # v4 (pipelines)
    for col in ("deadline_at", "work_s", "restart_overhead_s", "progress", "policy"):
        conn.execute(f"ALTER TABLE managed_jobs DROP COLUMN {col}")  # v5 (deadline)
    for col in ("market", "switch_cluster"):
        conn.execute(f"ALTER TABLE managed_job_attempts DROP COLUMN {col}")
    conn.execute("DROP TABLE managed_job_deadline_log")
    conn.execute("UPDATE managed_jobs_schema_version SET version = 2")
    conn.execute("UPDATE managed_job_attempts SET preempted_at = 123.0, replace_intent = ? "
                 "WHERE attempt = 2", ('{"lost": ["n2"], "at": 123.0, "reason": "x", '
                                       '"old_job_id": 1}',))
    conn.commit()
    conn.close()
    st = JobStore()
    a1, a2 = st.attempts(job.id)
    assert not a1.replacing and a1.replace_at is None
    assert a2.replacing and a2.replace_at == 123.0  # recovered as an interrupted replacement
    cols = {r[1]: r[2] for r in sqlite3.connect(launcher_home / "state.db").execute(
        "PRAGMA table_info(managed_job_attempts)")}
    assert cols["replace_lost"] == "TEXT" and cols["replace_at"] == "REAL"
    a2 = st.update_attempt(job.id, 2, replace_lost=("n1", "n3"), replace_at=5.0)
    assert a2.replace_lost == ("n1", "n3") and a2.replace_at == 5.0
    st.close()
