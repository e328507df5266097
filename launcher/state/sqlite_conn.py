"""The SQLite state DB on its hot path: a connection with the store's interface over plain
sqlite3, so a command that only reads or writes rows (status, queue...) never imports
SQLAlchemy (~200 ms). Migrations, which need Alembic, open an SQLAlchemy connection of
their own (launcher/state/migrate.py); a database server always goes through engine.py.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from launcher.state import files
from launcher.state.rows import Result, Row


def open_file(path: Path, timeout: float) -> files.GuardedConnection:
    """The state DB file at `path` opened by files.py (privacy, damage checks), in WAL
    with a busy timeout, foreign keys on and secure_delete."""
    conn = files.connect(path, timeout=timeout, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        _enable_wal(conn, timeout)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Put the file in WAL mode (persistent, so only a fresh DB needs the switch).

    Switching a fresh file to WAL needs an exclusive lock, and SQLite may answer
    SQLITE_BUSY at once instead of calling the busy handler when another process is
    opening the same fresh file; so that one step is retried for up to `busy_timeout`
    seconds. Raises sqlite3.OperationalError when it never succeeds.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)  # no event to wait on: another process holds the file lock
            delay = min(delay * 2, 0.2)


class SqliteConnection:
    """A connection to the SQLite state DB file with the shape of store.Connection (and
    engine.StoreConnection's transaction methods): `?` placeholders are sqlite3's own."""

    dialect = "sqlite"
    is_sqlite = True

    def __init__(self, path: Path, timeout: float) -> None:
        self.label = str(path)
        self.path = path
        self.timeout = timeout
        self._conn = open_file(path, timeout)
        self._in_tx = False

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    def dbapi_connection(self) -> sqlite3.Connection:
        return self._conn

    def _result(self, cur: sqlite3.Cursor) -> Result:
        if cur.description is None:
            return Result([], cur.rowcount, cur.lastrowid)
        index = {d[0]: i for i, d in enumerate(cur.description)}
        return Result([Row(r, index) for r in cur.fetchall()], cur.rowcount, None)

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = (), /) -> Result:
        return self._result(self._conn.execute(sql, parameters))

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Result:
        return self._result(self._conn.executemany(sql, parameters))

    def execute_driver(self, sql: str) -> Result:
        return self._result(self._conn.execute(sql))

    def begin_write(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        self._in_tx = True

    def commit(self) -> None:
        try:
            self._conn.execute("COMMIT")
        finally:
            self._in_tx = False

    def rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        finally:
            self._in_tx = False

    def close(self) -> None:
        self._conn.close()
