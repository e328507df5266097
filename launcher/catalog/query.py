"""The catalog query API (contract shared with the planning code).

    from launcher.catalog import query
    query.offers(accelerators=["H100"], clouds=None) -> list[Offer]
    query.accelerator_names() -> list[str]
    query.status() -> CatalogStatus

Offers come from the snapshot (bundled, or `$LAUNCHER_CATALOG_DIR`) through its SQLite
cache (see cache.py): the first call in a process opens it (building it once per
snapshot, per user), queries read only the matching rows through an index. The
`local` cloud's offers are computed live (local.py) and appended. All functions are
blocking, thread-safe and raise SnapshotError only if the installed snapshot is broken.
Cheap to import: standard library + the Offer type only.
"""

from __future__ import annotations

import datetime
import os
import sqlite3
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.catalog import cache, local, refreshed
from launcher.catalog.offer import LOCAL_CLOUD, Offer
from launcher.catalog.snapshot import (
    CloudMeta,
    SnapshotError,
    SnapshotMeta,
    bundled_dir,
    read_meta,
    snapshot_dir,
)

if TYPE_CHECKING:
    from launcher.catalog.refreshed import RefreshInfo
    from launcher.catalog.status import CatalogStatus, CloudStatus

__all__ = [
    "SnapshotError",
    "accelerator_names",
    "clear_process_cache",
    "cloud_metas",
    "cpu_only_clouds",
    "locations",
    "offers",
    "snapshot_nvlink",
    "snapshot_regions",
    "status",
]

_lock = threading.Lock()
# snapshot dir -> (meta.json stat signature, meta)
_metas: dict[str, tuple[tuple[int, int], SnapshotMeta]] = {}
# snapshot hash -> (connection, provenance id -> (source, fetched_at))
_conns: dict[str, tuple[sqlite3.Connection, dict[int, tuple[str, str]]]] = {}
# cloud -> {region: zones}, of the snapshot `_conns` holds (cleared with it)
_locations: dict[str, dict[str, tuple[str | None, ...]]] = {}


@dataclass
class _Refreshed:
    """This process's view of the refreshed-rows store (refreshed.py), reopened when
    the file changes (a refresh in another process commits into it)."""

    signature: tuple[int, int, int] | None = None
    conn: sqlite3.Connection | None = None
    infos: dict[str, RefreshInfo] = field(default_factory=dict)
    provenance: dict[int, tuple[str, str]] = field(default_factory=dict)


_store = _Refreshed()

_SELECT = (
    "SELECT cloud, region, zone, instance_type, accelerator, accelerator_count, "
    "accelerator_memory_gib, vcpus, memory_gib, price, spot_price, fabric, fabric_gbps, "
    "nvlink, max_nodes, arch, provenance_id FROM offers"
)
# the refreshed store's provenance ids are negated, so one id -> provenance map fits both
_SELECT_REFRESHED = _SELECT.replace("provenance_id FROM", "-provenance_id FROM")


def _meta(directory: str) -> SnapshotMeta:
    try:
        st = os.stat(os.path.join(directory, "meta.json"))
        sig = (st.st_mtime_ns, st.st_size)
    except OSError:
        sig = (0, 0)
    hit = _metas.get(directory)
    if hit is not None and hit[0] == sig:
        return hit[1]
    meta = read_meta(directory)
    _metas[directory] = (sig, meta)
    return meta


def _connection() -> tuple[sqlite3.Connection, dict[int, tuple[str, str]]]:
    directory = snapshot_dir()
    meta = _meta(directory)
    hit = _conns.get(meta.snapshot_hash)
    if hit is None:
        try:
            conn = cache.open_cache(directory, meta)
        except SnapshotError:
            # a refresh may have replaced the snapshot between reading meta.json and the
            # offers file (offers first, meta last): read meta.json again, once
            _metas.pop(directory, None)
            meta = _meta(directory)
            conn = cache.open_cache(directory, meta)
        prov = {
            int(i): (str(s), str(f))
            for i, s, f in conn.execute("SELECT id, source, fetched_at FROM provenance")
        }
        hit = _conns[meta.snapshot_hash] = (conn, prov)
    return hit


