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

`reclaim_gang_run`: before an in-place node replacement the controller moves the
attempt's output to `attempt-<n>.run-<k>.log` (k: the gang run that ended), ended by a
line saying the gang restarts once the nodes are replaced. When that replacement never
restarted the gang (the cloud could not, it failed, the job was cancelled, or the
controller restarted meanwhile and relaunched the whole cluster), that copy is still
the attempt's current output: it is moved back to `attempt-<n>.log`, without the lines
that ended it, before the attempt's own end is written there. So `jobs logs` shows what
was synced, and no line claims a restart that did not happen.

`note_controller_restart`: a controller that finds an attempt it had not finished
building (killed while provisioning or setting it up) either adopts the cluster or tears
it down and builds it again under the same name; the attempt's setup log (shown by
`jobs logs` as `(setup) ...`) says which, between the first build's lines and the next.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.jobs import paths

if TYPE_CHECKING:
    from launcher.jobs.store import AttemptRow

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


# How the lines that end a gang run's saved copy end (controller_recovery /
# controller_finish write them): the in-place restart header, the lost-head marker.
GANG_RESTART_TAIL = "gang restarted after the node(s) were replaced ==="
LOST_HEAD_TAIL = "head node was lost: output after the last sync (a few seconds at most) is missing ==="


def reclaim_gang_run(job_id: int, attempt: int, gang_runs: int) -> bool:
    """Move the saved copy of the attempt's CURRENT gang run (`gang_runs`: an in-place
    replacement that never restarted the gang, see the module docstring) back in front
    of `attempt-<n>.log`, minus its trailing restart header and lost-head marker (the
    attempt's end is written after it, as it really happened). True if there was one.
    Blocking; atomic (temp file + rename)."""
    copy = paths.gang_run_log_path(job_id, attempt, gang_runs)
    try:
        lines = copy.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return False
    while lines and lines[-1].startswith("=== ") and lines[-1].endswith(
            (GANG_RESTART_TAIL, LOST_HEAD_TAIL)):
        lines.pop()
    main = paths.attempt_log_path(job_id, attempt)
    try:
        later = main.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        later = []
    tmp = main.with_name(main.name + ".reclaim.tmp")
    tmp.write_text("".join(f"{ln}\n" for ln in [*lines, *later]), encoding="utf-8")
    os.replace(tmp, main)
    copy.unlink(missing_ok=True)
    return True


def reclaimed_log_path(att: AttemptRow) -> Path:
    """The attempt's own log (`attempt-<n>.log`), once the copy of its current gang run
    is back in it (`reclaim_gang_run`): where the attempt's end is saved."""
    reclaim_gang_run(att.job_id, att.attempt, att.gang_runs)
    return paths.attempt_log_path(att.job_id, att.attempt)


log = logging.getLogger("launcher.jobs.controller")


def note_controller_restart(att: AttemptRow, *, adopted: bool) -> str:
    """Say in the attempt's setup log (and controller.log) that a restarted controller
    found the attempt half-built: it `adopted` the cluster (already running the job), or
    tears it down and builds it again. Returns the line written. Blocking, short."""
    when = time.strftime("%H:%M:%S")
    if adopted:
        line = (f"=== {when} the controller restarted and found {att.cluster_name} up and "
                "running the job: adopted ===")
    else:
        line = (f"=== {when} the controller restarted while {att.cluster_name} was being "
                "provisioned or set up: the half-built cluster is torn down and built "
                "again ===")
    path = paths.attempt_log_path(att.job_id, att.attempt).with_suffix(".setup.log")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    log.info("job %d: attempt %d: %s", att.job_id, att.attempt, line.strip("= "))
    return line
