"""The indexed form of a snapshot: an SQLite file in the user cache, keyed by its hash.

The snapshot ships its offers as a gzipped SQLite database (`offers.sqlite.gz`, made
by the build step with `write_db`). The first process that needs it decompresses it
to `$LAUNCHER_HOME/cache/catalog-<hash prefix>.sqlite` (LAUNCHER_HOME defaults to
~/.launcher); every later process only opens that file read-only. A new snapshot (new
hash) gets a new file; catalog files of other snapshots are removed after a build.

Building is atomic and race-safe: the builder holds an `flock` on a lock file, writes a
temp file in the same directory and renames it into place, so a reader sees either no
file or a complete one, and processes starting at once build it once. When the cache
directory is not writable the database is loaded into memory instead (same results).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator

from launcher.catalog.snapshot import COLUMNS, SnapshotError, SnapshotMeta

# gzip, hashlib, tempfile and glob are imported inside the build functions: a warm
# query only opens the cache file and should not pay for them.

CACHE_SCHEMA = 1
_PREFIX = "catalog-"

# Offer columns as stored; source + fetched_at live in `provenance` (one row per pair).
STORED_COLUMNS = tuple(c for c in COLUMNS if c not in ("source", "fetched_at"))
_DDL = """
CREATE TABLE provenance (id INTEGER PRIMARY KEY, source TEXT NOT NULL, fetched_at TEXT NOT NULL);
CREATE TABLE offers (
    id INTEGER PRIMARY KEY,
    cloud TEXT NOT NULL,
    region TEXT NOT NULL,
    zone TEXT,
    instance_type TEXT NOT NULL,
    accelerator TEXT COLLATE NOCASE,
    accelerator_count REAL NOT NULL,
    accelerator_memory_gib REAL,
    vcpus REAL,
    memory_gib REAL,
    price REAL,
    spot_price REAL,
    fabric TEXT,
    fabric_gbps REAL,
    nvlink INTEGER,
    max_nodes INTEGER,
    arch TEXT NOT NULL,
    provenance_id INTEGER NOT NULL REFERENCES provenance(id)
);
CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_INDEXES = """
CREATE INDEX offers_by_accelerator ON offers(accelerator, cloud);
CREATE INDEX offers_by_cloud ON offers(cloud);
"""


def launcher_home() -> str:
    """`$LAUNCHER_HOME`, else ~/.launcher (not created here)."""
    from launcher.config.settings import launcher_home as home

    return str(home())


def cache_dir() -> str:
    return os.path.join(launcher_home(), "cache")


def cache_path(snapshot_hash: str) -> str:
    digest = snapshot_hash.split(":", 1)[-1]
    return os.path.join(cache_dir(), f"{_PREFIX}{digest[:24]}.sqlite")


# ---- writing (build step) --------------------------------------------------------------