def clear_process_cache() -> None:
    """Drop this process's open snapshot connections and parsed metadata (the next query
    re-reads meta.json and reopens the cache). For tests and after a catalog refresh."""
    with _lock:
        for conn, _ in _conns.values():
            conn.close()
        _conns.clear()
        _metas.clear()
        _locations.clear()
        _drop_store()


def _drop_store() -> None:
    global _store
    if _store.conn is not None:
        _store.conn.close()
    _store = _Refreshed()


def _refreshed() -> _Refreshed:
    """The refreshed store as of now (one stat() per call; reopened when it changed).
    Call with `_lock` held."""
    path = refreshed.store_path()
    try:
        st = os.stat(path)
        sig: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        sig = None
    if sig == _store.signature:
        return _store
    _drop_store()
    _locations.clear()
    conn = refreshed.open_reader(path) if sig is not None else None
    if conn is not None:
        try:
            _store.infos = refreshed.read_infos(conn)
            _store.provenance = {
                -int(i): (str(src), str(f))
                for i, src, f in conn.execute("SELECT id, source, fetched_at FROM provenance")
            }
        except sqlite3.Error:
            conn.close()
            conn = None
            _store.infos, _store.provenance = {}, {}
    _store.conn = conn if _store.infos else None
    if conn is not None and _store.conn is None:
        conn.close()
    _store.signature = sig
    return _store


def locations(cloud: str) -> dict[str, tuple[str | None, ...]]:
    """{region: zones (None = a region without zones)} of `cloud`'s catalog rows, sorted.
    One query through the cloud index (~0-30 ms); memoized per process."""
    with _lock:
        store = _refreshed()
        hit = _locations.get(cloud)
        if hit is None:
            conn = store.conn if cloud in store.infos and store.conn else _connection()[0]
            rows = conn.execute(
                "SELECT DISTINCT region, zone FROM offers WHERE cloud = ?", (cloud,)
            ).fetchall()
            out: dict[str, list[str | None]] = {}
            for region, zone in sorted(rows, key=lambda r: (r[0], r[1] or "")):
                out.setdefault(region, []).append(zone)
            hit = _locations[cloud] = {r: tuple(z) for r, z in out.items()}
    return hit


def _norm(values: Collection[str] | None) -> list[str] | None:
    if values is None:
        return None
    return list(dict.fromkeys(v for v in values))


def offers(
    accelerators: Collection[str] | None = None,
    clouds: Collection[str] | None = None,
    live: Sequence[Offer] = (),
) -> list[Offer]:
    """Catalog offers whose accelerator is one of `accelerators` (case-insensitive) and
    whose cloud is one of `clouds`; None = no filter on that field. CPU-only rows have
    accelerator None, so they come only with `accelerators=None`. `live` are offers the
    caller read elsewhere (the SSH node pools: the catalog never imports a cloud
    module; see launcher.provisioning.offers), filtered the same way and appended.
    The `local` cloud's live offers are included (last) unless `clouds` excludes
    "local". Order: stable (cloud, instance type, accelerator, count, region, zone),
    handed-in offers next, local offers last.
    """
    accs = _norm(accelerators)
    cls = _norm([c.lower() for c in clouds] if clouds is not None else None)
    result: list[Offer] = []
    if (accs is None or accs) and (cls is None or any(c != LOCAL_CLOUD for c in cls)):
        where: list[str] = []
        params: list[str] = []
        if accs is not None:
            where.append(f"accelerator IN ({','.join('?' * len(accs))})")
            params.extend(accs)
        if cls is not None:
            where.append(f"cloud IN ({','.join('?' * len(cls))})")
            params.extend(cls)
        with _lock:
            store = _refreshed()
            conn, prov = _connection()
            # a refreshed cloud's rows come from the store, never from the snapshot
            skip = [c for c in store.infos if cls is None or c in cls]
            bundled_where = where + ([f"cloud NOT IN ({','.join('?' * len(skip))})"] if skip else [])
            rows = conn.execute(_sql(_SELECT, bundled_where), [*params, *skip]).fetchall()
            result = _rows_to_offers(rows, prov)
            if skip and store.conn is not None:
                fresh = store.conn.execute(_sql(_SELECT_REFRESHED, where), params).fetchall()
                if fresh:
                    result.extend(_rows_to_offers(fresh, store.provenance))
                    result.sort(key=lambda o: o.cloud)  # stable: keeps each cloud's order
    wanted = None if accs is None else {a.lower() for a in accs}

    def matching(live: list[Offer]) -> list[Offer]:
        return [
            o
            for o in live
            if wanted is None or (o.accelerator is not None and o.accelerator.lower() in wanted)
        ]

    result.extend(matching([o for o in live if cls is None or o.cloud in cls]))
    if cls is None or LOCAL_CLOUD in cls:
        result.extend(matching(local.local_offers()))
    return result


