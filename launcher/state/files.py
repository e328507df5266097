"""The state DB file at rest: a private home, damage detection and rotating backups.

Used by `StateDB` (launcher/state/db.py) and the managed-jobs `JobStore`: both open the
one file `$LAUNCHER_HOME/state.db` through `connect()` here (by way of the store
interface, launcher/state/store.py), so every reader and writer gets the same checks.
Standard library only; importing this is cheap.

Permissions
- `secure_home()` creates `LAUNCHER_HOME` 0700. A home found readable by group or
  others is made private (the home 0700, everything under it stripped of group and
  other bits) with a one-line warning on stderr. Once per process.
- The DB file is created 0600 before SQLite opens it (SQLite gives its `-wal` and
  `-shm` files the DB file's mode). The CLI and the controller also run with umask
  077 (`private_umask()`), so every other file they create under the home is private
  whatever the caller's umask.

Damage
- A file that is not an SQLite database, an empty (0-byte) file where a DB existed,
  or SQLite reporting corruption (SQLITE_CORRUPT / SQLITE_NOTADB, on open, in the
  once-per-process `PRAGMA quick_check` (DBs up to 16 MB; `launcher check` checks
  any size) or in any later query) raises
  `StateDamagedError`: one paragraph naming the file and how to recover (restore the
  newest backup, or move the file aside). Never a raw `sqlite3.DatabaseError`.
- "Existed" is known from the marker `state.db.created`, written at the first
  successful open, or from backups being present. A missing `state.db` is a fresh
  start (so moving a damaged file aside works); a 0-byte one with a marker is not.

Backups
- `state.db.bak.1` (newest) .. `state.db.bak.3`, made with SQLite's online backup API
  after every schema migration and at most once an hour after a write
  (`maybe_backup`: one dict lookup per commit, a `stat` at most once an hour). A DB
  that fails `quick_check` is never backed up (the good backups are kept).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from launcher.errors import LauncherError

HOME_MODE = 0o700
FILE_MODE = 0o600
BACKUP_COUNT = 3
BACKUP_INTERVAL_S = 3600.0
# Above this size the check on open is skipped (it would cost over ~50 ms a command);
# such a DB is still checked by `launcher check` and before every backup, and damage
# is still reported by any query that meets it.
QUICK_CHECK_MAX_BYTES = 16 * 1024 * 1024
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes)


class StateError(LauncherError):
    """The state DB cannot be used (newer schema, corrupt file, unwritable home)."""


class StateDamagedError(StateError):
    """The state DB file is damaged or was emptied; the message says how to recover."""


# --------------------------------------------------------------------------- the home

_secured: set[str] = set()


def private_umask() -> None:
    """Make files this process creates private (umask 077). For the CLI and the
    controller process only: a library must not change its caller's umask."""
    os.umask(0o077)


def secure_home(home: Path | None = None) -> Path:
    """Create the home 0700, or make an existing group/world-accessible one private
    (warning once on stderr). Idempotent; does the work once per process. Returns it."""
    if home is None:
        from launcher.config.settings import launcher_home

        home = launcher_home()
    key = str(home)
    if key in _secured:
        return home
    _secured.add(key)
    try:
        st = os.stat(home)
    except FileNotFoundError:
        home.mkdir(parents=True, exist_ok=True, mode=HOME_MODE)
        os.chmod(home, HOME_MODE)
        return home
    old = stat.S_IMODE(st.st_mode)
    if old & 0o077:
        try:
            os.chmod(home, HOME_MODE)
        except OSError as exc:  # not ours to change (e.g. another owner): say so, go on
            sys.stderr.write(f"launcher: {home} is accessible to other users (mode {old:04o}) "
                             f"and cannot be made private: {exc.strerror}.\n")
            return home
        _tighten_tree(home)
        sys.stderr.write(
            f"launcher: {home} was accessible to other users (mode {old:04o}); "
            f"made it and its files private ({HOME_MODE:04o}/{FILE_MODE:04o}).\n"
        )
    return home


def _tighten_tree(root: Path) -> None:
    """Strip group/other permission bits from `root` and everything under it (no
    symlinks followed). Best effort: a file that vanishes or cannot be changed is skipped."""
    with contextlib.suppress(OSError):
        os.chmod(root, HOME_MODE)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            p = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
                    os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o077)


