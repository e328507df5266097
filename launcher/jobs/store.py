"""Managed-job tables in the shared state DB ($LAUNCHER_HOME/state.db, or the team
server's PostgreSQL database: launcher/state/engine.py).

The tables are part of the state DB's schema (launcher/state/schema.py, versioned by
Alembic); explicit columns, no pickles. Every status change writes the job row and
its event row in one transaction, after `check_transition` allowed it (the row is
read `FOR UPDATE` on PostgreSQL, so two writers never both pass the check).

Thread-safety: one `JobStore` per thread (it owns one connection to the state store,
launcher.state.store).
Several processes (the controller and CLIs) may use the DB at once: writers
take `BEGIN IMMEDIATE` (SQLite) and wait up to `busy_timeout`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
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
from launcher.state import migrate, store


class LeaseLostError(LauncherError):
    """A write on a job whose lease this replica no longer holds (it expired, another
    replica took the job): refused, nothing written (fencing, launcher/jobs/leases.py)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"Managed job {job_id} is no longer leased to this server replica: "
                         "another one works on it now; this replica's write was refused.")
        self.job_id = job_id


@dataclass
class Fence:
    """The leases a controller holds: its replica id and each job's token. A JobStore
    with a fence refuses every write on a job unless that job's row still carries this
    holder and token, unexpired (see JobStore._check_fence)."""

    holder: str
    tokens: dict[int, str]