def _sql(select: str, where: list[str]) -> str:
    return select + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"


def _rows_to_offers(
    rows: list[tuple[object, ...]], prov: dict[int, tuple[str, str]]
) -> list[Offer]:
    return [
        Offer(
            c, r, z, it, a, ac, am, v, m, p, sp, f, fg,  # type: ignore[arg-type]
            None if nv is None else nv == 1, mn, ar, *prov[pid],  # type: ignore[arg-type,index]
        )  # fmt: skip
        for (c, r, z, it, a, ac, am, v, m, p, sp, f, fg, nv, mn, ar, pid) in rows
    ]


def cpu_only_clouds() -> list[str]:
    """Clouds with CPU-only rows in the snapshot, sorted (one index-only query)."""
    sql = "SELECT DISTINCT cloud FROM offers WHERE accelerator IS NULL ORDER BY cloud"
    with _lock:
        store = _refreshed()
        conn, _ = _connection()
        out = {str(r[0]) for r in conn.execute(sql).fetchall()} - set(store.infos)
        if store.conn is not None:
            out.update(str(r[0]) for r in store.conn.execute(sql).fetchall())
    return sorted(out)


def cloud_metas() -> tuple[CloudMeta, ...]:
    """Per-cloud provenance of the snapshot's rows (meta.json only: no cache, no rows)."""
    return tuple(_meta(snapshot_dir()).clouds)


def accelerator_names() -> list[str]:
    """Every accelerator name the catalog knows, sorted: the names in the snapshot's rows,
    SkyPilot's accelerator table (some have no offer here, e.g. K80), and local GPUs."""
    names = set(_meta(snapshot_dir()).accelerator_names)
    names.update(g.name for g in local.local_gpus())
    with _lock:
        store = _refreshed()
        if store.conn is not None:
            names.update(
                str(r[0])
                for r in store.conn.execute(
                    "SELECT DISTINCT accelerator FROM offers WHERE accelerator IS NOT NULL"
                )
            )
    return sorted(names)


def snapshot_regions(cloud: str) -> list[str]:
    """Regions of `cloud` in the snapshot itself (refreshed rows ignored), sorted: what
    a refresh fetches by default."""
    with _lock:
        conn, _ = _connection()
        rows = conn.execute("SELECT DISTINCT region FROM offers WHERE cloud = ?", (cloud,))
        return sorted(str(r[0]) for r in rows.fetchall())


def snapshot_nvlink(cloud: str) -> dict[str, bool]:
    """instance type -> NVLink, where the snapshot's sources say (for refreshed rows)."""
    with _lock:
        conn, _ = _connection()
        rows = conn.execute(
            "SELECT DISTINCT instance_type, nvlink FROM offers WHERE cloud = ? AND nvlink IS NOT NULL",
            (cloud,),
        ).fetchall()
    return {str(it): bool(nv) for it, nv in rows}


