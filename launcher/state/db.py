"""The client-side state DB: clusters, their nodes, events and the cost ledger.

One SQLite file, `$LAUNCHER_HOME/state.db` (default `~/.launcher/state.db`), in WAL
mode with a busy timeout, so several CLI processes can read and write at once; or,
for a team server, a PostgreSQL database (`LAUNCHER_DB_URL` / `db:`; see
launcher/state/engine.py). Every table has explicit typed columns (schema.py);
nothing is pickled and there are no JSON blobs. Rows come back as frozen dataclasses.

The schema (every component's tables: clusters, managed jobs, the API server's) is
versioned by Alembic (migrate.py): opening the DB brings it to this launcher's
revision inside one write transaction, so two processes opening a fresh DB at once
migrate it once. A DB written by a newer launcher is refused with `StateError`,
never downgraded; a SQLite file from before Alembic is upgraded (legacy.py).

The file at rest (launcher/state/files.py): created 0600 in a 0700 home; an empty
or damaged file raises `StateDamagedError` (how to recover, never a raw sqlite3
error); rotating backups `state.db.bak.1..3` after migrations and hourly on writes.

Concurrency rules:
- Short writes use `transaction()` (SQLite: BEGIN IMMEDIATE, so a writer never
  deadlocks upgrading a read lock; PostgreSQL: BEGIN, and a read that a write
  depends on locks its rows with `store.for_update`).
- Long operations on one cluster (launch, exec's sync+setup, stop/start/down)
  hold `cluster_lock(name)` (launcher/state/locks.py, re-exported here): an
  `fcntl.flock` on `$LAUNCHER_HOME/locks/<name>.lock`.
  The kernel drops the lock when its holder dies, so a lock left by a killed
  process is recovered by construction; the file only keeps the holder's pid for
  error messages.
"""

from __future__ import annotations

import contextlib
import enum
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.catalog.money import format_money
from launcher.clouds.base import ClusterInfo, NodeInfo
from launcher.errors import ClusterBusyError, ClusterNotFoundError, LauncherError
from launcher.state import files as state_files
from launcher.state import migrate, store
from launcher.state.files import StateDamagedError, StateError
from launcher.state.locks import (
    ClusterLock,
    acquire_cluster_lock,
    cluster_lock,
    launch_process_gone,
    launcher_process,
)

__all__ = [  # re-exported: callers import them from here
    "ClusterLock", "StateDamagedError", "StateError", "acquire_cluster_lock", "cluster_lock",
    "launch_process_gone", "launcher_process",
]


class InvalidClusterNameError(LauncherError):
    exit_code = 2


def launcher_home() -> Path:
    """`$LAUNCHER_HOME`, else `~/.launcher`, absolute (see launcher.config.settings.launcher_home)."""
    from launcher.config.settings import launcher_home as home

    return home()


_CLUSTER_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def validate_cluster_name(name: str) -> str:
    """Return `name` if it is a valid cluster name, else raise InvalidClusterNameError.

    Lowercase letters, digits and '-', starting with a letter, at most 63 characters
    (it becomes part of paths, tags and hostnames).
    """
    if not _CLUSTER_NAME.match(name):
        raise InvalidClusterNameError(
            f"Invalid cluster name {name!r}: use lowercase letters, digits and '-', "
            "start with a letter, end with a letter or digit, at most 63 characters."
        )
    return name


class ClusterStatus(enum.StrEnum):
    INIT = "INIT"  # being provisioned / set up, or a launch died half-way
    UP = "UP"  # all nodes running, agent installed
    STOPPED = "STOPPED"  # nodes stopped (disks kept); `start` brings it back
    PREEMPTED = "PREEMPTED"  # the cloud took at least one node; relaunch or down


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    accelerator: str | None
    accelerator_count: float  # per node
    status: ClusterStatus
    hourly_cost: float  # whole cluster, $/h at launch time
    autostop_minutes: float | None  # None = no autostop
    autostop_down: bool
    launched_at: float  # epoch seconds
    status_changed_at: float
    task_name: str | None
    resources: str  # human summary, e.g. "2x local (cpu)"
    ssh_key_path: str | None  # private key the client uses (never shown by status)
    owner: str | None  # None = the user; "managed-job:<id>" for controller clusters
    # The process that created it or last took it over to bring it up (a launch, the
    # managed-jobs controller): how `status` tells an INIT cluster whose launch died.
    launch_pid: int | None = None
    launch_host: str | None = None