def create_private(path: Path) -> None:
    """Create `path` (if missing) as an empty 0600 file; make an existing one 0600."""
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """Write `path` atomically as a 0600 file (temp file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- damage


def marker_path(db: Path) -> Path:
    """Written at the first successful open: the DB existed (an empty file is damage)."""
    return db.with_name(db.name + ".created")


def backup_paths(db: Path) -> list[Path]:
    """`state.db.bak.1` (newest) .. `.bak.N`, whether they exist or not."""
    return [db.with_name(f"{db.name}.bak.{i}") for i in range(1, BACKUP_COUNT + 1)]


def existing_backups(db: Path) -> list[Path]:
    return [p for p in backup_paths(db) if p.exists()]


def damaged_error(db: Path, what: str) -> StateDamagedError:
    """The one message for an unusable state DB: what is wrong and how to recover."""
    aside = f"{db}.damaged"
    extra = [p for p in (Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    rm = f" && rm -f {' '.join(str(p) for p in extra)}" if extra else ""
    backups = existing_backups(db)
    if backups:
        newest = backups[0]
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(newest.stat().st_mtime))
        restore = (f"To restore the newest backup (taken {when}): "
                   f"mv {db} {aside}{rm} && cp {newest} {db} ; or, to")
    else:
        restore = "There is no backup of it. To"
    return StateDamagedError(
        f"The state DB {db} is {what}. {restore} start with an empty state, move it aside: "
        f"mv {db} {aside}{rm} (clusters it recorded keep running: take them down from their "
        "cloud's console). Stop other launcher processes first; see docs/state.md."
    )


def is_corruption(exc: BaseException) -> bool:
    """Does this sqlite3 error say the file is damaged (not busy, full or locked)?"""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _CORRUPT_CODES
    text = str(exc)
    return "malformed" in text or "not a database" in text


def translate(db: Path, exc: BaseException) -> BaseException:
    """`StateDamagedError` for a corruption error, else `exc` itself."""
    if is_corruption(exc):
        return damaged_error(db, f"damaged (SQLite: {exc})")
    return exc


def preflight(db: Path) -> None:
    """Check the file before SQLite sees it (a stat, never an open: see below).

    Raises StateDamagedError for an empty file where a DB existed (marker or backups
    present, and no write-ahead log holding its pages).
    A missing file is fine (a fresh start); so is an empty one that never held a DB.
    """
    try:
        st = os.stat(db)
    except FileNotFoundError:
        return
    if stat.S_IMODE(st.st_mode) & 0o077:
        for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            with contextlib.suppress(OSError):
                os.chmod(p, FILE_MODE)
    if st.st_size == 0:
        wal = Path(f"{db}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return  # a new WAL-mode DB: its pages are still in the log
        if marker_path(db).exists() or existing_backups(db):
            raise damaged_error(db, "empty (0 bytes), but it held launcher's state")
        return
    # No read of the header here: opening and closing the file would drop the POSIX
    # locks this process's SQLite connections hold on it (see sqlite.org/howtocorrupt);
    # SQLite itself reports a wrong header (SQLITE_NOTADB), translated below.


# ------------------------------------------------------------------ the connection


class GuardedCursor(sqlite3.Cursor):
    """A cursor whose corruption errors become StateDamagedError (see `translate`)."""

    def _db(self) -> Path:
        conn = self.connection
        return Path(getattr(conn, "db_path", "state.db"))

    def execute(self, sql: str, parameters: Any = (), /) -> GuardedCursor:
        try:
            super().execute(sql, parameters)
        except sqlite3.DatabaseError as exc:
            raise translate(self._db(), exc) from exc
        return self

    def executemany(self, sql: str, seq: Iterable[Any], /) -> GuardedCursor:
        try:
            super().executemany(sql, seq)
        except sqlite3.DatabaseError as exc:
            raise translate(self._db(), exc) from exc
        return self

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            raise translate(self._db(), exc) from exc

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.DatabaseError as exc:
            raise translate(self._db(), exc) from exc

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            raise translate(self._db(), exc) from exc

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            raise translate(self._db(), exc) from exc


class GuardedConnection(sqlite3.Connection):
    """`sqlite3.Connection` whose statements raise StateDamagedError on corruption."""

    db_path: str = "state.db"

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or GuardedCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Iterable[Any], /) -> Any:
        return self.cursor().executemany(sql, seq)

    def executescript(self, script: str, /) -> Any:
        try:
            return super().executescript(script)
        except sqlite3.DatabaseError as exc:
            raise translate(Path(self.db_path), exc) from exc


_verified: set[str] = set()


def connect(db: Path, *, timeout: float, check_same_thread: bool = True) -> GuardedConnection:
    """Open the state DB after `secure_home`/`preflight`, creating it 0600 when missing.

    The first open in a process also runs `PRAGMA quick_check` (DBs up to
    QUICK_CHECK_MAX_BYTES), so damage anywhere in the file is reported by every
    command, not only by those reading the damaged table. Raises StateDamagedError, sqlite3.Error (busy, I/O) or OSError.
    """
    from launcher.config.settings import launcher_home

    if db.parent == launcher_home():
        secure_home(db.parent)
    else:
        db.parent.mkdir(parents=True, exist_ok=True)
    preflight(db)
    if not db.exists():
        create_private(db)
    try:
        conn = sqlite3.connect(
            str(db), timeout=timeout, isolation_level=None,
            check_same_thread=check_same_thread, factory=GuardedConnection,
        )
    except sqlite3.DatabaseError as exc:
        raise translate(db, exc) from exc
    conn.db_path = str(db)
    key = str(db)
    if key not in _verified:
        try:
            small = os.stat(db).st_size <= QUICK_CHECK_MAX_BYTES
            if small:
                verify(conn, db)
        except BaseException:
            conn.close()
            raise
        _verified.add(key)
    return conn


def verify(conn: sqlite3.Connection, db: Path) -> None:
    """`PRAGMA quick_check` (O(size): ~1 ms per 300 KB). Raises StateDamagedError."""
    rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
    if problems:
        raise damaged_error(db, f"damaged ({'; '.join(problems)})")


def mark_created(db: Path) -> None:
    """Record that the DB exists (after a successful open). One stat when present."""
    marker = marker_path(db)
    if not marker.exists():
        with contextlib.suppress(OSError):
            write_private(marker, f"{time.time():.0f}\n".encode())


# ------------------------------------------------------------------------- backups

_next_backup_check: dict[str, float] = {}


def maybe_backup(conn: sqlite3.Connection, db: Path) -> bool:
    """After a write: back the DB up when the newest backup is over an hour old (or
    missing). Cheap when not due (a dict lookup). Never raises. True if one was made."""
    now = time.time()
    key = str(db)
    if now < _next_backup_check.get(key, 0.0):
        return False
    try:
        newest = os.stat(backup_paths(db)[0]).st_mtime
    except OSError:
        newest = 0.0
    if now - newest < BACKUP_INTERVAL_S:
        _next_backup_check[key] = newest + BACKUP_INTERVAL_S
        return False
    _next_backup_check[key] = now + BACKUP_INTERVAL_S
    return backup_now(conn, db)


def backup_now(conn: sqlite3.Connection, db: Path, *, drop_existing: bool = False) -> bool:
    """Copy the DB (consistent snapshot, SQLite online backup API) to `.bak.1`, shifting
    older backups down and dropping the oldest. Skipped (False) when another process is
    backing up, or when the DB fails `quick_check` (a damaged copy must never push out
    a good backup). `drop_existing` deletes the older backups first. Never raises."""
    import fcntl

    lock_path = db.with_name(db.name + ".bak.lock")
    try:
        fd = os.open(str(lock_path), os.O_RDWR | os.O_CREAT, FILE_MODE)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            rows = conn.execute("PRAGMA quick_check(1)").fetchall()
        except (sqlite3.Error, StateError):
            return False
        if [str(r[0]) for r in rows] != ["ok"]:
            return False
        paths = backup_paths(db)
        tmp = db.with_name(f".{db.name}.bak.{os.getpid()}.tmp")
        try:
            create_private(tmp)
            dst = sqlite3.connect(str(tmp))
            try:
                conn.backup(dst)
            finally:
                dst.close()
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            if drop_existing:
                for p in paths:
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()
            for older, newer in zip(reversed(paths[1:]), reversed(paths[:-1]), strict=True):
                if newer.exists():
                    os.replace(newer, older)
            os.replace(tmp, paths[0])
        except (sqlite3.Error, OSError):
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False
        return True
    finally:
        os.close(fd)
