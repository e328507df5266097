"""The state store's interface: how code outside launcher/state reaches the state DB.

The store is the SQLite file `$LAUNCHER_HOME/state.db` (opened through files.py so every
connection gets the same privacy, damage and backup handling), or for a team server a
PostgreSQL database named by `LAUNCHER_DB_URL` / `db:` in config.yaml (engine.py). The
schema is SQLAlchemy metadata (schema.py) versioned by Alembic (migrate.py). Nothing
outside this package imports `sqlite3` or SQLAlchemy for the state DB: the cluster DB
(db.StateDB), the managed-job tables (jobs/store.py), the cost report and the CLI's
error handling use what is here. SQLAlchemy is imported on the first `connect`, never
by importing this module (the CLI's start-up path stays light).

- `Connection`, `Cursor`, `Row`: what callers use of an open connection (DB-API
  shaped: `execute(sql, params)` with `?` placeholders; rows by index or by column
  name). SQL given here must run on both engines: no `INSERT OR REPLACE` (use
  `ON CONFLICT`), `RETURNING id` rather than `lastrowid`, `"user"` quoted.
- `STORE_ERRORS`: the exception types a failed store operation raises (besides
  OSError), for callers that turn them into messages (`except STORE_ERRORS`);
  `STORAGE_ERRORS`: those and OSError; `INTEGRITY_ERRORS`: a constraint refused a write.
- `connect(path, ...)`: a read-write connection to the state DB (the file created
  private when missing); `connect_readonly(path)`: one that never creates or writes it.
- `immediate(conn)`: a write transaction that takes the write lock at once (SQLite)
  or begins one whose statements lock the rows they touch (PostgreSQL, with
  `for_update(conn)` after a SELECT that a write depends on).
- `table_exists(conn, name)`, `open_error(path, exc)`, `is_sqlite(conn)`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from launcher.state import files
from launcher.state.dburl import configured_url
from launcher.state.errors import StoreError, StoreIntegrityError, StoreUnavailableError

__all__ = [  # re-exported
    "StoreError", "StoreIntegrityError", "StoreUnavailableError", "configured_url"]

# What a failed store operation raises, besides OSError (and StateError, already mapped);
# STORAGE_ERRORS adds OSError (a full disk, an unwritable home).
STORE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, StoreError)
STORAGE_ERRORS: tuple[type[Exception], ...] = (*STORE_ERRORS, OSError)
INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError, StoreIntegrityError)


class Row(Protocol):
    """One result row: by position, or by column name on a `named_rows` connection."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    """The result of `Connection.execute`."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """An open connection to the state store (see the module docstring)."""

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...

    def close(self) -> None: ...


class StoreConn(Connection, Protocol):
    """What `connect` returns: a Connection with explicit write transactions."""

    @property
    def is_sqlite(self) -> bool: ...

    @property
    def label(self) -> str: ...  # the file's path, or the URL with its password masked

    def begin_write(self) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def execute_driver(self, sql: str) -> Any: ...

    def dbapi_connection(self) -> Any: ...


def connect(path: Path, *, timeout: float, named_rows: bool = False,
            check_same_thread: bool = True) -> StoreConn:
    """A read-write connection to the state DB: the configured PostgreSQL database, else
    the file at `path` (created 0600 in a private home when missing; damage raises
    StateDamagedError, see files.py). `timeout`: seconds to wait for another writer.
    Rows are readable by index and by column name (`named_rows` is accepted for
    callers written before; connections are usable from any one thread at a time,
    whatever `check_same_thread` says). Raises StateError (StoreError for a database
    server), or one of STORE_ERRORS / OSError (see `open_error`)."""
    if configured_url():
        from launcher.state import engine

        return engine.connect(path, timeout=timeout)
    from launcher.state.sqlite_conn import SqliteConnection

    return SqliteConnection(path, timeout)  # no SQLAlchemy on the SQLite hot path


def connect_readonly(path: Path | str, *, timeout: float) -> Connection:
    """A connection that reads the state DB and never creates or writes it: with a
    database server configured, a connection to it; else the file at `path` (plain
    sqlite3, no SQLAlchemy: the cost report reads it on the CLI's light path).
    Raises one of STORE_ERRORS when there is no such file or it cannot be read."""
    if configured_url():
        return connect(Path(path), timeout=timeout)
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)


def is_sqlite(conn: Connection) -> bool:
    """Whether `conn` is to the SQLite file (not a database server)."""
    return bool(getattr(conn, "is_sqlite", True))


@contextlib.contextmanager
def immediate(conn: Connection) -> Iterator[Connection]:
    """A write transaction, committed when the block ends, rolled back if it raises.
    SQLite: `BEGIN IMMEDIATE` (takes the write lock when it begins, so a writer never
    deadlocks upgrading a read lock). PostgreSQL: `BEGIN`; a SELECT whose answer a
    later write in the block depends on ends with `for_update(conn)`. Not re-entrant."""
    begin = getattr(conn, "begin_write", None)
    if begin is None:  # a plain sqlite3 connection
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return
    begin()
    try:
        yield conn
    except BaseException:
        conn.rollback()  # type: ignore[attr-defined]
        raise
    conn.commit()  # type: ignore[attr-defined]


def for_update(conn: Connection) -> str:
    """` FOR UPDATE` on PostgreSQL (lock the rows read, until the transaction ends), ``
    on SQLite (its write transaction already holds the whole DB)."""
    return "" if is_sqlite(conn) else " FOR UPDATE"


def db_now(conn: Connection) -> float:
    """Epoch seconds by the database's clock on a server (replicas on several machines
    agree on lease expiry whatever their own clocks say); this machine's for SQLite."""
    if is_sqlite(conn):
        import time

        return time.time()
    return float(conn.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0])


