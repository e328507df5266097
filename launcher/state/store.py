"""The state store's interface: how code outside launcher/state reaches the state DB.

Today the store is one SQLite file (`$LAUNCHER_HOME/state.db`, opened through files.py
so every connection gets the same privacy, damage and backup handling); a team server
will put the same schema on PostgreSQL. So nothing outside this package imports
`sqlite3`: the cluster DB (db.StateDB), the managed-job tables (jobs/store.py), the
cost report and the CLI's error handling use what is here.

- `Connection`, `Cursor`, `Row`: what callers use of an open connection (DB-API
  shaped: `execute(sql, params)` with `?` placeholders; rows by index or, opened with
  `named_rows`, by column name).
- `STORE_ERRORS`: the exception types a failed store operation raises (besides
  OSError), for callers that turn them into messages (`except STORE_ERRORS`);
  `STORAGE_ERRORS`: those and OSError.
- `connect(path, ...)`: a read-write connection to the state DB file (created private
  when missing); `connect_readonly(path)`: one that never creates or writes it.
- `immediate(conn)`: a write transaction that takes the write lock at once.
- `table_exists(conn, name)`, `open_error(path, exc)`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from launcher.state import files

# What a failed store operation raises, besides OSError (and StateError, already mapped);
# STORAGE_ERRORS adds OSError (a full disk, an unwritable home).
STORE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,)
STORAGE_ERRORS: tuple[type[Exception], ...] = (*STORE_ERRORS, OSError)


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


def connect(path: Path, *, timeout: float, named_rows: bool = False,
            check_same_thread: bool = True) -> files.GuardedConnection:
    """A read-write connection to the state DB at `path` (created 0600 in a private
    home when missing; damage raises StateDamagedError, see files.py). `timeout`:
    seconds to wait for another writer; `named_rows`: rows readable by column name.
    Raises StateError, or one of STORE_ERRORS / OSError (see `open_error`)."""
    conn = files.connect(path, timeout=timeout, check_same_thread=check_same_thread)
    if named_rows:
        conn.row_factory = sqlite3.Row
    return conn


def connect_readonly(path: Path | str, *, timeout: float) -> Connection:
    """A connection that reads the state DB at `path` and never creates or writes it.
    Raises one of STORE_ERRORS when there is no such file or it cannot be read."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)


@contextlib.contextmanager
def immediate(conn: Connection) -> Iterator[Connection]:
    """A write transaction that takes the write lock when it begins (so a writer never
    deadlocks upgrading a read lock): committed when the block ends, rolled back if it
    raises. Not re-entrant."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def table_exists(conn: Connection, name: str) -> bool:
    """Whether the store has a table `name` (another component's tables may not be
    there yet: they are made when that component first opens the store)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row is not None


def open_error(path: Path, exc: BaseException) -> files.StateError:
    """The StateError for a store that could not be opened at `path` because of `exc`
    (it says "disk full" when that is why)."""
    from launcher.state.diskspace import describe_storage_error

    return files.StateError(
        f"Cannot open the state DB at {path}: {describe_storage_error(path, exc)}")
