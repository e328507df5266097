"""DBs from before Alembic: bring the hand-written migration chains to their last versions.

Until the SQLAlchemy state layer, each component of the SQLite state DB kept its own
chain of SQL migrations: `schema_version` rows per component (core clusters, the API
server's tables, cluster health) and `managed_jobs_schema_version` for the managed
jobs. Their last versions together are exactly the Alembic baseline (migrations/
versions/0001_baseline.py). A file from such a release is upgraded once: every chain
it is behind on is run to its end here (so tables a component had not created yet
appear too), then it is stamped at the baseline and Alembic takes over. A chain
newer than the last one below means a newer launcher wrote the file: refused.

SQLite only (no PostgreSQL DB predates Alembic). Runs inside the caller's write
transaction. The SQL is frozen: it is history, never edited.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from launcher.state.files import StateError
from launcher.state.store import Connection, table_exists


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


CORE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "clusters, nodes, events, cost ledger",
        (
            """CREATE TABLE IF NOT EXISTS clusters (
                name TEXT PRIMARY KEY,
                cloud TEXT NOT NULL,
                region TEXT NOT NULL,
                zone TEXT,
                instance_type TEXT NOT NULL,
                num_nodes INTEGER NOT NULL CHECK (num_nodes >= 1),
                use_spot INTEGER NOT NULL,
                accelerator TEXT,
                accelerator_count REAL NOT NULL DEFAULT 0,
                status TEXT NOT NULL,
                hourly_cost REAL NOT NULL DEFAULT 0,
                autostop_minutes REAL,
                autostop_down INTEGER NOT NULL DEFAULT 0,
                launched_at REAL NOT NULL,
                status_changed_at REAL NOT NULL,
                task_name TEXT,
                resources TEXT NOT NULL DEFAULT '',
                ssh_key_path TEXT,
                owner TEXT
            )""",
            """CREATE TABLE IF NOT EXISTS cluster_nodes (
                cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
                rank INTEGER NOT NULL,
                node_id TEXT NOT NULL,
                internal_ip TEXT NOT NULL,
                external_ip TEXT,
                ssh_user TEXT,
                ssh_port INTEGER NOT NULL DEFAULT 22,
                ssh_host_key TEXT,
                local_root TEXT,
                PRIMARY KEY (cluster, rank)
            )""",
            """CREATE TABLE IF NOT EXISTS cluster_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                cluster TEXT NOT NULL,
                ts REAL NOT NULL,
                kind TEXT NOT NULL,
                cloud TEXT,
                message TEXT NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS cluster_events_by_cluster ON cluster_events (cluster, id)",
            """CREATE TABLE IF NOT EXISTS cost_ledger (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                cluster TEXT NOT NULL,
                cloud TEXT NOT NULL,
                region TEXT NOT NULL,
                zone TEXT,
                instance_type TEXT NOT NULL,
                num_nodes INTEGER NOT NULL,
                use_spot INTEGER NOT NULL,
                hourly_cost REAL NOT NULL,
                started_at REAL NOT NULL,
                ended_at REAL,
                end_reason TEXT,
                owner TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS cost_ledger_by_cluster ON cost_ledger (cluster, ended_at)",
        ),
    ),
    Migration(
        2,
        "clusters: the pid and host of the process bringing the cluster up",
        (
            "ALTER TABLE clusters ADD COLUMN launch_pid INTEGER",
            "ALTER TABLE clusters ADD COLUMN launch_host TEXT",
        ),
    ),
)


JOBS_MIGRATIONS: tuple[str, ...] = (
    # 1: initial schema
    """
    CREATE TABLE IF NOT EXISTS managed_jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        task_yaml TEXT NOT NULL,
        task_source TEXT,
        task_id TEXT NOT NULL,
        strategy TEXT NOT NULL,
        max_restarts_on_errors INTEGER NOT NULL,
        recover_on_exit_codes TEXT NOT NULL,
        submitted_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        recoveries INTEGER NOT NULL DEFAULT 0,
        restarts_on_errors INTEGER NOT NULL DEFAULT 0,
        last_recovery_s REAL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        failure_reason TEXT,
        exit_code INTEGER,
        updated_at REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS managed_jobs_status ON managed_jobs(status);
    CREATE TABLE IF NOT EXISTS managed_job_attempts (
        job_id INTEGER NOT NULL REFERENCES managed_jobs(id),
        attempt INTEGER NOT NULL,
        cluster_name TEXT NOT NULL UNIQUE,
        cause TEXT NOT NULL,
        phase TEXT NOT NULL,
        cloud TEXT,
        region TEXT,
        zone TEXT,
        instance_type TEXT,
        num_nodes INTEGER,
        use_spot INTEGER,
        node_price REAL,
        cluster_job_id INTEGER,
        checkpoint_dir TEXT,
        created_at REAL NOT NULL,
        running_at REAL,
        ended_at REAL,
        outcome TEXT,
        exit_code INTEGER,
        preempted_at REAL,
        recovery_s REAL,
        work_lost_s REAL,
        torn_down_at REAL,
        node_ids TEXT,
        outcome_applied INTEGER NOT NULL DEFAULT 0,
        outcome_reason TEXT,
        drain_until REAL,
        PRIMARY KEY (job_id, attempt)
    );
    CREATE TABLE IF NOT EXISTS managed_job_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES managed_jobs(id),
        at REAL NOT NULL,
        from_status TEXT,
        to_status TEXT NOT NULL,
        reason TEXT NOT NULL,
        attempt INTEGER
    );
    CREATE INDEX IF NOT EXISTS managed_job_events_job ON managed_job_events(job_id);
    CREATE TABLE IF NOT EXISTS managed_job_blocks (
        job_id INTEGER NOT NULL REFERENCES managed_jobs(id),
        cloud TEXT NOT NULL,
        region TEXT,
        zone TEXT,
        until REAL NOT NULL,
        reason TEXT NOT NULL
    );
    """,
    # v2: in-place node replacement is recorded before it starts (crash safety), and
    # every gang run of an attempt keeps its logs.
    """
    ALTER TABLE managed_job_attempts ADD COLUMN replace_intent TEXT;
    ALTER TABLE managed_job_attempts ADD COLUMN gang_runs INTEGER NOT NULL DEFAULT 1
    """,
    # v3: the replacement intent gets typed columns (v2's JSON `replace_intent` column is
    # left unused). An intent pending at upgrade keeps its time (= the attempt's
    # preempted_at, written in the same transaction) and is recovered as interrupted.
    """
    ALTER TABLE managed_job_attempts ADD COLUMN replace_lost TEXT;
    ALTER TABLE managed_job_attempts ADD COLUMN replace_at REAL;
    ALTER TABLE managed_job_attempts ADD COLUMN replace_reason TEXT;
    UPDATE managed_job_attempts SET replace_at = COALESCE(preempted_at, created_at),
        replace_lost = '', replace_intent = NULL WHERE replace_intent IS NOT NULL
    """,
    # v4: pipelines (issue 12). Every stage is a job; `pipeline_id` is the first stage's
    # id, `stage_index` 0-based of `stage_count`; `after_job_id` is the stage that must
    # have SUCCEEDED before this one starts. NULL for a plain managed job.
    """
    ALTER TABLE managed_jobs ADD COLUMN pipeline_id INTEGER;
    ALTER TABLE managed_jobs ADD COLUMN pipeline_name TEXT;
    ALTER TABLE managed_jobs ADD COLUMN stage_index INTEGER;
    ALTER TABLE managed_jobs ADD COLUMN stage_count INTEGER;
    ALTER TABLE managed_jobs ADD COLUMN after_job_id INTEGER
    """,
    # v5: the DEADLINE strategy (issue 13). The job's deadline settings; per attempt the
    # market the policy asked for and an ON_DEMAND -> SPOT switch's second cluster (its
    # intent, written before the cloud is asked); the decisions log (deadline_store.py).
    """
    ALTER TABLE managed_jobs ADD COLUMN deadline_at REAL;
    ALTER TABLE managed_jobs ADD COLUMN work_s REAL;
    ALTER TABLE managed_jobs ADD COLUMN restart_overhead_s REAL;
    ALTER TABLE managed_jobs ADD COLUMN progress TEXT;
    ALTER TABLE managed_jobs ADD COLUMN policy TEXT;
    ALTER TABLE managed_job_attempts ADD COLUMN market TEXT;
    ALTER TABLE managed_job_attempts ADD COLUMN switch_cluster TEXT;
    CREATE TABLE IF NOT EXISTS managed_job_deadline_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES managed_jobs(id),
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        tick INTEGER,
        mode TEXT,
        current TEXT,
        spot_available INTEGER,
        done_s REAL,
        slack_s REAL,
        restart_overhead_s REAL,
        attempt INTEGER,
        reason TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS managed_job_deadline_log_job ON managed_job_deadline_log(job_id)
    """,
)


SERVER_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "api server: users, owners of clusters and managed jobs, audit, requests",
        (
            """CREATE TABLE IF NOT EXISTS api_users (
                name TEXT PRIMARY KEY,
                role TEXT NOT NULL CHECK (role IN ('admin', 'user')),
                token_sha256 TEXT NOT NULL UNIQUE,
                created_at REAL NOT NULL,
                rotated_at REAL
            )""",
            # who launched a cluster / a managed job, and who cancelled the job
            "ALTER TABLE clusters ADD COLUMN launched_by TEXT",
            "ALTER TABLE managed_jobs ADD COLUMN launched_by TEXT",
            "ALTER TABLE managed_jobs ADD COLUMN cancelled_by TEXT",
            """CREATE TABLE IF NOT EXISTS api_audit (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                at REAL NOT NULL,
                user TEXT NOT NULL,
                action TEXT NOT NULL,
                target TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS api_requests (
                id TEXT PRIMARY KEY,
                user TEXT NOT NULL,
                kind TEXT NOT NULL,
                status TEXT NOT NULL,
                created_at REAL NOT NULL,
                ended_at REAL,
                result TEXT,
                error TEXT
            )""",
        ),
    ),
)



HEALTH_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "what status --refresh last found wrong per cluster",
        (
            """CREATE TABLE IF NOT EXISTS cluster_health (
                cluster TEXT PRIMARY KEY,
                launched_at REAL NOT NULL,
                status TEXT NOT NULL,
                reason TEXT NOT NULL,
                seen_at REAL NOT NULL
            )""",
        ),
    ),
)



PROVISIONING_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "provisioning attempts with their idempotency tokens",
        (
            """CREATE TABLE IF NOT EXISTS provision_attempts (
                cluster TEXT NOT NULL,
                attempt INTEGER NOT NULL,
                token TEXT NOT NULL,
                cloud TEXT NOT NULL,
                region TEXT NOT NULL,
                zone TEXT,
                instance_type TEXT NOT NULL,
                started_at REAL NOT NULL,
                outcome TEXT,
                error_class TEXT,
                message TEXT,
                ended_at REAL,
                PRIMARY KEY (cluster, attempt)
            )""",
        ),
    ),
)



# Chains in `schema_version`, in the order the old code applied them (the server's
# alters managed_jobs, so it runs after the jobs chain).
_CHAINS: tuple[tuple[str, tuple[Migration, ...]], ...] = (
    ("server", SERVER_MIGRATIONS),
    ("cluster-health", HEALTH_MIGRATIONS),
    ("provisioning", PROVISIONING_MIGRATIONS),
)


def is_legacy(conn: Connection) -> bool:
    """Whether the DB holds tables from a release before Alembic (and no Alembic stamp)."""
    return any(table_exists(conn, t) for t in (
        "schema_version", "managed_jobs_schema_version", "clusters", "managed_jobs"))


def upgrade(conn: Connection, label: str) -> None:
    """Run every old chain to its end (in the caller's write transaction). Raises
    StateError when a chain is newer than this launcher knows."""
    _chain(conn, label, "core", CORE_MIGRATIONS)
    _jobs_chain(conn, label)
    for component, chain in _CHAINS:
        _chain(conn, label, component, chain)


def _newer(label: str, what: str, found: int, newest: int) -> StateError:
    return StateError(
        f"The state DB at {label} has '{what}' schema version {found}, newer than this "
        f"launcher knows ({newest}): a newer launcher wrote it. Upgrade launcher; the DB "
        "is never downgraded.")


def _chain(conn: Connection, label: str, component: str, chain: tuple[Migration, ...]) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " component TEXT NOT NULL, version INTEGER NOT NULL, description TEXT NOT NULL,"
        " applied_at REAL NOT NULL, PRIMARY KEY (component, version))")
    row = conn.execute("SELECT MAX(version) FROM schema_version WHERE component = ?",
                       (component,)).fetchone()
    current = int(row[0]) if row and row[0] is not None else 0
    newest = chain[-1].version
    if current > newest:
        raise _newer(label, component, current, newest)
    for m in chain:
        if m.version <= current:
            continue
        for stmt in m.statements:
            conn.execute(stmt)
        conn.execute("INSERT INTO schema_version (component, version, description, applied_at)"
                     " VALUES (?, ?, ?, ?)", (component, m.version, m.description, time.time()))


def _jobs_chain(conn: Connection, label: str) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS managed_jobs_schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM managed_jobs_schema_version").fetchone()
    current = int(row[0]) if row else 0
    newest = len(JOBS_MIGRATIONS)
    if current > newest:
        raise _newer(label, "managed-jobs", current, newest)
    for script in JOBS_MIGRATIONS[current:]:
        for stmt in script.split(";"):
            if stmt.strip():
                conn.execute(stmt)
    if row is None:
        conn.execute("INSERT INTO managed_jobs_schema_version VALUES (?)", (newest,))
    else:
        conn.execute("UPDATE managed_jobs_schema_version SET version = ?", (newest,))
