"""Garbage collection of uploads (launcher.server.uploads) no live work uses.

Every user's `server/uploads/<user>/` holds content-addressed blobs and the trees
built from them. Both carry their last use in their mtime: a blob is touched when
stored, when a client asks whether the server has it (the launch that follows builds
from it) and when a tree is built from it; a tree when it is built or reused.

`collect(retention_s)` removes, in every user's store:
- a tree unused for `retention_s` that no live managed job names (the job's task,
  whose workdir and file mounts point into its tree, syncs from it again at every
  recovery: it stays as long as the job lives, however old);
- a half-built tree (`.build-*`) or partial blob (`.in-*`) older than that (a crash);
- a blob unused for `retention_s` (a tree is a copy: no built tree needs its blobs).
  Its shard directory stays (an upload may be storing into it at that moment).

The server runs it when it starts and every `LAUNCHER_API_UPLOAD_GC_INTERVAL_S`
(default 6 h), with `LAUNCHER_API_UPLOAD_RETENTION_DAYS` (default 7). Cheap to import.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.server.settings import server_dir

log = logging.getLogger("launcher.server.uploads")


@dataclass(frozen=True)
class Collected:
    trees: int
    blobs: int
    bytes: int


def retention_s() -> float:
    raw = os.environ.get("LAUNCHER_API_UPLOAD_RETENTION_DAYS", "").strip()
    return (float(raw) if raw else 7.0) * 86400


def interval_s() -> float:
    raw = os.environ.get("LAUNCHER_API_UPLOAD_GC_INTERVAL_S", "").strip()
    return float(raw) if raw else 6 * 3600.0


def _live_task_texts(home: Path | None) -> list[str]:
    """The task YAML of every managed job not finished (they name their trees)."""
    from launcher.jobs.store import JobStore

    store = JobStore(home / "state.db") if home is not None else JobStore()
    try:
        return [j.task_yaml for j in store.jobs(live_only=True)]
    finally:
        store.close()


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def collect(retention: float, *, home: Path | None = None, now: float | None = None) -> Collected:
    """Remove what no live work uses and nobody used for `retention` seconds."""
    root = server_dir(home) / "uploads"
    if not root.is_dir():
        return Collected(0, 0, 0)
    cutoff = (time.time() if now is None else now) - retention
    live = _live_task_texts(home)
    trees = blobs = freed = 0
    for user in sorted(p for p in root.iterdir() if p.is_dir()):
        tree_root = user / "trees"
        for tree in sorted(tree_root.iterdir()) if tree_root.is_dir() else []:
            if tree.lstat().st_mtime >= cutoff:
                continue
            if not tree.name.startswith(".") and any(str(tree) in text for text in live):
                continue  # a live job syncs from it at its next recovery
            freed += _size(tree)
            shutil.rmtree(tree, ignore_errors=True)
            trees += 1
        blob_root = user / "blobs"
        for shard in sorted(blob_root.iterdir()) if blob_root.is_dir() else []:
            for blob in sorted(shard.iterdir()):
                if blob.lstat().st_mtime < cutoff:
                    freed += blob.lstat().st_size
                    blob.unlink(missing_ok=True)
                    blobs += 1
    if trees or blobs:
        log.info("uploads: removed %d tree(s) and %d blob(s) unused for %.1f day(s), %d bytes",
                 trees, blobs, retention / 86400, freed)
    return Collected(trees, blobs, freed)


class UploadsCollector:
    """`collect` now and then every `interval_s()` on a thread, until `stop()`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="uploads-gc", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                collect(retention_s())
            except Exception:  # noqa: BLE001 - never take the server down; next round
                log.exception("uploads garbage collection failed")
            self._stop.wait(interval_s())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
