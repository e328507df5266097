"""The per-user store of refreshed catalog rows (`launcher catalog refresh`).

`$LAUNCHER_HOME/catalog/refreshed.sqlite` holds, per refreshed cloud, every row its
fetcher returned plus one `refreshes` row (source, upstream, fetched_at, regions). A
refreshed cloud's rows replace that cloud's rows of the snapshot in every query
(query.py); other clouds keep the snapshot's. Nothing here talks to a cloud: fetchers
(in each cloud's package) return a `FetchedCatalog`, the API layer hands it to
`replace_cloud`.

Atomicity: `replace_cloud` deletes the cloud's old rows, inserts the new ones and
updates its `refreshes` row in ONE SQLite transaction, after the fetch has completed:
a reader sees the old rows or the new ones, never a mix; a fetch that fails never gets
here, so the previous rows (refreshed or bundled) stay. A writer killed mid-way leaves
a hot journal that SQLite rolls back on the next open (readers open read-write for
that reason, and never write).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from launcher.catalog.offer import Offer

SCHEMA = 1
STORE_FILE = "refreshed.sqlite"
# What writing the store may raise (a full disk, an unwritable cache): nothing changed then.
WRITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, OSError)
# Offer columns stored per row (source and fetched_at go through `provenance`).
_STORED = (
    "cloud", "region", "zone", "instance_type", "accelerator", "accelerator_count",
    "accelerator_memory_gib", "vcpus", "memory_gib", "price", "spot_price", "fabric",
    "fabric_gbps", "nvlink", "max_nodes", "arch",
)  # fmt: skip
_DDL = """
CREATE TABLE IF NOT EXISTS provenance (
    id INTEGER PRIMARY KEY, source TEXT NOT NULL, fetched_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS offers (
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
CREATE INDEX IF NOT EXISTS offers_by_accelerator ON offers(accelerator, cloud);
CREATE INDEX IF NOT EXISTS offers_by_cloud ON offers(cloud);
CREATE TABLE IF NOT EXISTS refreshes (
    cloud TEXT PRIMARY KEY,
    rows INTEGER NOT NULL,
    source TEXT NOT NULL,
    upstream TEXT NOT NULL,
    fetched_at TEXT NOT NULL,
    regions TEXT NOT NULL,
    note TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class CatalogFetchError(Exception):
    """A fetcher could not read its source (network, credentials, a bad response).
    Nothing was replaced: the previous rows stay in use."""


@dataclass(frozen=True)
class FetchedCatalog:
    """What a cloud's fetcher returns: all the cloud's rows, complete."""

    cloud: str
    offers: tuple[Offer, ...]
    source: str  # what every row's `source` says
    upstream: str  # the endpoints / files read
    fetched_at: str  # ISO-8601 UTC, when the fetch started
    regions: tuple[str, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RefreshInfo:
    """One refreshed cloud, as `catalog status` shows it."""

    cloud: str
    rows: int
    source: str
    upstream: str
    fetched_at: str
    regions: tuple[str, ...]
    note: str


def store_path() -> str:
    from launcher.config.settings import launcher_home

    return os.path.join(str(launcher_home()), "catalog", STORE_FILE)


def _connect_rw(path: str, create: bool) -> sqlite3.Connection:
    mode = "rwc" if create else "rw"
    conn = sqlite3.connect(
        f"file:{path}?mode={mode}", uri=True, timeout=30.0, check_same_thread=False,
        isolation_level=None,
    )  # fmt: skip
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def open_reader(path: str | None = None) -> sqlite3.Connection | None:
    """A connection to the store for queries, or None when nothing was ever refreshed
    (or the file is unusable: then the snapshot's rows are used, as if never refreshed)."""
    path = path or store_path()
    if not os.path.exists(path):
        return None
    try:
        conn = _connect_rw(path, create=False)
        row = conn.execute("SELECT value FROM info WHERE key='schema'").fetchone()
    except sqlite3.Error:
        return None
    if row is None or row[0] != str(SCHEMA):
        conn.close()
        return None
    return conn


def read_infos(conn: sqlite3.Connection) -> dict[str, RefreshInfo]:
    rows = conn.execute(
        "SELECT cloud, rows, source, upstream, fetched_at, regions, note FROM refreshes"
        " ORDER BY cloud"
    ).fetchall()
    return {
        str(c): RefreshInfo(
            cloud=str(c),
            rows=int(n),
            source=str(s),
            upstream=str(u),
            fetched_at=str(f),
            regions=tuple(r for r in str(regions).split(",") if r),
            note=str(note),
        )
        for c, n, s, u, f, regions, note in rows
    }


def infos(path: str | None = None) -> dict[str, RefreshInfo]:
    """Refreshed clouds and their provenance ({} when nothing was refreshed)."""
    conn = open_reader(path)
    if conn is None:
        return {}
    try:
        return read_infos(conn)
    finally:
        conn.close()


@contextlib.contextmanager
def _writer(path: str) -> Iterator[sqlite3.Connection]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    conn = _connect_rw(path, create=True)
    try:
        row = None
        with contextlib.suppress(sqlite3.Error):
            row = conn.execute("SELECT value FROM info WHERE key='schema'").fetchone()
        if row is not None and row[0] != str(SCHEMA):
            # written by another version: start over (refreshed rows are re-fetchable)
            conn.close()
            os.unlink(path)
            conn = _connect_rw(path, create=True)
        conn.executescript(_DDL)
        conn.execute("INSERT OR REPLACE INTO info (key, value) VALUES ('schema', ?)", (str(SCHEMA),))
        yield conn
    finally:
        conn.close()


def replace_cloud(
    fetched: FetchedCatalog,
    *,
    enrich: Callable[[Offer], Offer] | None = None,
    path: str | None = None,
) -> RefreshInfo:
    """Make `fetched` the cloud's rows, in one transaction (see the module docstring).
    `enrich` may fill facts the fetcher cannot know (NVLink, gang limits). Blocking;
    idempotent for the same input. Raises one of WRITE_ERRORS if the store cannot
    be written (nothing changes then)."""
    path = path or store_path()
    rows = [enrich(o) if enrich else o for o in fetched.offers]
    for o in rows:
        if o.cloud != fetched.cloud:
            raise ValueError(f"a {o.cloud} row in a {fetched.cloud} refresh")
    rows.sort(key=_sort_key)
    info = RefreshInfo(
        cloud=fetched.cloud,
        rows=len(rows),
        source=fetched.source,
        upstream=fetched.upstream,
        fetched_at=fetched.fetched_at,
        regions=fetched.regions,
        note="; ".join(fetched.notes),
    )
    with _writer(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM offers WHERE cloud=?", (fetched.cloud,))
            conn.execute(
                "DELETE FROM provenance WHERE id NOT IN (SELECT DISTINCT provenance_id FROM offers)"
            )
            prov: dict[tuple[str, str], int] = {}
            for o in rows:
                key = (o.source, o.fetched_at)
                if key not in prov:
                    cur = conn.execute(
                        "INSERT INTO provenance (source, fetched_at) VALUES (?, ?)", key
                    )
                    prov[key] = int(cur.lastrowid or 0)
            conn.executemany(
                f"INSERT INTO offers ({','.join(_STORED)}, provenance_id)"
                f" VALUES ({','.join('?' * (len(_STORED) + 1))})",
                [_values(o, prov[(o.source, o.fetched_at)]) for o in rows],
            )
            conn.execute(
                "INSERT OR REPLACE INTO refreshes (cloud, rows, source, upstream, fetched_at,"
                " regions, note) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (info.cloud, info.rows, info.source, info.upstream, info.fetched_at,
                 ",".join(info.regions), info.note),
            )  # fmt: skip
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return info


def forget_cloud(cloud: str, path: str | None = None) -> bool:
    """Drop a cloud's refreshed rows (back to the snapshot's). True if it had any."""
    path = path or store_path()
    if not os.path.exists(path):
        return False
    with _writer(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM offers WHERE cloud=?", (cloud,))
        n = conn.execute("DELETE FROM refreshes WHERE cloud=?", (cloud,)).rowcount
        conn.execute("COMMIT")
    return n > 0


def _values(o: Offer, pid: int) -> tuple[object, ...]:
    return (
        o.cloud, o.region, o.zone, o.instance_type, o.accelerator, o.accelerator_count,
        o.accelerator_memory_gib, o.vcpus, o.memory_gib, o.price, o.spot_price, o.fabric,
        o.fabric_gbps, None if o.nvlink is None else int(o.nvlink), o.max_nodes, o.arch, pid,
    )  # fmt: skip


def _sort_key(o: Offer) -> tuple[str, ...]:
    # the snapshot's order: cloud, instance type, accelerator, count, region, zone
    return (
        o.cloud, o.instance_type, o.accelerator or "", f"{o.accelerator_count:012.3f}",
        o.region, o.zone or "",
    )  # fmt: skip


def nvlink_filler(known: Mapping[str, bool]) -> Callable[[Offer], Offer]:
    """An `enrich` that sets nvlink from facts the snapshot holds per instance type
    (the EC2 API does not say whether GPUs are NVLinked)."""
    import dataclasses

    def fill(o: Offer) -> Offer:
        if o.nvlink is None and o.instance_type in known:
            return dataclasses.replace(o, nvlink=known[o.instance_type])
        return o

    return fill


def compose(*fns: Callable[[Offer], Offer]) -> Callable[[Offer], Offer]:
    def run(o: Offer) -> Offer:
        for f in fns:
            o = f(o)
        return o

    return run


__all__: Sequence[str] = (
    "CatalogFetchError",
    "FetchedCatalog",
    "RefreshInfo",
    "forget_cloud",
    "infos",
    "open_reader",
    "read_infos",
    "replace_cloud",
    "store_path",
)