def skip_locked(conn: Connection) -> str:
    """` FOR UPDATE SKIP LOCKED` on PostgreSQL (rows another transaction holds are
    left to it), `` on SQLite (one writer at a time anyway)."""
    return "" if is_sqlite(conn) else " FOR UPDATE SKIP LOCKED"


def table_exists(conn: Connection, name: str) -> bool:
    """Whether the store has a table `name` (another component's tables may not be
    there yet: they are made when that component first opens the store)."""
    if is_sqlite(conn):
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    else:
        row = conn.execute("SELECT 1 FROM information_schema.tables WHERE table_name = ? "
                           "AND table_schema = current_schema()", (name,)).fetchone()
    return row is not None


def open_error(path: Path, exc: BaseException) -> files.StateError:
    """The StateError for a store that could not be opened at `path` because of `exc`
    (it says "disk full" when that is why)."""
    from launcher.state.diskspace import describe_storage_error

    return files.StateError(
        f"Cannot open the state DB at {path}: {describe_storage_error(path, exc)}")


def sqlite_handle(conn: Connection) -> sqlite3.Connection | None:
    """The sqlite3 connection under `conn` (for files.py's checks and backups); None
    for a database server."""
    if isinstance(conn, sqlite3.Connection):
        return conn
    if not is_sqlite(conn):
        return None
    handle: sqlite3.Connection = conn.dbapi_connection()  # type: ignore[attr-defined]
    return handle


def opened(conn: Connection, path: Path, schema: str) -> None:
    """After a successful open whose migration did `schema` (migrate.ensure_schema's
    answer): a SQLite file is marked as holding state (files.py) and backed up when
    migrated (or, when just created, as after any first write)."""
    if not is_sqlite(conn):
        return
    files.mark_created(path)
    if schema == "upgraded":
        backup_now(conn, path)
    elif schema == "created":
        after_write(conn, path)


def after_write(conn: Connection, path: Path) -> None:
    """After a committed write: the hourly SQLite backup when due (files.py). A
    database server's backups are its operator's (pg_dump; docs/api-server.md)."""
    handle = sqlite_handle(conn)
    if handle is not None:
        files.maybe_backup(handle, path)


def backup_now(conn: Connection, path: Path, *, drop_existing: bool = False) -> bool:
    """A SQLite backup now (after a migration); False (none made) for a server."""
    handle = sqlite_handle(conn)
    return handle is not None and files.backup_now(handle, path, drop_existing=drop_existing)