class ManagedJobNotFoundError(LauncherError):
    exit_code = 4

    def __init__(self, job_id: int) -> None:
        super().__init__(f"No managed job with id {job_id} (see `launcher jobs queue`).")
        self.job_id = job_id




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
        # Set on a controller's store when jobs are leased (server replicas): every write
        # on a job then checks the job's lease (fencing). None: no check (CLI, API).
        self.fence: Fence | None = None
        try:
            self._conn = store.connect(path, timeout=30.0, named_rows=True,
                                       check_same_thread=False)
        except state_files.StateError:
            raise
        except store.STORAGE_ERRORS as exc:
            raise store.open_error(path, exc) from exc
        try:
            schema = migrate.ensure_schema(self._conn)
            store.opened(self._conn, path, schema if self._scrub() else "unchanged")
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, store.STORAGE_ERRORS) and not isinstance(
                    exc, state_files.StateError):
                raise store.open_error(path, exc) from exc
            raise

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[store.Connection]:
        with store.immediate(self._conn) as c:
            yield c
        store.after_write(self._conn, self.path)

    def write(self) -> AbstractContextManager[store.Connection]:
        """A write transaction on the managed-job tables, for modules that keep their
        own rows in them (deadline_store.py): committed when the block ends."""
        return self._tx()

    def _check_fence(self, c: store.Connection, job_id: int) -> None:
        """Inside a write transaction on job `job_id`: with a fence, lock the job's row
        and raise LeaseLostError unless its lease is still this fence's (a job no one
        leases, e.g. one that ended, takes clean-up writes)."""
        if self.fence is None:
            return
        row = c.execute("SELECT lock_holder, lock_token, lock_expires_at FROM managed_jobs "
                        "WHERE id = ?" + store.for_update(c), (job_id,)).fetchone()
        if row is None or row[0] is None:
            return
        if (row[0] != self.fence.holder or row[1] != self.fence.tokens.get(job_id)
                or row[2] is None or row[2] < store.db_now(c)):
            raise LeaseLostError(job_id)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[store.Row]:
        """The rows of one read statement (by index or column name)."""
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    def _scrub(self) -> bool:
        """The secrets scrub (once per DB, job_secrets.py). Returns False when it
        rewrote the file and its backups (no further backup is due)."""
        if job_secrets.scrub_needed(self._conn):
            with self._tx() as c:
                scrubbed = job_secrets.scrub_task_yaml(c, self.path.parent)
            handle = store.sqlite_handle(self._conn)
            if scrubbed and handle is not None:
                # old pages and older backups held the values: rewrite, start backups anew
                handle.execute("VACUUM")
                handle.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                store.backup_now(self._conn, self.path, drop_existing=True)
                return False
        return True

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
        job_id = int(c.execute(
            "INSERT INTO managed_jobs (name, status, task_yaml, task_source, task_id, strategy, "
            "max_restarts_on_errors, recover_on_exit_codes, submitted_at, updated_at) "
            "VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?) RETURNING id",
            (spec.name, ManagedJobStatus.PENDING.value, spec.task_yaml, spec.task_source,
             spec.strategy, spec.max_restarts_on_errors, codes, now, now),
        ).fetchone()[0])
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
            self._check_fence(c, job_id)
            r = c.execute("SELECT status FROM managed_jobs WHERE id = ?" + store.for_update(c),
                          (job_id,)).fetchone()
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
            if new.is_terminal:  # nothing left to lease
                c.execute("UPDATE managed_jobs SET lock_holder = NULL, lock_token = NULL, "
                          "lock_expires_at = NULL WHERE id = ?", (job_id,))
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
            self._check_fence(c, job_id)
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
            self._check_fence(c, job_id)
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
                self._check_fence(c, job_id)
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
            self._check_fence(c, job_id)
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

    # ---- leases (server replicas sharing one database: launcher/jobs/leases.py) ----------

    def claim_jobs(self, holder: str, ttl_s: float, limit: int) -> dict[int, str]:
        """Lease up to `limit` live jobs no replica holds (never leased, or the lease
        expired) to `holder` for `ttl_s` seconds. Rows another replica is claiming at the
        same moment are skipped (`FOR UPDATE SKIP LOCKED`), so concurrent claims split the
        work. Returns job id -> its new token."""
        terminal = ",".join(f"'{s.value}'" for s in ManagedJobStatus if s.is_terminal)
        out: dict[int, str] = {}
        with self._tx() as c:
            now = store.db_now(c)
            rows = c.execute(
                f"SELECT id FROM managed_jobs WHERE status NOT IN ({terminal}) AND "
                "(lock_holder IS NULL OR lock_expires_at IS NULL OR lock_expires_at < ?) "
                "ORDER BY id LIMIT ?" + store.skip_locked(c), (now, limit)).fetchall()
            for (job_id,) in rows:
                token = uuid.uuid4().hex
                c.execute("UPDATE managed_jobs SET lock_holder = ?, lock_token = ?, "
                          "lock_expires_at = ? WHERE id = ?", (holder, token, now + ttl_s, job_id))
                out[int(job_id)] = token
        return out

    def renew_leases(self, holder: str, tokens: Mapping[int, str], ttl_s: float) -> set[int]:
        """Extend every lease `holder` still holds with its token by `ttl_s` seconds (the
        heartbeat). Returns the job ids still held; a job missing from it was lost
        (another replica took it after the lease expired)."""
        with self._tx() as c:
            now = store.db_now(c)
            rows = c.execute("SELECT id, lock_token FROM managed_jobs WHERE lock_holder = ?"
                             + store.for_update(c), (holder,)).fetchall()
            held = {int(r[0]) for r in rows if tokens.get(int(r[0])) == r[1]}
            if held:
                marks = ",".join("?" * len(held))
                c.execute(f"UPDATE managed_jobs SET lock_expires_at = ? WHERE lock_holder = ? "
                          f"AND id IN ({marks})", (now + ttl_s, holder, *sorted(held)))
        return held

    def release_leases(self, holder: str) -> None:
        """Give back every lease `holder` holds (a replica shutting down cleanly: the
        others take its jobs at once instead of after the expiry)."""
        with self._tx() as c:
            c.execute("UPDATE managed_jobs SET lock_holder = NULL, lock_token = NULL, "
                      "lock_expires_at = NULL WHERE lock_holder = ?", (holder,))

    def leases_by_holder(self) -> dict[str, int]:
        """Replica id -> how many live jobs it holds an unexpired lease on."""
        now = store.db_now(self._conn)
        rows = self._conn.execute(
            "SELECT lock_holder, COUNT(*) FROM managed_jobs WHERE lock_holder IS NOT NULL "
            "AND lock_expires_at >= ? GROUP BY lock_holder", (now,)).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}
