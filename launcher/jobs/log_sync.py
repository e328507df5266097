"""Keeping a running attempt's output on the controller's machine as it runs.

The controller pulls the new complete lines of the attempt's gang run from the head
node's agent (`ClusterOps.fetch_log_since`: byte offsets per rank, one short call) every
`ControllerConfig.log_sync_s`, in the background of its watch, and appends them to the
attempt's log file. So a node lost without notice takes at most the last sync interval
of output with it; when the head is still reachable at the end, the whole log is
fetched and replaces the synced copy (`controller.logs.AttemptLogs.save`).

Files: `attempt-<n>.log` (the output) and its sidecar `attempt-<n>.log.sync` (JSON:
the gang run's cluster job id and the offsets already appended), rewritten atomically
after every append, so a restarted controller continues where the last one stopped (a
kill -9 between the append and the sidecar may repeat one sync's lines). A sidecar of
another gang run restarts the copy from scratch; a log with content and no sidecar is
not a copy of ours and is never touched (no sync then).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

FetchSince = Callable[[str, int, Mapping[int, int], Callable[[str], None]], dict[int, int]]


class LogSync:
    """The synced copy of one gang run's output at `path`. Thread-safe."""

    def __init__(self, path: Path, cluster_job_id: int) -> None:
        self.path = path
        self.sidecar = path.with_name(path.name + ".sync")
        self.cluster_job_id = cluster_job_id
        self._lock = threading.Lock()
        self.closed = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self.offsets: dict[int, int] = self._load()

    def _load(self) -> dict[int, int]:
        try:
            doc = json.loads(self.sidecar.read_text())
            if int(doc["cluster_job_id"]) == self.cluster_job_id:
                return {int(r): int(b) for r, b in dict(doc["offsets"]).items()}
        except FileNotFoundError:
            if self.path.exists() and self.path.stat().st_size > 0:
                self.closed = True  # not a copy of ours (e.g. a saved log): never touched
            return {}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # another gang run's synced copy, or one we cannot continue
        return {}

    def pull(self, fetch: FetchSince, cluster_name: str) -> int:
        """One sync (blocking): fetch what is new, append it. Returns the number of lines
        appended; raises what `fetch` raises (nothing is appended then)."""
        if self.closed:
            return 0
        lines: list[str] = []
        offsets = fetch(cluster_name, self.cluster_job_id, dict(self.offsets), lines.append)
        with self._lock:
            if self.closed:
                return 0
            if lines:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.writelines(line.rstrip("\n") + "\n" for line in lines)
            if offsets != self.offsets:
                tmp = self.sidecar.with_name(self.sidecar.name + ".tmp")
                tmp.write_text(json.dumps({"cluster_job_id": self.cluster_job_id,
                                           "offsets": {str(r): b for r, b in offsets.items()}}))
                os.replace(tmp, self.sidecar)
                self.offsets = dict(offsets)
        return len(lines)

    def close(self) -> None:
        """Stop syncing (a sync in flight appends nothing more); forget the sidecar."""
        with self._lock:
            self.closed = True
            with contextlib.suppress(FileNotFoundError):
                self.sidecar.unlink()
