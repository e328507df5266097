"""The SQLite cache: built once per snapshot hash, rebuilt when the snapshot changes,
safe when several processes need it first at the same moment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.catalog import build, cache, query
from launcher.catalog.snapshot import CloudMeta, SnapshotError, bundled_dir, read_meta


def _offer(cloud: str, it: str, acc: str | None, count: float, price: float) -> tuple[object, ...]:
    return (cloud, "r1", None, it, acc, count, None, 8.0, 32.0, price, None, None, None, None, None,
            "x86_64", f"test {cloud}", "2026-01-01T00:00:00Z")  # fmt: skip


def _write(directory: Path, rows: list[tuple[object, ...]]) -> str:
    clouds = sorted({str(r[0]) for r in rows})
    metas = [
        CloudMeta(
            c,
            sum(1 for r in rows if r[0] == c),
            f"test {c}",
            "test",
            "2026-01-01T00:00:00Z",
            True,
            "complete",
            "0" * 64,
        )  # fmt: skip
        for c in clouds
    ]
    data, meta = build.pack_snapshot(rows, metas, [str(r[4]) for r in rows if r[4]])
    build.write_snapshot(str(directory), data, meta)
    return meta.snapshot_hash


def _cache_files(home: Path) -> list[str]:
    d = home / "cache"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_first_query_builds_the_cache_then_reuses_it(_isolated_catalog: Path) -> None:
    meta = read_meta(bundled_dir())
    assert _cache_files(_isolated_catalog) == []
    assert query.offers(["H100"], clouds=["gcp"])
    path = Path(cache.cache_path(meta.snapshot_hash))
    assert path.parent == _isolated_catalog / "cache" and path.exists()
    stamp = path.stat().st_mtime_ns, path.stat().st_ino
    query.clear_process_cache()
    assert query.offers(["H100"], clouds=["gcp"])
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == stamp  # opened, not rebuilt


def test_cache_is_rebuilt_when_the_snapshot_hash_changes(
    tmp_path: Path, _isolated_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = tmp_path / "snap"
    monkeypatch.setenv("LAUNCHER_CATALOG_DIR", str(snap))
    h1 = _write(snap, [_offer("aws", "a.1", "H100", 8, 10.0)])
    assert [o.price for o in query.offers(["H100"], clouds=["aws"])] == [10.0]
    # the snapshot in the same directory is replaced (a refresh): no process-cache reset
    h2 = _write(snap, [_offer("aws", "a.1", "H100", 8, 12.0), _offer("aws", "a.2", "H100", 1, 2.0)])
    assert h1 != h2
    assert sorted(o.price or 0 for o in query.offers(["H100"], clouds=["aws"])) == [2.0, 12.0]
    files = _cache_files(_isolated_catalog)
    assert Path(cache.cache_path(h2)).name in files
    assert Path(cache.cache_path(h1)).name not in files  # the old snapshot's cache is gone


def test_a_cache_file_of_another_snapshot_is_not_trusted(
    tmp_path: Path, _isolated_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = tmp_path / "snap"
    monkeypatch.setenv("LAUNCHER_CATALOG_DIR", str(snap))
    h = _write(snap, [_offer("aws", "a.1", "H100", 8, 10.0)])
    other = tmp_path / "other"
    _write(other, [_offer("aws", "zzz", "H100", 8, 99.0)])
    other_meta = read_meta(str(other))
    # plant the other snapshot's database under this snapshot's cache name
    os.makedirs(cache.cache_dir(), exist_ok=True)
    Path(cache.cache_path(h)).write_bytes(cache._read_db_bytes(str(other), other_meta))
    assert [o.instance_type for o in query.offers(["H100"], clouds=["aws"])] == ["a.1"]


def test_corrupt_snapshot_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = tmp_path / "snap"
    monkeypatch.setenv("LAUNCHER_CATALOG_DIR", str(snap))
    _write(snap, [_offer("aws", "a.1", "H100", 8, 10.0)])
    offers_file = snap / read_meta(str(snap)).offers_file
    offers_file.write_bytes(offers_file.read_bytes()[:-10])
    with pytest.raises(SnapshotError, match="does not match its meta.json"):
        query.offers(["H100"])
    (snap / "meta.json").unlink()
    query.clear_process_cache()
    with pytest.raises(SnapshotError, match="metadata missing"):
        query.offers(["H100"])


def test_unwritable_cache_dir_falls_back_to_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("LAUNCHER_HOME", str(blocker))  # $LAUNCHER_HOME/cache cannot be created
    rows = query.offers(["H100"], clouds=["aws"])
    assert rows and all(o.accelerator == "H100" for o in rows)


_RACER = """
import json, sys, time
start = float(sys.argv[1])
while time.time() < start:
    pass
import os
from launcher.catalog import cache, query
from launcher.catalog.snapshot import bundled_dir, read_meta
rows = query.offers(["H100"])
inode = os.stat(cache.cache_path(read_meta(bundled_dir()).snapshot_hash)).st_ino
print(json.dumps([len(rows), sorted({o.cloud for o in rows}), inode]))
"""


def test_concurrent_first_use_by_several_processes(_isolated_catalog: Path) -> None:
    env = {**os.environ, "LAUNCHER_HOME": str(_isolated_catalog), "LAUNCHER_LOCAL_GPUS": "none"}
    start = time.time() + 1.5  # all racers pass the start line together, after their imports
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(start)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    results = [json.loads(o) for o in outs]
    # same rows everywhere, and one file: the racers that lost waited for the builder
    # instead of renaming their own copy over it (the inode every racer saw is the same)
    assert results[0][0] > 100 and results.count(results[0]) == 3
    meta = read_meta(bundled_dir())
    name = Path(cache.cache_path(meta.snapshot_hash)).name
    assert _cache_files(_isolated_catalog) == [name, name + ".lock"]  # no temp files left