@dataclass(frozen=True)
class NodeRecord:
    cluster: str
    rank: int
    node_id: str
    internal_ip: str
    external_ip: str | None
    ssh_user: str | None
    ssh_port: int
    ssh_host_key: str | None
    local_root: str | None

    def to_node_info(self) -> NodeInfo:
        return NodeInfo(
            rank=self.rank,
            node_id=self.node_id,
            internal_ip=self.internal_ip,
            external_ip=self.external_ip,
            ssh_user=self.ssh_user,
            ssh_port=self.ssh_port,
            ssh_host_key=self.ssh_host_key,
            local_root=self.local_root,
        )


@dataclass(frozen=True)
class ClusterEvent:
    id: int
    cluster: str
    ts: float
    kind: str  # "provision-attempt", "provisioned", "setup-failed", "status", "down", ...
    cloud: str | None  # the cloud the event concerns (down uses it to find leftovers)
    message: str


@dataclass(frozen=True)
class UsageEntry:
    """One interval of a cluster's nodes being billed at `hourly_cost`."""

    id: int
    cluster: str
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    hourly_cost: float
    started_at: float
    ended_at: float | None  # None = still running
    end_reason: str | None
    owner: str | None

    def cost(self, now: float | None = None) -> float:
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        return max(0.0, end - self.started_at) / 3600.0 * self.hourly_cost


_CLUSTER_COLUMNS = (
    "name, cloud, region, zone, instance_type, num_nodes, use_spot, accelerator, "
    "accelerator_count, status, hourly_cost, autostop_minutes, autostop_down, launched_at, "
    "status_changed_at, task_name, resources, ssh_key_path, owner, launch_pid, launch_host"
)
_NODE_COLUMNS = (
    "cluster, rank, node_id, internal_ip, external_ip, ssh_user, ssh_port, ssh_host_key, local_root"
)
_USAGE_COLUMNS = (
    "id, cluster, cloud, region, zone, instance_type, num_nodes, use_spot, hourly_cost, "
    "started_at, ended_at, end_reason, owner"
)


def _cluster_row(r: store.Row) -> ClusterRecord:
    return ClusterRecord(
        name=r[0],
        cloud=r[1],
        region=r[2],
        zone=r[3],
        instance_type=r[4],
        num_nodes=int(r[5]),
        use_spot=bool(r[6]),
        accelerator=r[7],
        accelerator_count=float(r[8]),
        status=ClusterStatus(r[9]),
        hourly_cost=float(r[10]),
        autostop_minutes=None if r[11] is None else float(r[11]),
        autostop_down=bool(r[12]),
        launched_at=float(r[13]),
        status_changed_at=float(r[14]),
        task_name=r[15],
        resources=r[16],
        ssh_key_path=r[17],
        owner=r[18],
        launch_pid=None if r[19] is None else int(r[19]),
        launch_host=r[20],
    )


def _usage_row(r: store.Row) -> UsageEntry:
    return UsageEntry(
        id=int(r[0]),
        cluster=r[1],
        cloud=r[2],
        region=r[3],
        zone=r[4],
        instance_type=r[5],
        num_nodes=int(r[6]),
        use_spot=bool(r[7]),
        hourly_cost=float(r[8]),
        started_at=float(r[9]),
        ended_at=None if r[10] is None else float(r[10]),
        end_reason=r[11],
        owner=r[12],
    )


# ------------------------------------------------------------------------ the DB


