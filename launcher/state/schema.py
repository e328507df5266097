"""The state DB's tables as SQLAlchemy Core metadata: the one description of the schema
that both engines (SQLite, PostgreSQL) share.

What the newest Alembic revision (launcher/state/migrations/versions) leaves in a DB;
tests/state/test_schema.py checks the two agree. Columns keep the names and meanings
they had in the hand-written SQLite schema (epoch seconds as floats, booleans as 0/1
integers, lists as comma-joined text) so the callers' SQL runs on both engines.
Timestamps are `Double` (PostgreSQL's REAL is single precision: seconds would be lost).
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
)

metadata = MetaData()

# Markers of one-time data changes (e.g. the "job-secrets" scrub, launcher/jobs/job_secrets.py)
# and, in DBs from before Alembic, the hand-written chains' versions (launcher/state/legacy.py).
schema_version = Table(
    "schema_version", metadata,
    Column("component", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("description", Text, nullable=False),
    Column("applied_at", Double, nullable=False),
    PrimaryKeyConstraint("component", "version"),
)

clusters = Table(
    "clusters", metadata,
    Column("name", Text, primary_key=True),
    Column("cloud", Text, nullable=False),
    Column("region", Text, nullable=False),
    Column("zone", Text),
    Column("instance_type", Text, nullable=False),
    Column("num_nodes", Integer, nullable=False),
    Column("use_spot", Integer, nullable=False),
    Column("accelerator", Text),
    Column("accelerator_count", Double, nullable=False, server_default="0"),
    Column("status", Text, nullable=False),
    Column("hourly_cost", Double, nullable=False, server_default="0"),
    Column("autostop_minutes", Double),
    Column("autostop_down", Integer, nullable=False, server_default="0"),
    Column("launched_at", Double, nullable=False),
    Column("status_changed_at", Double, nullable=False),
    Column("task_name", Text),
    Column("resources", Text, nullable=False, server_default=""),
    Column("ssh_key_path", Text),
    Column("owner", Text),
    Column("launch_pid", Integer),
    Column("launch_host", Text),
    Column("launched_by", Text),
    CheckConstraint("num_nodes >= 1", name="clusters_num_nodes"),
)

cluster_nodes = Table(
    "cluster_nodes", metadata,
    Column("cluster", Text, ForeignKey("clusters.name", ondelete="CASCADE"), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("internal_ip", Text, nullable=False),
    Column("external_ip", Text),
    Column("ssh_user", Text),
    Column("ssh_port", Integer, nullable=False, server_default="22"),
    Column("ssh_host_key", Text),
    Column("local_root", Text),
    PrimaryKeyConstraint("cluster", "rank"),
)

cluster_events = Table(
    "cluster_events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", Text, nullable=False),
    Column("ts", Double, nullable=False),
    Column("kind", Text, nullable=False),
    Column("cloud", Text),
    Column("message", Text, nullable=False),
    Index("cluster_events_by_cluster", "cluster", "id"),
    sqlite_autoincrement=True,
)

cost_ledger = Table(
    "cost_ledger", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", Text, nullable=False),
    Column("cloud", Text, nullable=False),
    Column("region", Text, nullable=False),
    Column("zone", Text),
    Column("instance_type", Text, nullable=False),
    Column("num_nodes", Integer, nullable=False),
    Column("use_spot", Integer, nullable=False),
    Column("hourly_cost", Double, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("ended_at", Double),
    Column("end_reason", Text),
    Column("owner", Text),
    Index("cost_ledger_by_cluster", "cluster", "ended_at"),
    sqlite_autoincrement=True,
)

cluster_health = Table(
    "cluster_health", metadata,
    Column("cluster", Text, primary_key=True),
    Column("launched_at", Double, nullable=False),
    Column("status", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("seen_at", Double, nullable=False),
)

managed_jobs = Table(
    "managed_jobs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("task_yaml", Text, nullable=False),
    Column("task_source", Text),
    Column("task_id", Text, nullable=False),
    Column("strategy", Text, nullable=False),
    Column("max_restarts_on_errors", Integer, nullable=False),
    Column("recover_on_exit_codes", Text, nullable=False),
    Column("submitted_at", Double, nullable=False),
    Column("started_at", Double),
    Column("ended_at", Double),
    Column("recoveries", Integer, nullable=False, server_default="0"),
    Column("restarts_on_errors", Integer, nullable=False, server_default="0"),
    Column("last_recovery_s", Double),
    Column("cancel_requested", Integer, nullable=False, server_default="0"),
    Column("failure_reason", Text),
    Column("exit_code", Integer),
    Column("updated_at", Double, nullable=False),
    Column("pipeline_id", Integer),
    Column("pipeline_name", Text),
    Column("stage_index", Integer),
    Column("stage_count", Integer),
    Column("after_job_id", Integer),
    Column("deadline_at", Double),
    Column("work_s", Double),
    Column("restart_overhead_s", Double),
    Column("progress", Text),
    Column("policy", Text),
    Column("launched_by", Text),
    Column("cancelled_by", Text),
    # the lease of the server replica working on the job (launcher/jobs/leases.py)
    Column("lock_holder", Text),
    Column("lock_token", Text),
    Column("lock_expires_at", Double),
    Index("managed_jobs_status", "status"),
    sqlite_autoincrement=True,
)

managed_job_attempts = Table(
    "managed_job_attempts", metadata,
    Column("job_id", Integer, ForeignKey("managed_jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("cluster_name", Text, nullable=False, unique=True),
    Column("cause", Text, nullable=False),
    Column("phase", Text, nullable=False),
    Column("cloud", Text),
    Column("region", Text),
    Column("zone", Text),
    Column("instance_type", Text),
    Column("num_nodes", Integer),
    Column("use_spot", Integer),
    Column("node_price", Double),
    Column("cluster_job_id", Integer),
    Column("checkpoint_dir", Text),
    Column("created_at", Double, nullable=False),
    Column("running_at", Double),
    Column("ended_at", Double),
    Column("outcome", Text),
    Column("exit_code", Integer),
    Column("preempted_at", Double),
    Column("recovery_s", Double),
    Column("work_lost_s", Double),
    Column("torn_down_at", Double),
    Column("node_ids", Text),
    Column("outcome_applied", Integer, nullable=False, server_default="0"),
    Column("outcome_reason", Text),
    Column("drain_until", Double),
    Column("replace_intent", Text),  # unused since the typed replace_* columns
    Column("gang_runs", Integer, nullable=False, server_default="1"),
    Column("replace_lost", Text),
    Column("replace_at", Double),
    Column("replace_reason", Text),
    Column("market", Text),
    Column("switch_cluster", Text),
    PrimaryKeyConstraint("job_id", "attempt"),
)

managed_job_events = Table(
    "managed_job_events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("managed_jobs.id"), nullable=False),
    Column("at", Double, nullable=False),
    Column("from_status", Text),
    Column("to_status", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("attempt", Integer),
    Index("managed_job_events_job", "job_id"),
    sqlite_autoincrement=True,
)

managed_job_blocks = Table(
    "managed_job_blocks", metadata,
    Column("job_id", Integer, ForeignKey("managed_jobs.id"), nullable=False),
    Column("cloud", Text, nullable=False),
    Column("region", Text),
    Column("zone", Text),
    Column("until", Double, nullable=False),
    Column("reason", Text, nullable=False),
)

managed_job_deadline_log = Table(
    "managed_job_deadline_log", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("managed_jobs.id"), nullable=False),
    Column("at", Double, nullable=False),
    Column("kind", Text, nullable=False),
    Column("tick", Integer),
    Column("mode", Text),
    Column("current", Text),
    Column("spot_available", Integer),
    Column("done_s", Double),
    Column("slack_s", Double),
    Column("restart_overhead_s", Double),
    Column("attempt", Integer),
    Column("reason", Text, nullable=False),
    Index("managed_job_deadline_log_job", "job_id"),
    sqlite_autoincrement=True,
)

api_users = Table(
    "api_users", metadata,
    Column("name", Text, primary_key=True),
    Column("role", Text, nullable=False),
    Column("token_sha256", Text, nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
    Column("rotated_at", Double),
    CheckConstraint("role IN ('admin', 'user')", name="api_users_role"),
)

api_audit = Table(
    "api_audit", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Double, nullable=False),
    Column("user", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False),
    sqlite_autoincrement=True,
)

api_requests = Table(
    "api_requests", metadata,
    Column("id", Text, primary_key=True),
    Column("user", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("ended_at", Double),
    Column("result", Text),
    Column("error", Text),
    Column("replica", Text),  # the server replica running it (launcher/jobs/leases.py)
)

# Who launched each cluster through the API server, kept after it is taken down (a
# user's cost includes clusters already gone: the dashboard, launcher/api/server_store.py).
api_cluster_launches = Table(
    "api_cluster_launches", metadata,
    Column("cluster", Text, nullable=False),
    Column("launched_at", Double, nullable=False),
    Column("user", Text, nullable=False),
    PrimaryKeyConstraint("cluster", "launched_at"),
)

# Each node's last reported state and health finding (launcher/state/node_state.py).
node_state = Table(
    "node_state", metadata,
    Column("cluster", Text, nullable=False),
    Column("launched_at", Double, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("seen_at", Double, nullable=False),
    Column("source", Text, nullable=False),
    CheckConstraint("kind IN ('state', 'health')", name="node_state_kind"),
    PrimaryKeyConstraint("cluster", "node_id", "kind"),
)

provision_attempts = Table(
    "provision_attempts", metadata,
    Column("cluster", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("token", Text, nullable=False),
    Column("cloud", Text, nullable=False),
    Column("region", Text, nullable=False),
    Column("zone", Text),
    Column("instance_type", Text, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("outcome", Text),
    Column("error_class", Text),
    Column("message", Text),
    Column("ended_at", Double),
    PrimaryKeyConstraint("cluster", "attempt"),
)

# Logs any server replica can serve (logstore.py): a stream ("request/<id>",
# "job/<id>/attempt-<n>.log"...) is its chunks in byte order; `start` is the chunk's byte
# offset in the stream, `size` its length.
log_chunks = Table(
    "log_chunks", metadata,
    Column("stream", Text, nullable=False),
    Column("start", Integer, nullable=False),
    Column("size", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("at", Double, nullable=False),
    PrimaryKeyConstraint("stream", "start"),
)

# The server replicas sharing one database (launcher/jobs/leases.py): each renews its
# row with its leases; `launcher api status` lists them.
server_replicas = Table(
    "server_replicas", metadata,
    Column("id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("heartbeat_at", Double, nullable=False),
)
