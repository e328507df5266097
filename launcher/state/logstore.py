"""Logs in the state DB, so every server replica on one PostgreSQL serves them.

A log is a *stream* named by what it belongs to: `request/<id>` (an asynchronous API
request), `job/<id>/<file>` (a managed job's saved output, e.g. `attempt-2.log`). It
is stored as chunks in byte order (`log_chunks`: stream, start offset, size, data), so
a follower reads what came after the offset it has (`read(stream, offset)`) with one
indexed query, and a writer appends without rewriting what is there.

Used when the state DB is a database server (`shared()`): with the embedded SQLite
file there is one process tree on one disk, and the files under LAUNCHER_HOME stay
the logs (nothing is copied). One writer per stream at a time (a request runs on one
replica; a job's logs are written by the replica holding its lease).
"""

from __future__ import annotations

import time

from launcher.state import store
from launcher.state.db import StateDB


def shared() -> bool:
    """Whether logs go to the DB: the state DB is a database server (LAUNCHER_DB_URL /
    `db:`), which other replicas read too."""
    return store.configured_url() is not None


def size(db: StateDB, stream: str) -> int:
    """The stream's length in bytes (0: no such stream)."""
    row = db.query_one("SELECT COALESCE(MAX(start + size), 0) FROM log_chunks WHERE stream = ?",
                       (stream,))
    return int(row[0]) if row else 0


def sizes(db: StateDB, prefix: str) -> dict[str, int]:
    """Every stream whose name starts with `prefix`, with its length."""
    rows = db.query("SELECT stream, MAX(start + size) FROM log_chunks WHERE stream LIKE ? "
                    "GROUP BY stream", (_like(prefix) + "%",))
    return {str(r[0]): int(r[1]) for r in rows}


def append(db: StateDB, stream: str, data: bytes) -> int:
    """Add `data` at the stream's end; returns the new length."""
    if not data:
        return size(db, stream)
    with db.transaction() as conn:
        row = conn.execute("SELECT COALESCE(MAX(start + size), 0) FROM log_chunks "
                           "WHERE stream = ?", (stream,)).fetchone()
        start = int(row[0]) if row else 0
        conn.execute("INSERT INTO log_chunks (stream, start, size, data, at) "
                     "VALUES (?, ?, ?, ?, ?)", (stream, start, len(data), data, time.time()))
    return start + len(data)


def replace(db: StateDB, stream: str, data: bytes) -> None:
    """Make `data` the stream's whole content (a log rewritten in place)."""
    with db.transaction() as conn:
        conn.execute("DELETE FROM log_chunks WHERE stream = ?", (stream,))
        conn.execute("INSERT INTO log_chunks (stream, start, size, data, at) "
                     "VALUES (?, 0, ?, ?, ?)", (stream, len(data), data, time.time()))


def read(db: StateDB, stream: str, offset: int = 0) -> bytes:
    """The stream's bytes from `offset` on (b"" when there are none)."""
    rows = db.query("SELECT start, data FROM log_chunks WHERE stream = ? AND start + size > ? "
                    "ORDER BY start", (stream, offset))
    out = b"".join(bytes(r[1]) for r in rows)
    if rows:
        out = out[max(0, offset - int(rows[0][0])):]
    return out


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
