"""Keeping an attempt's output: the incremental copy while it runs (log_sync.LogSync, one
per gang run), the whole log fetched before its cluster is taken down (retried; never
replacing what is saved with less), and the setup output of each launch.

Files (launcher.jobs.paths): `attempt-<n>.log`, its `.sync` sidecar, `attempt-<n>.setup.log`,
and `attempt-<n>.run-<k>.log` for a gang run ended by an in-place node replacement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import IO

from launcher.jobs import log_sync, paths
from launcher.jobs.controller.context import Context
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.log_sync import LogSync
from launcher.jobs.store import AttemptRow

log = logging.getLogger("launcher.jobs.controller")


class LineSink:
    """Append lines to a file, opened lazily (called from worker threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line.rstrip("\n") + "\n")


class AttemptLogs:
    """The logs of every attempt this controller drives. Its blocking methods run in
    worker threads; the sync registry is shared by the watch and the finisher."""

    def __init__(self, ctx: Context, loss: LossDetector) -> None:
        self.ctx = ctx
        self.loss = loss
        self._syncs: dict[tuple[int, int], LogSync] = {}

    def setup_sink(self, job_id: int, attempt: int) -> LineSink:
        """Where a launch of attempt `attempt` writes its setup output."""
        path = paths.attempt_log_path(job_id, attempt).with_suffix(".setup.log")
        path.parent.mkdir(parents=True, exist_ok=True)
        return LineSink(path)

    # ---- while the attempt runs --------------------------------------------------------

    def sync_for(self, att: AttemptRow) -> LogSync:
        """The incremental log copy of the attempt's current gang run (see log_sync)."""
        assert att.cluster_job_id is not None
        key = (att.job_id, att.attempt)
        sync = self._syncs.get(key)
        if sync is None or sync.closed or sync.cluster_job_id != att.cluster_job_id:
            sync = LogSync(paths.attempt_log_path(att.job_id, att.attempt), att.cluster_job_id)
            self._syncs[key] = sync
        return sync

    def stop_sync(self, att: AttemptRow) -> None:
        """No more incremental appends to the attempt's log (see log_sync)."""
        sync = self._syncs.pop((att.job_id, att.attempt), None)
        if sync is not None:
            sync.close()
        else:
            with contextlib.suppress(FileNotFoundError):
                p = paths.attempt_log_path(att.job_id, att.attempt)
                p.with_name(p.name + ".sync").unlink()

    # ---- before its cluster goes ---------------------------------------------------------

    async def save_retrying(self, att: AttemptRow, path: Path | None = None,
                            trailer: str | None = None) -> bool:
        """Save the output of the attempt's current gang run to `path` (default: the
        attempt's log), fetching it up to `log_fetch_tries` times, backing off between
        tries; the caller keeps the cluster up meanwhile. Tries once when the cloud
        reports the head node gone, and once more at most when it goes meanwhile. True
        once saved whole; what is saved is never replaced by a failed or partial fetch
        (see `save`). Says in controller.log how it went."""
        cfg = self.ctx.cfg
        path = path or log_sync.reclaimed_log_path(att)
        # A head already gone (preempted) is tried once: its node does not come back; not
        # at all when its logs went with it (what the watch synced is what there is).
        gone = await self.loss.head_gone(att)
        if gone and not await self.loss.records_survive(att):
            await self.ctx.launch_call(self.mark_end, att, path, trailer)
            log.info("job %d: %s's head node is gone with its logs: %s keeps the output "
                     "synced while it ran", att.job_id, att.cluster_name, path.name)
            return False
        tries = 1 if gone else max(1, cfg.log_fetch_tries)
        delay = cfg.log_fetch_backoff_s
        error = "not tried"
        had = _has_content(path)
        i = 0
        while True:
            i += 1
            err = await self.ctx.launch_call(self.save, att, path, trailer, i >= tries)
            if err is None:
                if i > 1:
                    log.info("job %d: logs of %s saved to %s on try %d", att.job_id,
                             att.cluster_name, path.name, i)
                return True
            error = err
            if i >= tries:
                break
            if await self.loss.head_gone(att):
                tries = i + 1  # one last try at once: a lost head does not come back
                log.warning("job %d: logs of %s not fetched (try %d): %s; the cloud reports "
                            "its head node gone: one last try", att.job_id, att.cluster_name,
                            i, err)
                continue
            log.warning("job %d: logs of %s not fetched (try %d of %d): %s; retrying in "
                        "%.1f s", att.job_id, att.cluster_name, i, tries, err, delay)
            await asyncio.sleep(delay)
            delay *= 2
        log.warning("job %d: logs of %s not fetched after %d tr%s (%s); %s", att.job_id,
                    att.cluster_name, i, "y" if i == 1 else "ies", error,
                    f"{path.name} keeps what was saved before" if had
                    else f"{path.name} holds the partial output, marked incomplete")
        return False

    def mark_end(self, att: AttemptRow, path: Path, trailer: str | None) -> None:
        """End `path` (the output synced while the run went on) with a line saying its
        head node was lost, then `trailer`. Blocking."""
        self.stop_sync(att)
        path.parent.mkdir(parents=True, exist_ok=True)
        synced = paths.attempt_log_path(att.job_id, att.attempt)
        if path != synced and _has_content(synced):  # a gang run ended by a node loss
            os.replace(synced, path)
        with open(path, "a", encoding="utf-8") as f:
            _write_line(f, f"=== {att.cluster_name}'s head node was lost: output after the "
                        "last sync (a few seconds at most) is missing ===")
            if trailer:
                _write_line(f, trailer)

    def save(self, att: AttemptRow, path: Path | None = None,
             trailer: str | None = None, last_try: bool = True) -> str | None:
        """Fetch the output of the attempt's current gang run into a temporary file and
        move it over `path` (atomically) only when the fetch was whole; then `trailer`
        (a line). A failed or partial fetch never touches what `path` holds; on the last
        try, when `path` holds nothing yet, the partial output is saved, ended by a line
        saying it is incomplete. Blocking (a worker thread). Returns None when saved
        whole, else what went wrong."""
        assert att.cluster_job_id is not None
        path = path or paths.attempt_log_path(att.job_id, att.attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _has_content(path):  # e.g. a gang run's own file: start from what was synced
            synced = paths.attempt_log_path(att.job_id, att.attempt)
            if path != synced and _has_content(synced):
                self.stop_sync(att)
                os.replace(synced, path)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part",
                                        dir=path.parent)
        tmp = Path(tmp_name)
        error: str | None = None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                count = 0

                def on_line(line: str) -> None:
                    nonlocal count
                    _write_line(f, line)
                    count += 1

                try:
                    self.ctx.ops.fetch_logs(att.cluster_name, att.cluster_job_id, on_line,
                                            False)
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                if error is not None:
                    if not last_try or _has_content(path):
                        return error
                    _write_line(f, f"=== log incomplete: fetching it from {att.cluster_name} "
                                f"failed ({error}) after {count} line(s) ===")
                if trailer:
                    _write_line(f, trailer)
                f.flush()
                os.fsync(f.fileno())
            self.stop_sync(att)  # the whole log replaces the synced copy
            os.replace(tmp, path)
            return error
        finally:
            tmp.unlink(missing_ok=True)


def _write_line(f: IO[str], line: str) -> None:
    f.write(line.rstrip("\n") + "\n")


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False