@dataclass(frozen=True)
class PlacementRecord:
    """Where a cluster is (or is being) provisioned: what the clusters row records."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    accelerator: str | None = None
    accelerator_count: float = 0
    hourly_cost: float = 0.0
    resources: str = ""


class StateDB:
    """A connection to the state DB. Cheap to open; not shared between threads.

    All methods are blocking and short. Writers wait up to `busy_timeout` seconds
    for another process's write transaction before raising `StateError`.
    """

    def __init__(self, path: Path | str | None = None, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path) if path is not None else launcher_home() / "state.db"
        try:
            self._conn = store.connect(self.path, timeout=busy_timeout)
        except StateError:
            raise
        except store.STORAGE_ERRORS as exc:
            raise store.open_error(self.path, exc) from exc
        try:
            store.opened(self._conn, self.path, migrate.ensure_schema(self._conn))
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, store.STORAGE_ERRORS) and not isinstance(exc, StateError):
                raise store.open_error(self.path, exc) from exc
            raise

    def close(self) -> None:
        self._conn.close()

    def check_integrity(self) -> None:
        """Run SQLite's `quick_check` over the whole file (O(size)). Raises
        StateDamagedError naming the file and how to recover. (A database server
        checks its own pages: nothing to do.)"""
        handle = store.sqlite_handle(self._conn)
        if handle is not None:
            state_files.verify(handle, self.path)

    def __enter__(self) -> StateDB:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transactions and migrations

    @contextlib.contextmanager
    def transaction(self) -> Iterator[store.Connection]:
        """A write transaction (store.immediate): committed at the end of the block,
        rolled back on error. Not re-entrant."""
        try:
            self._conn.begin_write()
        except store.STORE_ERRORS as exc:
            if isinstance(exc, StateError):
                raise
            raise StateError(f"The state DB at {self.path} is busy or locked: {exc}") from exc
        try:
            yield self._conn
        except BaseException:
            self._conn.rollback()
            raise
        else:
            self._conn.commit()
        store.after_write(self._conn, self.path)

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read statement (SELECT), run outside any transaction: a
        consistent snapshot of that statement alone. For tables another layer owns
        (the API server's); writes go through `transaction()`."""
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            raise ValueError(f"StateDB.query is for reads; got {sql.split(None, 1)[0]!r}")
        return [tuple(r) for r in self._conn.execute(sql, tuple(params)).fetchall()]

    def query_one(self, sql: str, params: Sequence[object] = ()) -> tuple[Any, ...] | None:
        """The first row of `query(sql, params)`, or None."""
        rows = self.query(sql, params)
        return rows[0] if rows else None

    @property
    def is_sqlite(self) -> bool:
        """Whether this is the SQLite file (not a database server)."""
        return store.is_sqlite(self._conn)

    # -- clusters

    def get_cluster(self, name: str) -> ClusterRecord | None:
        row = self._conn.execute(
            f"SELECT {_CLUSTER_COLUMNS} FROM clusters WHERE name = ?", (name,)
        ).fetchone()
        return _cluster_row(row) if row else None

    def require_cluster(self, name: str) -> ClusterRecord:
        """The cluster's row; raises ClusterNotFoundError naming the known clusters."""
        rec = self.get_cluster(name)
        if rec is None:
            known = [c.name for c in self.list_clusters()]
            hint = f" Known clusters: {', '.join(known)}." if known else " There are no clusters."
            raise ClusterNotFoundError(f"Cluster {name!r} does not exist.{hint}")
        return rec

    def list_clusters(self) -> list[ClusterRecord]:
        rows = self._conn.execute(
            f"SELECT {_CLUSTER_COLUMNS} FROM clusters ORDER BY launched_at, name"
        ).fetchall()
        return [_cluster_row(r) for r in rows]

    def create_cluster(
        self,
        name: str,
        placement: PlacementRecord,
        *,
        task_name: str | None = None,
        ssh_key_path: str | None = None,
        owner: str | None = None,
    ) -> ClusterRecord:
        """Insert an INIT row for a new cluster. Raises ClusterBusyError if the name exists.

        Call this BEFORE asking a cloud for anything, so a crash mid-provision
        leaves a row that `down` can clean up from. The calling process is recorded as
        the one launching it (`launch_pid` / `launch_host`).
        """
        now = time.time()
        try:
            self._insert_cluster(name, placement, now, task_name, ssh_key_path, owner)
        except store.INTEGRITY_ERRORS as exc:  # another process inserted it first
            raise ClusterBusyError(f"Cluster {name!r} already exists.") from exc
        rec = self.get_cluster(name)
        assert rec is not None
        return rec

    def _insert_cluster(self, name: str, placement: PlacementRecord, now: float,
                        task_name: str | None, ssh_key_path: str | None,
                        owner: str | None) -> None:
        pid, host = launcher_process()
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM clusters WHERE name = ?", (name,)).fetchone():
                raise ClusterBusyError(f"Cluster {name!r} already exists.")
            conn.execute(
                f"INSERT INTO clusters ({_CLUSTER_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    placement.cloud,
                    placement.region,
                    placement.zone,
                    placement.instance_type,
                    placement.num_nodes,
                    int(placement.use_spot),
                    placement.accelerator,
                    placement.accelerator_count,
                    ClusterStatus.INIT.value,
                    placement.hourly_cost,
                    now,
                    now,
                    task_name,
                    placement.resources,
                    ssh_key_path,
                    owner,
                    pid,
                    host,
                ),
            )
            self._event(conn, name, "created", placement.cloud, _describe(placement))

    def set_placement(self, name: str, placement: PlacementRecord) -> None:
        """Record where the next provisioning attempt goes (before calling the cloud)."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE clusters SET cloud=?, region=?, zone=?, instance_type=?, num_nodes=?,"
                " use_spot=?, accelerator=?, accelerator_count=?, hourly_cost=?, resources=?"
                " WHERE name=?",
                (
                    placement.cloud,
                    placement.region,
                    placement.zone,
                    placement.instance_type,
                    placement.num_nodes,
                    int(placement.use_spot),
                    placement.accelerator,
                    placement.accelerator_count,
                    placement.hourly_cost,
                    placement.resources,
                    name,
                ),
            )
            self._event(conn, name, "provision-attempt", placement.cloud, _describe(placement))

    def claim_launch(self, name: str) -> None:
        """Record the calling process as the one bringing `name` up now (a relaunch that
        takes over a cluster a dead launch left INIT)."""
        pid, host = launcher_process()
        with self.transaction() as conn:
            conn.execute("UPDATE clusters SET launch_pid=?, launch_host=? WHERE name=?",
                         (pid, host, name))

    def set_status(self, name: str, status: ClusterStatus, reason: str = "") -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE clusters SET status=?, status_changed_at=? WHERE name=?",
                (status.value, time.time(), name),
            )
            self._event(conn, name, "status", None, f"{status.value}{': ' + reason if reason else ''}")

    def set_autostop(self, name: str, idle_minutes: float | None, down: bool) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE clusters SET autostop_minutes=?, autostop_down=? WHERE name=?",
                (idle_minutes, int(down), name),
            )

    def set_ssh_key(self, name: str, ssh_key_path: str | None) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE clusters SET ssh_key_path=? WHERE name=?", (ssh_key_path, name))

    def delete_cluster(self, name: str, reason: str = "down") -> None:
        """Remove the cluster and its nodes; closes its open ledger entry. Idempotent."""
        now = time.time()
        with self.transaction() as conn:
            conn.execute("DELETE FROM cluster_nodes WHERE cluster=?", (name,))
            deleted = conn.execute("DELETE FROM clusters WHERE name=?", (name,)).rowcount
            conn.execute(
                "UPDATE cost_ledger SET ended_at=?, end_reason=? WHERE cluster=? AND ended_at IS NULL",
                (now, reason, name),
            )
            if deleted:
                self._event(conn, name, "deleted", None, reason)

    # -- nodes

    def set_nodes(self, name: str, nodes: Sequence[NodeInfo]) -> None:
        """Replace the cluster's node rows (after provision or start)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM cluster_nodes WHERE cluster=?", (name,))
            conn.executemany(
                f"INSERT INTO cluster_nodes ({_NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        name,
                        n.rank,
                        n.node_id,
                        n.internal_ip,
                        n.external_ip,
                        n.ssh_user,
                        n.ssh_port,
                        n.ssh_host_key,
                        n.local_root,
                    )
                    for n in nodes
                ],
            )

    def get_nodes(self, name: str) -> list[NodeRecord]:
        rows = self._conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM cluster_nodes WHERE cluster=? ORDER BY rank", (name,)
        ).fetchall()
        return [
            NodeRecord(
                cluster=r[0],
                rank=int(r[1]),
                node_id=r[2],
                internal_ip=r[3],
                external_ip=r[4],
                ssh_user=r[5],
                ssh_port=int(r[6]),
                ssh_host_key=r[7],
                local_root=r[8],
            )
            for r in rows
        ]

    def cluster_info(self, name: str) -> ClusterInfo:
        """The ClusterInfo runners need, rebuilt from the rows. Raises ClusterNotFoundError."""
        rec = self.require_cluster(name)
        return ClusterInfo(
            cluster_name=rec.name,
            cloud=rec.cloud,
            region=rec.region,
            zone=rec.zone,
            instance_type=rec.instance_type,
            use_spot=rec.use_spot,
            nodes=tuple(n.to_node_info() for n in self.get_nodes(name)),
            ssh_key_path=rec.ssh_key_path,
        )

    # -- events

    @staticmethod
    def _event(
        conn: store.Connection, cluster: str, kind: str, cloud: str | None, message: str
    ) -> None:
        conn.execute(
            "INSERT INTO cluster_events (cluster, ts, kind, cloud, message) VALUES (?, ?, ?, ?, ?)",
            (cluster, time.time(), kind, cloud, message),
        )

    def add_event(self, cluster: str, kind: str, message: str, cloud: str | None = None) -> None:
        with self.transaction() as conn:
            self._event(conn, cluster, kind, cloud, message)

    def events(self, cluster: str, since_id: int = 0) -> list[ClusterEvent]:
        rows = self._conn.execute(
            "SELECT id, cluster, ts, kind, cloud, message FROM cluster_events"
            " WHERE cluster=? AND id > ? ORDER BY id",
            (cluster, since_id),
        ).fetchall()
        return [ClusterEvent(int(r[0]), r[1], float(r[2]), r[3], r[4], r[5]) for r in rows]

    def clouds_touched(self, cluster: str, since: float = 0.0) -> list[str]:
        """Every cloud a provisioning attempt for `cluster` went to since `since` (for `down`)."""
        rows = self._conn.execute(
            "SELECT DISTINCT cloud FROM cluster_events WHERE cluster=? AND ts >= ?"
            " AND kind IN ('created', 'provision-attempt') AND cloud IS NOT NULL",
            (cluster, since),
        ).fetchall()
        return [r[0] for r in rows]

    # -- cost ledger

    def open_usage(self, rec: ClusterRecord, started_at: float | None = None) -> None:
        """Start billing `rec` (its current placement). No-op if an entry is already open."""
        with self.transaction() as conn:
            # the cluster's row is the lock two servers opening its entry at once share
            conn.execute("SELECT 1 FROM clusters WHERE name=?" + store.for_update(conn),
                         (rec.name,))
            if conn.execute(
                "SELECT 1 FROM cost_ledger WHERE cluster=? AND ended_at IS NULL", (rec.name,)
            ).fetchone():
                return
            conn.execute(
                "INSERT INTO cost_ledger (cluster, cloud, region, zone, instance_type, num_nodes,"
                " use_spot, hourly_cost, started_at, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rec.name,
                    rec.cloud,
                    rec.region,
                    rec.zone,
                    rec.instance_type,
                    rec.num_nodes,
                    int(rec.use_spot),
                    rec.hourly_cost,
                    started_at if started_at is not None else time.time(),
                    rec.owner,
                ),
            )

    def close_usage(self, cluster: str, reason: str, ended_at: float | None = None) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE cost_ledger SET ended_at=?, end_reason=? WHERE cluster=? AND ended_at IS NULL",
                (ended_at if ended_at is not None else time.time(), reason, cluster),
            )

    def usage(self, cluster: str | None = None) -> list[UsageEntry]:
        if cluster is None:
            rows = self._conn.execute(f"SELECT {_USAGE_COLUMNS} FROM cost_ledger ORDER BY id")
        else:
            rows = self._conn.execute(
                f"SELECT {_USAGE_COLUMNS} FROM cost_ledger WHERE cluster=? ORDER BY id", (cluster,)
            )
        return [_usage_row(r) for r in rows.fetchall()]

    def usage_after(self, last_id: int) -> list[UsageEntry]:
        """The ledger intervals added after id `last_id`, oldest first."""
        rows = self._conn.execute(
            f"SELECT {_USAGE_COLUMNS} FROM cost_ledger WHERE id > ? ORDER BY id", (last_id,))
        return [_usage_row(r) for r in rows.fetchall()]

    def usage_by_ids(self, ids: Sequence[int]) -> list[UsageEntry]:
        """The ledger intervals with these ids (any order; a missing id is left out)."""
        out: list[UsageEntry] = []
        for k in range(0, len(ids), 500):  # well under any driver's parameter limit
            chunk = list(ids[k:k + 500])
            rows = self._conn.execute(
                f"SELECT {_USAGE_COLUMNS} FROM cost_ledger WHERE id IN "
                f"({', '.join('?' * len(chunk))})", chunk)
            out += [_usage_row(r) for r in rows.fetchall()]
        return out

    def usage_mark(self, up_to: int) -> tuple[list[int], int]:
        """(ids of the intervals still open among those up to id `up_to`, how many
        intervals there are up to it): what a reader that cached the ledger up to
        `up_to` needs to see what changed since."""
        open_ids = [int(r[0]) for r in self._conn.execute(
            "SELECT id FROM cost_ledger WHERE ended_at IS NULL AND id <= ?", (up_to,)
        ).fetchall()]
        (count,) = self._conn.execute(
            "SELECT COUNT(*) FROM cost_ledger WHERE id <= ?", (up_to,)).fetchone()
        return open_ids, int(count)


def _describe(p: PlacementRecord) -> str:
    where = "/".join(x for x in (p.cloud, p.region, p.zone) if x)
    spot = " spot" if p.use_spot else ""
    return f"{p.num_nodes}x {p.instance_type}{spot} in {where} ({format_money(p.hourly_cost)}/h)"
