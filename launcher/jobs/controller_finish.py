"""Applying attempt outcomes, draining noticed attempts, saving logs, teardown, cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from launcher.jobs import log_sync, paths
from launcher.jobs.cluster_ops import lost_nodes
from launcher.jobs.controller_base import ControllerBase
from launcher.jobs.controller_types import FINAL_STATUS, Outcome
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")


class FinishMixin(ControllerBase):
    def _decide(self, job: JobRow, att: AttemptRow, outcome: str, *, reason: str,
                exit_code: int | None = None,
                attempt_fields: dict[str, object] | None = None) -> None:
        """Record the attempt's outcome (before any side effect). `_drive` applies it."""
        self._on_decided(job, att, outcome, reason)
        self.store.update_attempt(job.id, att.attempt, outcome=outcome, exit_code=exit_code,
                                  outcome_reason=reason, **(attempt_fields or {}))

    def _on_decided(self, job: JobRow, att: AttemptRow, outcome: str, reason: str) -> None:
        """Hook: an outcome of `att` is about to be recorded (the deadline log's)."""

    async def _apply_outcome(self, job: JobRow, att: AttemptRow) -> None:
        """Apply a recorded, not yet applied outcome. Idempotent side effects first for
        final outcomes; for recoveries the old cluster is cleaned up in the background."""
        outcome = att.outcome
        assert outcome is not None
        reason = att.outcome_reason or f"attempt {outcome.lower()}"
        now = time.time()
        final = FINAL_STATUS.get(outcome)
        if final is not None:
            await self._finalize_attempt(att, fetch_logs=att.phase == AttemptPhase.RUNNING)
            self._hit("teardown_done")
            self.store.transition(
                job.id, final, reason, attempt=att.attempt,
                attempt_fields={"phase": AttemptPhase.ENDED, "ended_at": att.ended_at or now,
                                "outcome_applied": 1},
                ended_at=now, exit_code=att.exit_code,
                failure_reason=None if final == S.SUCCEEDED else reason,
            )
            return
        draining = att.drain_until is not None and att.phase == AttemptPhase.RUNNING
        afields: dict[str, object] = {"outcome_applied": 1}
        if not draining:
            afields.update(phase=AttemptPhase.ENDED, ended_at=att.ended_at or now)
        jfields: dict[str, Any] = {}
        if outcome in (Outcome.PREEMPTED, Outcome.EXIT_CODE):
            jfields["recoveries"] = job.recoveries + 1
        elif outcome == Outcome.ERROR_RESTART:
            jfields["restarts_on_errors"] = job.restarts_on_errors + 1
        target = S.RECOVERING if job.status in (S.RUNNING, S.STARTING) else None
        if outcome in (Outcome.NO_RESOURCE_RETRY, Outcome.LAUNCH_ERROR):
            target = None
        self.store.transition(job.id, target, reason, attempt=att.attempt,
                              attempt_fields=afields, **jfields)
        if outcome == Outcome.PREEMPTED:
            self._hit("preemption_recorded")
        if not draining:
            self._finalize_bg(self.store.attempt(job.id, att.attempt),
                              fetch_logs=att.phase == AttemptPhase.RUNNING)

    def _ensure_drain(self, job: JobRow, att: AttemptRow) -> asyncio.Task[None]:
        key = (job.id, att.attempt)
        t = self._drains.get(key)
        if t is None or t.done():
            until = att.drain_until or (att.preempted_at or time.time()) + self.cfg.max_drain_s
            t = asyncio.ensure_future(self._drain(att, until))
            self._drains[key] = t
            self._background.add(t)
            t.add_done_callback(self._background_done)
        return t

    async def _drain(self, att: AttemptRow, until: float) -> None:
        """Wait for a noticed attempt's job to end (its checkpoint written) or its nodes
        to go, or the deadline; then end it and tear its cluster down."""
        while time.time() < until and att.cluster_job_id is not None:
            try:
                run = await self._watch_call(self.ops.job_status, att.cluster_name,
                                             att.cluster_job_id)
                if run.status.is_terminal:
                    break
                view = await self._watch_call(self.ops.cloud_view, att.cluster_name)
                if lost_nodes(view, att.node_ids):
                    break
            except Exception:
                pass
            await asyncio.sleep(min(0.25, max(0.0, until - time.time())))
        self.store.update_attempt(att.job_id, att.attempt, phase=AttemptPhase.ENDED,
                                  ended_at=time.time())
        self._hit("drain_ended")
        await self._finalize_attempt(self.store.attempt(att.job_id, att.attempt), fetch_logs=True)

    def _finalize_bg(self, att: AttemptRow, *, fetch_logs: bool) -> asyncio.Task[None]:
        """`_finalize_attempt` in the background, at most once at a time per attempt."""
        key = (att.job_id, att.attempt)
        t = self._finalizing.get(key)
        if t is None or t.done():
            t = self._spawn(self._finalize_attempt(att, fetch_logs=fetch_logs))
            self._finalizing[key] = t
            t.add_done_callback(lambda _t: self._finalizing.pop(key, None))
        return t

    async def _old_clusters_gone(self, attempts: list[AttemptRow]) -> None:
        """Before a new attempt is provisioned: make sure every earlier attempt's cluster
        is being torn down (starting that where nobody has) and wait for it, so a job
        never has two clusters at once - except a preempted one whose every node the
        cloud reports lost (nothing can run there; a partly lost cluster, or one an
        interrupted in-place replacement may have restarted, is waited for): its teardown runs in the background while the next attempt provisions (its
        DB row tracks it: outcome PREEMPTED applied, `torn_down_at` still NULL, so a
        restarted controller's startup sweep finishes it), and one draining after an
        interruption notice, by design."""
        waits = []
        for a in attempts:
            if (a.torn_down_at is not None or a.outcome is None
                    or (a.phase == AttemptPhase.RUNNING and a.drain_until)):
                continue  # gone, undecided, or draining (its drain tears it down)
            t = self._finalize_bg(a, fetch_logs=a.phase == AttemptPhase.RUNNING)
            if not (a.outcome == Outcome.PREEMPTED and a.outcome_applied
                    and await self._all_nodes_lost(a)):
                waits.append(t)  # a cluster whose every node is lost goes in the background
        for result in await asyncio.gather(*waits, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("an earlier cluster was not torn down (%r): launching anyway",
                            result)

    async def _finalize_attempt(self, att: AttemptRow, *, fetch_logs: bool) -> None:
        """Save the attempt's logs locally (retried, see `_save_logs_retrying`), then tear
        its cluster down: only once the logs are safe or the tries are spent."""
        if att.torn_down_at is not None:
            return
        if fetch_logs and att.cluster_job_id is not None:
            saved = await self._save_logs_retrying(att)
            log.info("job %d: taking %s down (%s)", att.job_id, att.cluster_name,
                     "its logs are saved" if saved else "its logs could not be fetched")
        for delay in (1.0, 2.0, 4.0, 8.0, None):
            try:
                await self._launch_call(self.ops.teardown, att.cluster_name)
                break
            except Exception as exc:
                if delay is None:
                    raise  # left for the next controller's startup sweep
                log.warning("teardown of %s failed (%r); retrying in %.0f s",
                            att.cluster_name, exc, delay)
                await asyncio.sleep(delay)
        self.store.update_attempt(att.job_id, att.attempt, torn_down_at=time.time())

    async def _save_logs_retrying(self, att: AttemptRow, path: Path | None = None,
                                  trailer: str | None = None) -> bool:
        """Save the output of the attempt's current gang run to `path` (default: the
        attempt's log), fetching it up to `log_fetch_tries` times, backing off between
        tries; the caller keeps the cluster up meanwhile. Tries once when the cloud
        reports the head node gone, and once more at most when it goes meanwhile. True once saved whole; what is saved is never
        replaced by a failed or partial fetch (see `_save_logs`). Says in controller.log
        how it went."""
        path = path or log_sync.reclaimed_log_path(att)
        # A head already gone (preempted) is tried once: its node does not come back; not
        # at all when its logs went with it (what the watch synced is what there is).
        gone = await self._head_gone(att)
        if gone and not await self._records_survive(att):
            await self._launch_call(self._mark_log_end, att, path, trailer)
            log.info("job %d: %s's head node is gone with its logs: %s keeps the output "
                     "synced while it ran", att.job_id, att.cluster_name, path.name)
            return False
        tries = 1 if gone else max(1, self.cfg.log_fetch_tries)
        delay = self.cfg.log_fetch_backoff_s
        error = "not tried"
        had = _has_content(path)
        i = 0
        while True:
            i += 1
            err = await self._launch_call(self._save_logs, att, path, trailer, i >= tries)
            if err is None:
                if i > 1:
                    log.info("job %d: logs of %s saved to %s on try %d", att.job_id,
                             att.cluster_name, path.name, i)
                return True
            error = err
            if i >= tries:
                break
            if await self._head_gone(att):
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

    async def _all_nodes_lost(self, att: AttemptRow) -> bool:
        """True when the cloud reports every node of the attempt lost."""
        if not att.node_ids:
            return False
        try:
            view = await self._watch_call(self.ops.cloud_view, att.cluster_name)
        except Exception:
            return False
        return set(att.node_ids) <= set(lost_nodes(view, att.node_ids))

    async def _records_survive(self, att: AttemptRow) -> bool:
        try:
            return bool(await self._watch_call(self.ops.records_survive_loss, att.cluster_name))
        except Exception:
            return False

    async def _head_gone(self, att: AttemptRow) -> bool:
        """True when the cloud reports the attempt's head node gone (no log to wait for)."""
        if not att.node_ids:
            return False
        try:
            view = await self._watch_call(self.ops.cloud_view, att.cluster_name)
        except Exception:
            return False
        return att.node_ids[0] in lost_nodes(view, att.node_ids[:1])

    def _mark_log_end(self, att: AttemptRow, path: Path, trailer: str | None) -> None:
        """End `path` (the output synced while the run went on) with a line saying its
        head node was lost, then `trailer`. Blocking."""
        self._stop_log_sync(att)
        path.parent.mkdir(parents=True, exist_ok=True)
        synced = paths.attempt_log_path(att.job_id, att.attempt)
        if path != synced and _has_content(synced):  # a gang run ended by a node loss
            os.replace(synced, path)
        with open(path, "a", encoding="utf-8") as f:
            _write_line(f, f"=== {att.cluster_name}'s head node was lost: output after the "
                        "last sync (a few seconds at most) is missing ===")
            if trailer:
                _write_line(f, trailer)

    def _save_logs(self, att: AttemptRow, path: Path | None = None,
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
                self._stop_log_sync(att)
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
                    self.ops.fetch_logs(att.cluster_name, att.cluster_job_id, on_line, False)
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
            self._stop_log_sync(att)  # the whole log replaces the synced copy
            os.replace(tmp, path)
            return error
        finally:
            tmp.unlink(missing_ok=True)

    def _stop_log_sync(self, att: AttemptRow) -> None:
        """No more incremental appends to the attempt's log (see log_sync)."""
        sync = self._log_syncs.pop((att.job_id, att.attempt), None)
        if sync is not None:
            sync.close()
        else:
            with contextlib.suppress(FileNotFoundError):
                p = paths.attempt_log_path(att.job_id, att.attempt)
                p.with_name(p.name + ".sync").unlink()

    async def _teardown_all(self, job_id: int) -> None:
        for a in self.store.attempts(job_id):
            await self._finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING)

    async def _cancel(self, job_id: int) -> None:
        job = self.store.job(job_id)
        if job.status.is_terminal:
            return
        for a in self.store.attempts(job_id):
            if a.torn_down_at is not None:
                continue
            if a.phase == AttemptPhase.RUNNING and a.cluster_job_id is not None:
                try:
                    await self._launch_call(self.ops.cancel_job, a.cluster_name, a.cluster_job_id)
                except Exception as exc:
                    log.info("job %d: cancel on %s failed: %r", job_id, a.cluster_name, exc)
            if a.outcome is None:
                self.store.update_attempt(job_id, a.attempt, outcome=Outcome.CANCELLED,
                                          outcome_applied=1, phase=AttemptPhase.ENDED,
                                          ended_at=time.time())
            await self._finalize_attempt(a, fetch_logs=a.phase == AttemptPhase.RUNNING)
        self._hit("cancel_attempts_ended")
        self.store.transition(job_id, S.CANCELLED, "cancelled by the user",
                              ended_at=time.time(), failure_reason="cancelled")


class _LineSink:
    """Append lines to a file, opened lazily (called from worker threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line.rstrip("\n") + "\n")


def _write_line(f: Any, line: str) -> None:
    f.write(line.rstrip("\n") + "\n")


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False