def write_db(path: str, rows: Iterable[tuple[object, ...]], snapshot_hash: str) -> int:
    """Create the offers database at `path` (must not exist) from Offer value tuples in
    COLUMNS order. Returns the row count. Used by the build step."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.executescript(_DDL)
        provenance: dict[tuple[str, str], int] = {}
        n = len(STORED_COLUMNS)  # source and fetched_at follow the stored columns
        nv = COLUMNS.index("nvlink")

        def stored() -> Iterator[tuple[object, ...]]:
            for values in rows:
                key = (str(values[n]), str(values[n + 1]))
                pid = provenance.get(key)
                if pid is None:
                    pid = provenance[key] = len(provenance) + 1
                nvlink = None if values[nv] is None else int(bool(values[nv]))
                yield (*values[:nv], nvlink, *values[nv + 1 : n], pid)

        conn.executemany(
            f"INSERT INTO offers ({','.join(STORED_COLUMNS)}, provenance_id) "
            f"VALUES ({','.join('?' * (n + 1))})",
            stored(),
        )
        conn.executemany(
            "INSERT INTO provenance (id, source, fetched_at) VALUES (?, ?, ?)",
            [(pid, s, f) for (s, f), pid in provenance.items()],
        )
        conn.executescript(_INDEXES)
        count = int(conn.execute("SELECT count(*) FROM offers").fetchone()[0])
        conn.executemany(
            "INSERT INTO info (key, value) VALUES (?, ?)",
            [("snapshot_hash", snapshot_hash), ("schema", str(CACHE_SCHEMA)), ("rows", str(count))],
        )
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    return count


# ---- reading ---------------------------------------------------------------------------


def _open_ro(path: str) -> sqlite3.Connection:
    # immutable=1: the file never changes after its rename into place (no locking needed)
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def _valid(conn: sqlite3.Connection, meta: SnapshotMeta) -> bool:
    try:
        info = dict(conn.execute("SELECT key, value FROM info").fetchall())
    except sqlite3.Error:
        return False
    return (
        info.get("snapshot_hash") == meta.snapshot_hash
        and info.get("schema") == str(CACHE_SCHEMA)
        and info.get("rows") == str(meta.total_rows)
    )


def _try_open(path: str, meta: SnapshotMeta) -> sqlite3.Connection | None:
    if not os.path.exists(path):
        return None
    try:
        conn = _open_ro(path)
    except sqlite3.Error:
        return None
    if _valid(conn, meta):
        return conn
    conn.close()
    return None


def open_cache(snapshot_dir: str, meta: SnapshotMeta) -> sqlite3.Connection:
    """A connection to the indexed offers of this snapshot, creating the cache if needed.

    Blocking (a first build decompresses ~10 MB). Idempotent. Raises SnapshotError when
    the snapshot's offers file is missing, does not match meta.json, or is not the
    database this version expects.
    """
    path = cache_path(meta.snapshot_hash)
    conn = _try_open(path, meta)
    if conn is not None:
        return conn
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        with _build_lock(path):
            conn = _try_open(path, meta)  # another process may have built it meanwhile
            if conn is not None:
                return conn
            _install(path, _read_db_bytes(snapshot_dir, meta))
        _remove_old_caches(path)
    except OSError:
        return _in_memory(_read_db_bytes(snapshot_dir, meta), meta)
    conn = _try_open(path, meta)
    if conn is None:
        raise SnapshotError(
            f"catalog snapshot in {snapshot_dir} is not a database this version can read "
            "(rebuild it with `python -m launcher.catalog.build`)"
        )
    return conn


def _in_memory(data: bytes, meta: SnapshotMeta) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.deserialize(data)
    if not _valid(conn, meta):
        raise SnapshotError("catalog snapshot database does not match its meta.json")
    return conn


@contextlib.contextmanager
def _build_lock(path: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: temp file + rename still keeps readers safe
        yield
        return
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _install(path: str, data: bytes) -> None:
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-catalog-", suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600)  # everything under LAUNCHER_HOME is private
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_db_bytes(snapshot_dir: str, meta: SnapshotMeta) -> bytes:
    """The snapshot's database, decompressed, after checking the file's sha256."""
    import gzip
    import hashlib

    path = os.path.join(snapshot_dir, meta.offers_file)
    try:
        with open(path, "rb") as f:
            packed = f.read()
    except OSError as e:
        raise SnapshotError(f"catalog snapshot offers file missing: {path} ({e.strerror})") from e
    actual = hashlib.sha256(packed).hexdigest()
    if actual != meta.offers_file_sha256:
        raise SnapshotError(
            f"catalog snapshot {path} does not match its meta.json (sha256 {actual[:12]}... "
            f"!= {meta.offers_file_sha256[:12]}...); rebuild it with `python -m launcher.catalog.build`"
        )
    try:
        return gzip.decompress(packed)
    except (OSError, EOFError) as e:
        raise SnapshotError(f"catalog snapshot {path} is not a gzip file: {e}") from e


def _remove_old_caches(current: str) -> None:
    """Delete catalog caches of other snapshots (processes using them keep their inode)."""
    import glob
    import time

    d = os.path.dirname(current)
    for old in glob.glob(os.path.join(d, _PREFIX + "*.sqlite")):
        if old != current:
            with contextlib.suppress(OSError):
                os.unlink(old)
            with contextlib.suppress(OSError):
                os.unlink(old + ".lock")
    # temp files of builders that were killed mid-way (a live build takes seconds)
    for tmp in glob.glob(os.path.join(d, ".tmp-catalog-*.sqlite")):
        with contextlib.suppress(OSError):
            if time.time() - os.stat(tmp).st_mtime > 3600:
                os.unlink(tmp)
