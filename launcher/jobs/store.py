"""Managed-job tables in the shared state DB ($LAUNCHER_HOME/state.db).

Our own migration track (`managed_jobs_schema_version`), WAL, explicit columns,
no pickles. Every status change writes the job row and its event row in one
transaction, after `check_transition` allowed it.

Thread-safety: one `JobStore` per thread (it owns one connection to the state store,
launcher.state.store).
Several processes (the controller and CLIs) may use the DB at once: writers
take `BEGIN IMMEDIATE` and wait up to `busy_timeout`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import LauncherError
from launcher.jobs import job_secrets, paths
from launcher.jobs.state_machine import (
    IllegalTransitionError,
    ManagedJobStatus,
    check_transition,
)
from launcher.state import files as state_files
from launcher.state import store


class ManagedJobNotFoundError(LauncherError):
    exit_code = 4

    def __init__(self, job_id: int) -> None:
        super().__init__(f"No managed job with id {job_id} (see `launcher jobs queue`).")
        self.job_id = job_id


_MIGRATIONS: tuple[str, ...] = (
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

SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(frozen=True)
class DeadlineSpec:
    """A DEADLINE job's settings, in seconds: the absolute deadline (epoch), the work the
    job needs, the restart overhead (None: estimated from the job's history), the progress
    source ("wall" | "reported") and the launcher.spot policy name."""

    deadline_at: float
    work_s: float
    restart_overhead_s: float | None = None
    progress: str = "wall"
    policy: str = "launcher"


@dataclass(frozen=True)
class JobRow:
    id: int
    name: str
    status: ManagedJobStatus
    task_yaml: str
    task_source: str | None
    task_id: str
    strategy: str
    max_restarts_on_errors: int
    recover_on_exit_codes: tuple[int, ...]
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    recoveries: int
    restarts_on_errors: int
    last_recovery_s: float | None
    cancel_requested: bool
    failure_reason: str | None
    exit_code: int | None
    updated_at: float
    # pipelines (v4): None for a plain managed job
    pipeline_id: int | None = None
    pipeline_name: str | None = None
    stage_index: int | None = None
    stage_count: int | None = None
    after_job_id: int | None = None
    # the DEADLINE strategy (v5): None for other jobs
    deadline: DeadlineSpec | None = None


@dataclass(frozen=True)
class StageSpec:
    """One stage for `JobStore.add_pipeline`: `add_job`'s keyword arguments."""

    name: str
    task_yaml: str
    task_source: str | None
    strategy: str
    max_restarts_on_errors: int
    recover_on_exit_codes: Sequence[int]
    secrets: Mapping[str, str] | None = None
    deadline: DeadlineSpec | None = None


class AttemptPhase:
    PROVISIONING = "PROVISIONING"  # recorded before the cloud is asked for anything
    RUNNING = "RUNNING"  # cluster up, job submitted
    ENDED = "ENDED"  # the job on this cluster is over (see outcome)


@dataclass(frozen=True)
class AttemptRow:
    job_id: int
    attempt: int
    cluster_name: str
    cause: str  # initial | preemption | exit-code | error-restart
    phase: str
    cloud: str | None
    region: str | None
    zone: str | None
    instance_type: str | None
    num_nodes: int | None
    use_spot: bool | None
    node_price: float | None
    cluster_job_id: int | None
    checkpoint_dir: str | None
    created_at: float
    running_at: float | None
    ended_at: float | None
    outcome: str | None
    exit_code: int | None
    preempted_at: float | None
    recovery_s: float | None
    work_lost_s: float | None
    torn_down_at: float | None
    node_ids: tuple[str, ...]
    outcome_applied: bool
    outcome_reason: str | None
    drain_until: float | None  # set while a noticed attempt drains (PREEMPTED, still RUNNING)
    # The in-place replacement intent, set while lost nodes are replaced (written before
    # `replace_nodes`, cleared after): which nodes, when they were lost, and why.
    replace_lost: tuple[str, ...] = ()
    replace_at: float | None = None  # not None <=> a replacement is in progress
    replace_reason: str | None = None
    gang_runs: int = 1  # gang runs of this attempt (1 + in-place replacements)
    market: str | None = None  # DEADLINE jobs: "spot" | "on_demand", the policy's choice
    switch_cluster: str | None = None  # an ON_DEMAND -> SPOT switch's cluster (its intent)

    @property
    def where(self) -> str:
        return "/".join(p for p in (self.cloud, self.region, self.zone) if p) or "?"

    @property
    def replacing(self) -> bool:
        """An in-place node replacement was started and not finished."""
        return self.replace_at is not None


@dataclass(frozen=True)
class EventRow:
    id: int
    job_id: int
    at: float
    from_status: str | None
    to_status: str
    reason: str
    attempt: int | None


@dataclass(frozen=True)
class BlockRow:
    job_id: int
    cloud: str
    region: str | None
    zone: str | None
    until: float
    reason: str


_JOB_COLS = (
    "id, name, status, task_yaml, task_source, task_id, strategy, max_restarts_on_errors, "
    "recover_on_exit_codes, submitted_at, started_at, ended_at, recoveries, restarts_on_errors, "
    "last_recovery_s, cancel_requested, failure_reason, exit_code, updated_at, pipeline_id, "
    "pipeline_name, stage_index, stage_count, after_job_id, deadline_at, work_s, "
    "restart_overhead_s, progress, policy"
)
_ATTEMPT_COLS = (
    "job_id, attempt, cluster_name, cause, phase, cloud, region, zone, instance_type, num_nodes, "
    "use_spot, node_price, cluster_job_id, checkpoint_dir, created_at, running_at, ended_at, "
    "outcome, exit_code, preempted_at, recovery_s, work_lost_s, torn_down_at, node_ids, "
    "outcome_applied, outcome_reason, drain_until, gang_runs, replace_lost, replace_at, "
    "replace_reason, market, switch_cluster"
)
# Attempt columns the controller may update after insertion.
_ATTEMPT_MUTABLE = frozenset(_ATTEMPT_COLS.replace(" ", "").split(",")) - {
    "job_id",
    "attempt",
    "cluster_name",
    "cause",
    "created_at",
}
_JOB_MUTABLE = frozenset(
    {
        "started_at",
        "ended_at",
        "recoveries",
        "restarts_on_errors",
        "last_recovery_s",
        "failure_reason",
        "exit_code",
    }
)


def _attempt_fields(fields: dict[str, object]) -> dict[str, object]:
    bad = set(fields) - _ATTEMPT_MUTABLE
    if bad:
        raise ValueError(f"not updatable attempt columns: {sorted(bad)}")
    out = dict(fields)
    for k in ("node_ids", "replace_lost"):
        if k in out and not isinstance(out[k], str | None):
            out[k] = ",".join(str(n) for n in out[k])  # type: ignore[attr-defined]
    if "use_spot" in out and isinstance(out["use_spot"], bool):
        out["use_spot"] = int(out["use_spot"])
    return out


def _job(r: store.Row) -> JobRow:
    codes = tuple(int(c) for c in r["recover_on_exit_codes"].split(",") if c)
    return JobRow(
        id=r["id"],
        name=r["name"],
        status=ManagedJobStatus(r["status"]),
        task_yaml=r["task_yaml"],
        task_source=r["task_source"],
        task_id=r["task_id"],
        strategy=r["strategy"],
        max_restarts_on_errors=r["max_restarts_on_errors"],
        recover_on_exit_codes=codes,
        submitted_at=r["submitted_at"],
        started_at=r["started_at"],
        ended_at=r["ended_at"],
        recoveries=r["recoveries"],
        restarts_on_errors=r["restarts_on_errors"],
        last_recovery_s=r["last_recovery_s"],
        cancel_requested=bool(r["cancel_requested"]),
        failure_reason=r["failure_reason"],
        exit_code=r["exit_code"],
        updated_at=r["updated_at"],
        pipeline_id=r["pipeline_id"],
        pipeline_name=r["pipeline_name"],
        stage_index=r["stage_index"],
        stage_count=r["stage_count"],
        after_job_id=r["after_job_id"],
        deadline=None if r["deadline_at"] is None else DeadlineSpec(
            r["deadline_at"], r["work_s"], r["restart_overhead_s"], r["progress"] or "wall",
            r["policy"] or "launcher"),
    )


def _attempt(r: store.Row) -> AttemptRow:
    return AttemptRow(
        job_id=r["job_id"],
        attempt=r["attempt"],
        cluster_name=r["cluster_name"],
        cause=r["cause"],
        phase=r["phase"],
        cloud=r["cloud"],
        region=r["region"],
        zone=r["zone"],
        instance_type=r["instance_type"],
        num_nodes=r["num_nodes"],
        use_spot=None if r["use_spot"] is None else bool(r["use_spot"]),
        node_price=r["node_price"],
        cluster_job_id=r["cluster_job_id"],
        checkpoint_dir=r["checkpoint_dir"],
        created_at=r["created_at"],
        running_at=r["running_at"],
        ended_at=r["ended_at"],
        outcome=r["outcome"],
        exit_code=r["exit_code"],
        preempted_at=r["preempted_at"],
        recovery_s=r["recovery_s"],
        work_lost_s=r["work_lost_s"],
        torn_down_at=r["torn_down_at"],
        node_ids=tuple(n for n in (r["node_ids"] or "").split(",") if n),
        outcome_applied=bool(r["outcome_applied"]),
        outcome_reason=r["outcome_reason"],
        drain_until=r["drain_until"],
        gang_runs=r["gang_runs"],
        replace_lost=tuple(n for n in (r["replace_lost"] or "").split(",") if n),
        replace_at=r["replace_at"],
        replace_reason=r["replace_reason"],
        market=r["market"],
        switch_cluster=r["switch_cluster"],
    )


class JobStore:
    """Typed access to the managed-job tables. Creates/migrates them on open (idempotent)."""

    def __init__(self, db_path: Path | str | None = None) -> None:
        path = Path(db_path) if db_path is not None else paths.state_db_path()
        self.path = path
        try:
            self._conn = store.connect(path, timeout=30.0, named_rows=True,
                                       check_same_thread=False)
        except state_files.StateError:
            raise
        except store.STORAGE_ERRORS as exc:
            raise store.open_error(path, exc) from exc
        try:
            self._conn.execute("PRAGMA busy_timeout = 30000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA secure_delete = ON")  # scrubbed secrets leave no trace
            self._migrate()
            state_files.mark_created(path)
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, store.STORAGE_ERRORS):
                raise store.open_error(path, exc) from exc
            raise

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[store.Connection]:
        with store.immediate(self._conn) as c:
            yield c
        state_files.maybe_backup(self._conn, self.path)

    def _migrate(self) -> None:
        """Apply the managed-jobs migrations, then the secrets scrub (once per DB). Backs
        the DB up after migrating an existing one."""
        upgraded = False
        with self._tx() as c:
            c.execute(
                "CREATE TABLE IF NOT EXISTS managed_jobs_schema_version (version INTEGER NOT NULL)"
            )
            row = c.execute("SELECT version FROM managed_jobs_schema_version").fetchone()
            current = row["version"] if row else 0
            if current > SCHEMA_VERSION:
                raise LauncherError(
                    f"The state DB's managed-jobs schema (v{current}) is newer than this "
                    f"launcher (v{SCHEMA_VERSION}); upgrade launcher."
                )
            for script in _MIGRATIONS[current:]:
                for stmt in script.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
            if row is None:
                c.execute("INSERT INTO managed_jobs_schema_version VALUES (?)", (SCHEMA_VERSION,))
            elif current != SCHEMA_VERSION:
                c.execute("UPDATE managed_jobs_schema_version SET version = ?", (SCHEMA_VERSION,))
                upgraded = True
        if job_secrets.scrub_needed(self._conn):
            with self._tx() as c:
                scrubbed = job_secrets.scrub_task_yaml(c, self.path.parent)
            if scrubbed:
                # old pages and older backups held the values: rewrite, start backups anew
                self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                state_files.backup_now(self._conn, self.path, drop_existing=True)
                upgraded = False
        if upgraded:
            state_files.backup_now(self._conn, self.path)

    # ---- jobs -------------------------------------------------------------------------

    def add_job(
        self,
        *,
        name: str,
        task_yaml: str,
        task_source: str | None,
        strategy: str,
        max_restarts_on_errors: int,
        recover_on_exit_codes: Sequence[int],
        task_id_prefix: str = "mj",
        secrets: Mapping[str, str] | None = None,
        deadline: DeadlineSpec | None = None,
    ) -> JobRow:
        """Insert a PENDING job (with its first event). Returns the row.

        `task_yaml` must not hold secret values: give them as `secrets`, kept in the
        job's private file (job_secrets.py) until the job ends, read by `secrets()`."""
        spec = StageSpec(name, task_yaml, task_source, strategy, max_restarts_on_errors,
                         recover_on_exit_codes, secrets, deadline)
        with self._tx() as c:
            job_id = self._insert_job(c, spec, task_id_prefix)
        return self.job(job_id)

    def add_pipeline(
        self, name: str, stages: Sequence[StageSpec], task_ids_envs: Sequence[str] = ()
    ) -> list[JobRow]:
        """Insert every stage of a pipeline in one transaction, each a PENDING job that
        waits for the one before it (`after_job_id`); the first stage's id is the
        pipeline's id. Every name in `task_ids_envs` becomes an env of every stage (in
        its task JSON's `envs`) holding all stages' task ids, one per line, in order
        (SkyPilot's SKYPILOT_TASK_IDS). Returns the rows in stage order."""
        ids: list[int] = []
        with self._tx() as c:
            for index, spec in enumerate(stages):
                job_id = self._insert_job(c, spec, "mj")
                c.execute(
                    "UPDATE managed_jobs SET pipeline_id = ?, pipeline_name = ?, stage_index = ?, "
                    "stage_count = ?, after_job_id = ? WHERE id = ?",
                    (ids[0] if ids else job_id, name, index, len(stages),
                     ids[-1] if ids else None, job_id),
                )
                ids.append(job_id)
            if task_ids_envs:
                marks = ",".join("?" * len(ids))
                rows = c.execute(f"SELECT id, task_id, task_yaml FROM managed_jobs "
                                 f"WHERE id IN ({marks}) ORDER BY id", ids).fetchall()
                joined = "\n".join(r["task_id"] for r in rows)
                for r in rows:
                    task = json.loads(r["task_yaml"])
                    envs = task.setdefault("envs", {})
                    envs.update(dict.fromkeys(task_ids_envs, joined))
                    c.execute("UPDATE managed_jobs SET task_yaml = ? WHERE id = ?",
                              (json.dumps(task), r["id"]))
        return [self.job(i) for i in ids]

    def _insert_job(self, c: store.Connection, spec: StageSpec, task_id_prefix: str) -> int:
        """The INSERT of `add_job` (row, task id, secrets file, first event) inside the
        caller's transaction. Returns the new job's id."""
        now = time.time()
        codes = ",".join(str(int(x)) for x in spec.recover_on_exit_codes)
        cur = c.execute(
            "INSERT INTO managed_jobs (name, status, task_yaml, task_source, task_id, strategy, "
            "max_restarts_on_errors, recover_on_exit_codes, submitted_at, updated_at) "
            "VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?)",
            (spec.name, ManagedJobStatus.PENDING.value, spec.task_yaml, spec.task_source,
             spec.strategy, spec.max_restarts_on_errors, codes, now, now),
        )
        job_id = int(cur.lastrowid or 0)
        if spec.deadline is not None:
            d = spec.deadline
            c.execute("UPDATE managed_jobs SET deadline_at = ?, work_s = ?, restart_overhead_s = ?, "
                      "progress = ?, policy = ? WHERE id = ?",
                      (d.deadline_at, d.work_s, d.restart_overhead_s, d.progress, d.policy,
                       job_id))
        # Stable across recoveries; unique even if the DB is recreated (time suffix).
        task_id = f"{task_id_prefix}-{job_id}-{int(now * 1000):x}"
        c.execute("UPDATE managed_jobs SET task_id = ? WHERE id = ?", (task_id, job_id))
        job_secrets.save(self.path.parent, job_id, spec.secrets or {})  # before the commit
        c.execute(
            "INSERT INTO managed_job_events (job_id, at, from_status, to_status, reason) "
            "VALUES (?, ?, NULL, ?, ?)",
            (job_id, now, ManagedJobStatus.PENDING.value, "submitted"),
        )
        return job_id

    def job(self, job_id: int) -> JobRow:
        """Raises ManagedJobNotFoundError."""
        r = self._conn.execute(
            f"SELECT {_JOB_COLS} FROM managed_jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if r is None:
            raise ManagedJobNotFoundError(job_id)
        return _job(r)

    def jobs(self, *, live_only: bool = False) -> list[JobRow]:
        q = f"SELECT {_JOB_COLS} FROM managed_jobs"
        if live_only:
            terminal = ",".join(f"'{s.value}'" for s in ManagedJobStatus if s.is_terminal)
            q += f" WHERE status NOT IN ({terminal})"
        return [_job(r) for r in self._conn.execute(q + " ORDER BY id")]

    def live_job_ids(self) -> list[int]:
        terminal = ",".join(f"'{s.value}'" for s in ManagedJobStatus if s.is_terminal)
        return [
            r[0]
            for r in self._conn.execute(
                f"SELECT id FROM managed_jobs WHERE status NOT IN ({terminal}) ORDER BY id"
            )
        ]

    def cancel_requested_ids(self) -> set[int]:
        return {
            r[0]
            for r in self._conn.execute("SELECT id FROM managed_jobs WHERE cancel_requested = 1")
        }

    def transition(
        self,
        job_id: int,
        target: ManagedJobStatus | None,
        reason: str,
        *,
        attempt: int | None = None,
        expect: ManagedJobStatus | None = None,
        attempt_fields: dict[str, object] | None = None,
        **fields: object,
    ) -> JobRow:
        """Move the job to `target` and write the event row, atomically.

        `target=None` records an event without a status change (from == to).
        `fields` are job columns and `attempt_fields` columns of attempt `attempt`
        to set in the same transaction. Raises IllegalTransitionError when the state
        machine forbids it (or when `expect` is given and the status differs).
        """
        bad = set(fields) - _JOB_MUTABLE
        if bad:
            raise ValueError(f"not updatable job columns: {sorted(bad)}")
        afields = _attempt_fields(attempt_fields or {})
        if afields and attempt is None:
            raise ValueError("attempt_fields need attempt=")
        now = time.time()
        with self._tx() as c:
            r = c.execute("SELECT status FROM managed_jobs WHERE id = ?", (job_id,)).fetchone()
            if r is None:
                raise ManagedJobNotFoundError(job_id)
            current = ManagedJobStatus(r["status"])
            new = current if target is None else target
            if expect is not None and current != expect:
                raise IllegalTransitionError(job_id, current, new)
            if target is not None:
                check_transition(job_id, current, target)
            sets = ", ".join(f"{k} = ?" for k in fields)
            c.execute(
                f"UPDATE managed_jobs SET status = ?, updated_at = ?{', ' + sets if sets else ''} "
                "WHERE id = ?",
                (new.value, now, *fields.values(), job_id),
            )
            if afields:
                asets = ", ".join(f"{k} = ?" for k in afields)
                c.execute(
                    f"UPDATE managed_job_attempts SET {asets} WHERE job_id = ? AND attempt = ?",
                    (*afields.values(), job_id, attempt),
                )
            c.execute(
                "INSERT INTO managed_job_events (job_id, at, from_status, to_status, reason, "
                "attempt) VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, now, current.value, new.value, reason, attempt),
            )
        if new.is_terminal:
            job_secrets.forget(self.path.parent, job_id)
        return self.job(job_id)

    def secrets(self, job_id: int) -> dict[str, str] | None:
        """The job's secret values (None: it has none stored; deleted once it ended)."""
        return job_secrets.load(self.path.parent, job_id)

    def forget_ended_secrets(self) -> list[int]:
        """Delete the secrets files of jobs that are no longer live (left behind by a
        crash between a job's end and the file's deletion). Returns their ids."""
        return job_secrets.forget_all_but(self.path.parent, self.live_job_ids())

    def update_job(self, job_id: int, **fields: object) -> None:
        """Set non-status columns (counters, reasons). Not a transition: no event row."""
        bad = set(fields) - _JOB_MUTABLE
        if bad:
            raise ValueError(f"not updatable job columns: {sorted(bad)}")
        if not fields:
            return
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as c:
            c.execute(
                f"UPDATE managed_jobs SET {sets}, updated_at = ? WHERE id = ?",
                (*fields.values(), time.time(), job_id),
            )

    def request_cancel(self, job_id: int) -> JobRow:
        """Flag the job for cancellation (the controller acts on it). Idempotent."""
        with self._tx() as c:
            cur = c.execute(
                "UPDATE managed_jobs SET cancel_requested = 1, updated_at = ? WHERE id = ?",
                (time.time(), job_id),
            )
            if cur.rowcount == 0:
                raise ManagedJobNotFoundError(job_id)
        return self.job(job_id)

    def events(self, job_id: int) -> list[EventRow]:
        return [
            EventRow(r["id"], r["job_id"], r["at"], r["from_status"], r["to_status"], r["reason"],
                     r["attempt"])
            for r in self._conn.execute(
                "SELECT * FROM managed_job_events WHERE job_id = ? ORDER BY id", (job_id,)
            )
        ]

    # ---- attempts ---------------------------------------------------------------------

    def add_attempt(self, job_id: int, attempt: int, cluster_name: str, cause: str,
                    market: str | None = None) -> AttemptRow:
        """Record an attempt (and its cluster name) before anything is provisioned."""
        with self._tx() as c:
            c.execute(
                "INSERT INTO managed_job_attempts (job_id, attempt, cluster_name, cause, phase, "
                "created_at, market) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, attempt, cluster_name, cause, AttemptPhase.PROVISIONING, time.time(),
                 market),
            )
        return self.attempt(job_id, attempt)

    def update_attempt(self, job_id: int, attempt: int, **fields: object) -> AttemptRow:
        fields = _attempt_fields(fields)
        if fields:
            sets = ", ".join(f"{k} = ?" for k in fields)
            with self._tx() as c:
                c.execute(
                    f"UPDATE managed_job_attempts SET {sets} WHERE job_id = ? AND attempt = ?",
                    (*fields.values(), job_id, attempt),
                )
        return self.attempt(job_id, attempt)

    def attempt(self, job_id: int, attempt: int) -> AttemptRow:
        r = self._conn.execute(
            f"SELECT {_ATTEMPT_COLS} FROM managed_job_attempts WHERE job_id = ? AND attempt = ?",
            (job_id, attempt),
        ).fetchone()
        if r is None:
            raise LauncherError(f"Managed job {job_id} has no attempt {attempt}.")
        return _attempt(r)

    def attempts(self, job_id: int) -> list[AttemptRow]:
        return [
            _attempt(r)
            for r in self._conn.execute(
                f"SELECT {_ATTEMPT_COLS} FROM managed_job_attempts WHERE job_id = ? "
                "ORDER BY attempt",
                (job_id,),
            )
        ]

    def all_attempts(self) -> list[AttemptRow]:
        return [
            _attempt(r)
            for r in self._conn.execute(
                f"SELECT {_ATTEMPT_COLS} FROM managed_job_attempts ORDER BY job_id, attempt"
            )
        ]

    def attempts_not_torn_down(self) -> list[AttemptRow]:
        return [
            _attempt(r)
            for r in self._conn.execute(
                f"SELECT {_ATTEMPT_COLS} FROM managed_job_attempts WHERE torn_down_at IS NULL "
                "ORDER BY job_id, attempt"
            )
        ]

    # ---- recovery blocks --------------------------------------------------------------

    def add_block(
        self, job_id: int, cloud: str, region: str | None, zone: str | None, until: float,
        reason: str,
    ) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO managed_job_blocks (job_id, cloud, region, zone, until, reason) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, cloud, region, zone, until, reason),
            )

    def blocks(self, job_id: int, now: float | None = None) -> list[BlockRow]:
        """Blocks still in force at `now` (default: the current time)."""
        t = time.time() if now is None else now
        return [
            BlockRow(r["job_id"], r["cloud"], r["region"], r["zone"], r["until"], r["reason"])
            for r in self._conn.execute(
                "SELECT * FROM managed_job_blocks WHERE job_id = ? AND until > ?", (job_id, t)
            )
        ]