def snapshot_fabrics(cloud: str) -> dict[str, tuple[str, float | None]]:
    """instance type -> (inter-node fabric, its Gb/s per node), where the snapshot's
    sources say (the health gate's EFA/InfiniBand expectation and the burn-in's bar)."""
    with _lock:
        conn, _ = _connection()
        rows = conn.execute(
            "SELECT DISTINCT instance_type, fabric, fabric_gbps FROM offers WHERE cloud = ? "
            "AND fabric IS NOT NULL", (cloud,),
        ).fetchall()
    return {str(it): (str(fab), float(gbps) if gbps is not None else None)
            for it, fab, gbps in rows}


def status(now: datetime.datetime | None = None) -> CatalogStatus:
    """Per-cloud row counts, sources, fetch dates and ages (relative to `now`, default the
    current time), plus the local cloud's live row. Reads only meta.json (no cache build).
    The types live in launcher.catalog.status (imported here on first use)."""
    from launcher.catalog.status import STALE_AFTER_DAYS, CatalogStatus, CloudStatus, age_days

    now = now or datetime.datetime.now(datetime.UTC)
    directory = snapshot_dir()
    meta = _meta(directory)
    with _lock:
        fresh = dict(_refreshed().infos)
    clouds = []
    total = meta.total_rows
    for c in meta.clouds:
        info = fresh.pop(c.cloud, None)
        if info is not None:
            total += info.rows - c.rows
            clouds.append(_refreshed_status(info, now, replaced=c))
            continue
        age = age_days(c.fetched_at, now)
        clouds.append(
            CloudStatus(
                cloud=c.cloud,
                rows=c.rows,
                source=c.source,
                upstream=c.upstream,
                fetched_at=c.fetched_at,
                fetched_at_exact=c.fetched_at_exact,
                age_days=age,
                stale=age is None or age > STALE_AFTER_DAYS,
                completeness=c.completeness,
                note=c.note,
            )
        )
    for info in fresh.values():
        total += info.rows
        clouds.append(_refreshed_status(info, now, replaced=None))
    local_rows = local.local_offers()
    clouds.append(
        CloudStatus(
            cloud=LOCAL_CLOUD,
            rows=len(local_rows),
            source=local_rows[0].source,
            upstream="this machine",
            fetched_at=local_rows[0].fetched_at,
            fetched_at_exact=True,
            age_days=0.0,
            stale=False,
            completeness="live",
            note="computed at query time",
            origin="live",
        )
    )
    ages = [c.age_days for c in clouds if c.age_days is not None]
    from launcher.catalog.interruption import table_info
    from launcher.catalog.status import SpotRatesStatus

    bands = table_info()
    rates_age = age_days(bands.fetched_at, now) if bands.fetched_at else None
    return CatalogStatus(
        snapshot_hash=meta.snapshot_hash,
        snapshot_dir=directory,
        bundled=os.path.abspath(directory) == os.path.abspath(bundled_dir()),
        total_rows=total,
        clouds=tuple(clouds),
        stale_after_days=STALE_AFTER_DAYS,
        max_age_days=max(ages) if ages else None,
        any_stale=any(c.stale for c in clouds),
        spot_interruption=SpotRatesStatus(
            bands.origin, bands.rows, bands.source, bands.fetched_at, rates_age,
            rates_age is None or rates_age > STALE_AFTER_DAYS),
    )


def _refreshed_status(
    info: RefreshInfo, now: datetime.datetime, replaced: CloudMeta | None
) -> CloudStatus:
    from launcher.catalog.status import STALE_AFTER_DAYS, CloudStatus, age_days

    age = age_days(info.fetched_at, now)
    note = f"refreshed from the cloud's API ({len(info.regions)} regions)"
    if replaced is not None:
        note += f"; replaces the snapshot's {replaced.rows} rows ({replaced.source})"
    if info.note:
        note += f"; {info.note}"
    return CloudStatus(
        cloud=info.cloud,
        rows=info.rows,
        source=info.source,
        upstream=info.upstream,
        fetched_at=info.fetched_at,
        fetched_at_exact=True,
        age_days=age,
        stale=age is None or age > STALE_AFTER_DAYS,
        completeness="refreshed",
        note=note,
        origin="refreshed",
        regions=info.regions,
    )
