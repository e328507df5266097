"""Managed-job logs on a team server: the files under `managed_jobs/<id>/` mirrored to the
state DB (launcher/state/logstore.py), so a replica that did not write them serves them.

Only when the state DB is a database server (`logstore.shared()`); with the embedded
SQLite file the files are the logs and nothing here runs.

- The writing replica (its controller keeps writing the files exactly as before: the
  incremental output copy, setup logs, gang-run copies, a rewrite when a gang run is
  reclaimed) runs `LogPusher`: once a second it copies what changed to the stream
  `job/<id>/<file name>`: the new bytes of a file that grew, the whole file when it
  was replaced or shrank (a different inode, or smaller).
- A reading replica calls `pull(job_id)` before reading the files (launcher/api/jobs.py
  `jobs_logs`): streams longer than the local file are brought in (appended, or the
  whole file written anew). Files this process writes itself are never pulled over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

from launcher.jobs import paths
from launcher.state import logstore
from launcher.state.db import StateDB
from launcher.state.store import STORAGE_ERRORS

log = logging.getLogger("launcher.jobs.log_mirror")
PUSH_INTERVAL_S = 1.0

# path -> (inode, size) of what the DB holds of it; `_written` the paths this process
# writes (pushed), never overwritten by a pull.
_known: dict[str, tuple[int, int]] = {}
_written: set[str] = set()
_lock = threading.Lock()


def _stream(path: Path) -> str:
    return f"job/{path.parent.name}/{path.name}"


def _log_files() -> list[Path]:
    try:
        dirs = [d for d in paths.jobs_dir().iterdir() if d.name.isdigit() and d.is_dir()]
    except FileNotFoundError:
        return []
    return [f for d in dirs for f in d.iterdir() if f.name.endswith(".log")]


def push(db: StateDB) -> int:
    """Copy what changed in every managed job's log files to the DB. Returns how many
    files were copied."""
    copied = 0
    with _lock:
        for path in _log_files():
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            key = str(path)
            known = _known.get(key)
            if known == (st.st_ino, st.st_size):
                continue
            with open(path, "rb") as f:
                if known is not None and known[0] == st.st_ino and st.st_size > known[1]:
                    f.seek(known[1])
                    data = f.read(st.st_size - known[1])
                    logstore.append(db, _stream(path), data)
                    size = known[1] + len(data)
                else:
                    data = f.read(st.st_size)
                    logstore.replace(db, _stream(path), data)
                    size = len(data)
            _known[key] = (st.st_ino, size)
            _written.add(key)
            copied += 1
    return copied


def pull(job_id: int, db: StateDB | None = None) -> int:
    """Bring the job's logs another replica wrote into the local files (no-op unless the
    state DB is shared). Returns how many files changed."""
    if not logstore.shared():
        return 0
    own = db is None
    db = db or StateDB()
    changed = 0
    try:
        with _lock:
            for stream, size in logstore.sizes(db, f"job/{job_id}/").items():
                path = paths.job_dir(job_id) / stream.rsplit("/", 1)[1]
                key = str(path)
                if key in _written:
                    continue
                try:
                    local = path.stat().st_size
                except FileNotFoundError:
                    local = -1
                if local == size:
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                if 0 <= local < size:
                    with open(path, "ab") as f:
                        f.write(logstore.read(db, stream, local))
                else:
                    tmp = path.with_name(path.name + ".pull.tmp")
                    tmp.write_bytes(logstore.read(db, stream))
                    os.replace(tmp, path)
                st = path.stat()
                _known[key] = (st.st_ino, st.st_size)
                changed += 1
    finally:
        if own:
            db.close()
    return changed


class LogPusher:
    """The writing replica's thread: `push` every PUSH_INTERVAL_S, and once more on `stop`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="log-pusher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        db: StateDB | None = None
        while True:
            stopping = self._stop.wait(PUSH_INTERVAL_S)
            try:
                db = db or StateDB()
                push(db)
            except STORAGE_ERRORS as exc:  # the DB is away: the files keep it; next tick
                log.warning("copying job logs to the state DB failed: %s", exc)
                if db is not None:
                    with contextlib.suppress(*STORAGE_ERRORS):
                        db.close()
                db = None
            if stopping:
                break
        if db is not None:
            db.close()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
