"""Managed jobs: the Python API behind `launcher jobs ...`.

A managed job is submitted to the state DB and driven by the controller process
(started here on demand, one per LAUNCHER_HOME). Nothing here prints; the CLI renders.

    jobs_launch(task, name=None) -> ManagedJob          submit; starts the controller
    jobs_queue() -> list[JobSummary]                    every managed job, oldest first
    jobs_queue_page(offset, limit) -> (page, total)     one page of it, newest first
    jobs_status(job_id) -> JobSummary
    jobs_detail(job_id) -> ManagedJobDetail             + attempts, events
    jobs_cancel(job_id) -> JobSummary                   also during recovery
    jobs_logs(job_id, on_line, follow=True) -> JobSummary
    jobs_wait(job_id, timeout=None) -> JobSummary
    jobs_current_cluster(job_id) -> str                 the cluster it runs on now
    jobs_controller_status() / jobs_controller_start() / jobs_controller_stop()
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import LauncherError, TaskValidationError
from launcher.jobs import log_mirror, paths
from launcher.jobs.accounting import JobSummary, attempt_cost, summarize
from launcher.jobs.daemon import ControllerInfo, probe
from launcher.jobs.recovery import normalize_strategy
from launcher.jobs.store import AttemptRow, EventRow, JobRow, JobStore

if TYPE_CHECKING:
    from launcher.jobs.deadline_store import DeadlineSpec
    from launcher.task.model import Task

LineCallback = Callable[[str], None]


@dataclass(frozen=True)
class ManagedJob:
    id: int
    name: str
    task_id: str
    controller_pid: int | None


@dataclass(frozen=True)
class AttemptView:
    attempt: int
    cluster: str
    cause: str
    where: str
    instance_type: str | None
    num_nodes: int | None
    use_spot: bool | None
    node_price: float | None
    started_at: float
    running_at: float | None
    ended_at: float | None
    outcome: str | None
    reason: str | None
    exit_code: int | None
    recovery_s: float | None
    work_lost_s: float | None
    node_hours: float
    cost: float

    @staticmethod
    def of(a: AttemptRow) -> AttemptView:
        c = attempt_cost(a)
        return AttemptView(
            attempt=a.attempt, cluster=a.cluster_name, cause=a.cause, where=a.where,
            instance_type=a.instance_type, num_nodes=a.num_nodes, use_spot=a.use_spot,
            node_price=a.node_price, started_at=a.created_at, running_at=a.running_at,
            ended_at=a.ended_at, outcome=a.outcome, reason=a.outcome_reason,
            exit_code=a.exit_code, recovery_s=a.recovery_s, work_lost_s=a.work_lost_s,
            node_hours=round(c.node_hours, 6), cost=round(c.cost, 6),
        )


@dataclass(frozen=True)
class PolicySwitch:
    """A DEADLINE job's policy deciding a different mode (spot | on_demand | idle) than
    its previous decision (the first decision included)."""

    at: float
    mode: str
    reason: str


@dataclass(frozen=True)
class ManagedJobDetail:
    summary: JobSummary
    attempts: list[AttemptView]
    events: list[EventRow]
    policy_switches: list[PolicySwitch] = field(default_factory=list)  # DEADLINE jobs only

    def to_json(self) -> dict[str, Any]:
        return {
            **self.summary.to_json(),
            "attempts_detail": [asdict(a) for a in self.attempts],
            "events": [asdict(e) for e in self.events],
            "policy_switches": [asdict(p) for p in self.policy_switches],
        }


def _policy_switches(store: JobStore, job: JobRow) -> list[PolicySwitch]:
    if job.deadline is None:
        return []
    from launcher.jobs import deadline_store as dl

    out: list[PolicySwitch] = []
    for r in dl.log_rows(store, job.id):
        if r.kind == "decision" and r.mode and (not out or out[-1].mode != r.mode):
            out.append(PolicySwitch(r.at, r.mode, r.reason))
    return out


def _validate(task: Task) -> None:
    """Refuse, before the job is queued (so before anything is provisioned), what an
    attempt could not run: missing env/secret values, bucket mounts a launch cannot do
    or has no credentials for (as `launch` does), a checkpoint store this machine cannot
    use (checked with one read request), a task without `run`."""
    task.check_values()  # every env/secret needs a value before the job is queued
    from launcher.jobs.checkpoint_store import require_store_access
    from launcher.runtime.storage_nodes import plan_bucket_copies, require_credentials

    require_credentials(task, plan_bucket_copies(task))  # MOUNT mode, no credentials...
    require_store_access(task)
    if not task.run:
        raise TaskValidationError("a managed job needs a `run` command.", field="run",
                                  source=task.source_path)


def jobs_check_feasible(task: Task) -> Any:
    """The task's Plan when some enabled cloud can run it now (placement index
    `chosen`). Raises NoPlacementError (explained per constraint) when no offer fits,
    or when none of the offers that fit is launchable here (failover.nothing_launchable_message)."""
    from launcher.api.planning import plan
    from launcher.errors import NoPlacementError

    p = plan(task)
    if p.chosen is None:
        from launcher.provisioning.failover import nothing_launchable_message

        raise NoPlacementError(nothing_launchable_message(p, "this managed job"))
    return p


def jobs_launch(task: Task | str, name: str | None = None, *, start_controller: bool = True,
                check: bool = True) -> ManagedJob:
    """Submit `task` (a Task or a YAML path) as a managed job. Returns at once.

    Unless `check=False` (the caller checked already), the task must be feasible now
    (`jobs_check_feasible`). Raises TaskValidationError for a bad task (including an
    unknown job_recovery strategy), NoPlacementError for an unsatisfiable one."""
    from launcher.task.model import Task as TaskCls

    t = TaskCls.from_yaml(task) if isinstance(task, str) else task
    _validate(t)
    if check:
        jobs_check_feasible(t)
    rec = t.job_recovery
    try:
        strategy = normalize_strategy(rec.strategy if rec else None)
    except ValueError as exc:
        raise TaskValidationError(str(exc), field="resources.job_recovery.strategy",
                                  source=t.source_path) from None
    deadline = deadline_spec(t, time.time())
    job_name = name or t.name or (Path(t.source_path).stem if t.source_path else "managed-job")
    store = JobStore()
    try:
        row = store.add_job(
            name=job_name,
            task_yaml=json.dumps(t.to_dict()),  # secret values: their own file, see below
            secrets=t.secrets,
            task_source=t.source_path,
            strategy=strategy,
            max_restarts_on_errors=rec.max_restarts_on_errors if rec else 0,
            recover_on_exit_codes=rec.recover_on_exit_codes if rec else (),
            deadline=deadline,
        )
    finally:
        store.close()
    pid = jobs_controller_start().pid if start_controller else None
    return ManagedJob(row.id, row.name, row.task_id, pid)


def deadline_spec(t: Task, now: float) -> DeadlineSpec | None:
    """The DEADLINE strategy's settings of `t` submitted at `now` (None for another strategy).

    Raises TaskValidationError (naming the field) for a deadline job without spot in its
    resources (nothing to save), an absolute deadline already past, or one that cannot be
    met even on on-demand from now (duration + restart overhead > time left)."""
    from launcher.jobs.deadline_store import DeadlineSpec
    from launcher.spot.policy import DEFAULT_POLICY
    from launcher.task.policies import DEFAULT_RESTART_OVERHEAD_S, format_deadline_at, span_text

    rec = t.job_recovery
    if rec is None or not rec.is_deadline:
        return None
    field = "resources.job_recovery"
    if not any(c.use_spot for c in t.candidates()):
        raise TaskValidationError(
            "the deadline strategy chooses between spot and on-demand, but no resource "
            "alternative asks for spot: nothing to save. Add 'use_spot: true' (or use "
            "another strategy).", field="resources.use_spot", source=t.source_path)
    assert rec.duration_hours is not None
    work_s = rec.duration_hours * 3600.0
    overhead = None if rec.restart_overhead_minutes is None else rec.restart_overhead_minutes * 60
    if rec.deadline_at is not None:
        at = rec.deadline_at
        if at <= now:
            raise TaskValidationError(
                f"the deadline {format_deadline_at(at)} is already past.",
                field=f"{field}.deadline", source=t.source_path)
    else:
        assert rec.deadline_hours is not None
        at = now + rec.deadline_hours * 3600.0
    need = work_s + (DEFAULT_RESTART_OVERHEAD_S if overhead is None else overhead)
    if need > at - now:
        raise TaskValidationError(
            f"the deadline cannot be met even on on-demand: {span_text((at - now) / 3600)} are "
            f"left, the job needs {span_text(work_s / 3600)} of work plus a restart overhead of "
            f"{span_text((need - work_s) / 3600)}.", field=f"{field}.deadline", source=t.source_path)
    return DeadlineSpec(at, work_s, overhead, rec.progress, rec.policy or DEFAULT_POLICY)


def ensure_controller() -> ControllerInfo | None:
    """Start the controller when managed jobs are live and none runs (their statuses
    would go stale otherwise). Returns the new controller's info when one was started,
    None when nothing was needed."""
    store = JobStore()
    try:
        live = bool(store.live_job_ids())
    finally:
        store.close()
    if not live or probe().running:
        return None
    return jobs_controller_start()


def jobs_queue() -> list[JobSummary]:
    store = JobStore()
    try:
        now = time.time()
        return [summarize(j, store.attempts(j.id), now, deadline=_deadline(store, j, now))
                for j in store.jobs()]
    finally:
        store.close()


def jobs_queue_page(offset: int = 0, limit: int = 50, *, only: set[int] | None = None,
                    newest_first: bool = True) -> tuple[list[JobSummary], int]:
    """One page of `jobs_queue()` (newest first by default) and how many jobs there are
    in all; with `only`, just those job ids. Summarizes only the page's jobs, so a page
    costs the same with 20 or 20,000 jobs in the DB."""
    store = JobStore()
    try:
        rows = [j for j in store.jobs() if only is None or j.id in only]
        if newest_first:
            rows.reverse()
        now = time.time()
        page = rows[max(0, offset): max(0, offset) + max(0, limit)]
        return ([summarize(j, store.attempts(j.id), now, deadline=_deadline(store, j, now))
                 for j in page], len(rows))
    finally:
        store.close()


def jobs_status(job_id: int) -> JobSummary:
    """Raises ManagedJobNotFoundError."""
    store = JobStore()
    try:
        job = store.job(job_id)
        return summarize(job, store.attempts(job_id), deadline=_deadline(store, job))
    finally:
        store.close()


def _deadline(store: JobStore, job: JobRow, now: float | None = None) -> Any:
    """A DEADLINE job's DeadlineStatus (None for other jobs)."""
    if job.deadline is None:
        return None
    from launcher.jobs import deadline_store as dl

    return dl.deadline_status(job, dl.log_rows(store, job.id), time.time() if now is None
                              else now, dl.local_checkpoint_dirs(store.attempts(job.id)))


def jobs_detail(job_id: int) -> ManagedJobDetail:
    store = JobStore()
    try:
        job = store.job(job_id)
        attempts = store.attempts(job_id)
        return ManagedJobDetail(summarize(job, attempts, deadline=_deadline(store, job)),
                                [AttemptView.of(a) for a in attempts],
                                store.events(job_id), _policy_switches(store, job))
    finally:
        store.close()


def jobs_cancel(job_id: int) -> JobSummary:
    """Ask the controller to cancel the job (idempotent; a finished job is left as is).
    Starts the controller if none runs, so the request is acted on."""
    store = JobStore()
    try:
        job = store.job(job_id)
        if not job.status.is_terminal:
            store.request_cancel(job_id)
            jobs_controller_start()
        return summarize(store.job(job_id), store.attempts(job_id))
    finally:
        store.close()


def jobs_wait(job_id: int, timeout: float | None = None, poll_s: float = 0.2) -> JobSummary:
    """Block until the job reaches a terminal status (or `timeout` passes)."""
    end = None if timeout is None else time.monotonic() + timeout
    store = JobStore()
    try:
        while True:
            job = store.job(job_id)
            if job.status.is_terminal or (end is not None and time.monotonic() >= end):
                return summarize(job, store.attempts(job_id))
            time.sleep(poll_s)
    finally:
        store.close()


def jobs_current_cluster(job_id: int) -> str:
    """The cluster a managed job runs on now (its latest attempt's, what `jobs queue`
    shows). Raises ManagedJobNotFoundError; LauncherError when the job has ended, has no
    cluster right now (waiting, or between attempts), or is still starting on one
    (provisioning or setup: name that cluster to preempt it there)."""
    from launcher.jobs.store import AttemptPhase

    store = JobStore()
    try:
        job = store.job(job_id)
        attempts = store.attempts(job_id)
    finally:
        store.close()
    if job.status.is_terminal:
        raise LauncherError(f"Managed job {job_id} has ended ({job.status.value}): "
                            "it has no cluster to preempt.")
    current = attempts[-1] if attempts else None
    if current is None or current.torn_down_at is not None or current.phase == AttemptPhase.ENDED:
        raise LauncherError(
            f"Managed job {job_id} has no cluster right now ({job.status.value}). Try again "
            "when `launcher jobs queue` shows its cluster.")
    if current.phase == AttemptPhase.PROVISIONING:
        raise LauncherError(
            f"Managed job {job_id} is still starting on cluster {current.cluster_name} "
            f"(provisioning or setup). Preempt it once it runs, or now by name: "
            f"`launcher local preempt {current.cluster_name}`.")
    return current.cluster_name


# ---- logs -----------------------------------------------------------------------------


_SETUP_PREFIX = re.compile(r"\(setup(?: \d+)?\) ")


def setup_line(line: str) -> str:
    """A line of an attempt's saved setup log as `jobs logs` shows it: the setup's own
    output already carries its "(setup) " / "(setup N) " prefix (run_setup adds it); the
    launch's progress lines saved beside it get "(setup) "."""
    return line if _SETUP_PREFIX.match(line) else f"(setup) {line}"


def _show_new_setup_lines(path: Path, already: int, on_line: LineCallback) -> int:
    """Show the complete lines of an attempt's setup log after the first `already`
    (setup_line); returns how many complete lines there are now."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return already
    lines = text.split("\n")[:-1]  # the part after the last newline is still being written
    for line in lines[already:]:
        on_line(setup_line(line))
    return max(already, len(lines))


def attempt_header(a: AttemptRow) -> str:
    what = a.instance_type or "?"
    nodes = f"{a.num_nodes}x " if a.num_nodes else ""
    return (f"=== attempt {a.attempt} ({a.cause}) on {a.where}: {nodes}{what}"
            f"{' spot' if a.use_spot else ''}, cluster {a.cluster_name} ===")


def attempt_footer(a: AttemptRow) -> str:
    why = f": {a.outcome_reason}" if a.outcome_reason else ""
    return f"=== attempt {a.attempt} ended {a.outcome or 'ENDED'}{why} ==="


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


def jobs_logs(job_id: int, on_line: LineCallback, *, follow: bool = True,
              poll_s: float = 0.3, stop: threading.Event | None = None) -> JobSummary:
    """Write the job's output to `on_line`, every attempt in order, each headed by where
    it ran. Past attempts come from the local copies the controller keeps; the
    current one is streamed from its cluster. With `follow`, returns when the job
    has ended (its final summary); else after one pass.

    With `stop` (the API server, whose follower may vanish): the live attempt is polled
    in short incremental reads instead of one long stream, and the call returns (the
    summary so far) within `poll_s` of `stop` being set, leaving no thread behind."""
    from launcher.jobs.cluster_ops import RealClusterOps

    ops = RealClusterOps()
    store = JobStore()
    done: set[int] = set()
    # When the controller was last made sure of (following a live job): the caller (the
    # CLI) ensures one at the start, so the first check here comes 5 s later.
    checked = time.monotonic()
    shown: dict[int, int] = {}  # attempt -> job lines already shown
    setup_shown: dict[int, int] = {}  # attempt -> setup-phase lines already shown
    headed: set[int] = set()
    runs: dict[int, int] = {}  # attempt -> the gang run being shown
    try:
        while True:
            log_mirror.pull(job_id)  # a team server: saved output another replica wrote
            job = store.job(job_id)
            attempts = store.attempts(job_id)
            for a in attempts:
                if a.attempt in done:
                    continue
                saved = paths.attempt_log_path(job_id, a.attempt)
                finished = a.torn_down_at is not None or a.phase == "ENDED"
                if (finished and a.cloud is None and a.market == "spot"
                        and a.outcome == "NO_RESOURCE_RETRY"):
                    done.add(a.attempt)  # a deadline job's refused spot launch: not output
                    continue  # (`jobs logs --controller` shows the decisions)
                if a.cloud is None and not finished:
                    break  # still provisioning: nothing to show yet
                if a.attempt not in headed:
                    on_line(attempt_header(a))
                    headed.add(a.attempt)
                # the setup phase's lines, as they come (setup runs after the header)
                setup_shown[a.attempt] = _show_new_setup_lines(
                    saved.with_suffix(".setup.log"), setup_shown.get(a.attempt, 0), on_line)
                # Earlier gang runs of this attempt (nodes replaced in place): their saved
                # copies end with a line saying why the gang restarted.
                while runs.get(a.attempt, 1) < a.gang_runs:
                    run = runs.get(a.attempt, 1)
                    path = paths.gang_run_log_path(job_id, a.attempt, run)
                    for line in _read_lines(path)[shown.get(a.attempt, 0):]:
                        on_line(line)
                    shown[a.attempt] = 0
                    runs[a.attempt] = run + 1
                if a.torn_down_at is not None or (finished and saved.exists()):
                    if not shown.get(a.attempt):
                        # the attempt's output left in a gang run's copy by a replacement
                        # that never restarted the gang (controllers before the fix kept
                        # it there: see jobs/log_sync.reclaim_gang_run)
                        for line in _read_lines(paths.gang_run_log_path(
                                job_id, a.attempt, a.gang_runs)):
                            on_line(line)
                    for line in _read_lines(saved)[shown.get(a.attempt, 0):]:
                        on_line(line)
                    on_line(attempt_footer(a))
                    done.add(a.attempt)
                    continue
                if a.cluster_job_id is None:
                    break
                # Live: stream from the cluster (follow) or take a snapshot. The stream is
                # given up as soon as the controller decides the attempt's outcome (a
                # preempted head may never report its job as ended); the rest of its
                # output then comes from the copy the controller saves.
                if stop is not None and follow:
                    shown[a.attempt] = _poll_live(ops, store, a, on_line,
                                                  shown.get(a.attempt, 0), stop, poll_s)
                else:
                    shown[a.attempt] = _stream_live(ops, store, a, on_line,
                                                    shown.get(a.attempt, 0), follow)
                break
            if not follow:
                return summarize(job, attempts)
            if job.status.is_terminal and len(done) == len(attempts):
                return summarize(job, attempts)
            if not job.status.is_terminal and time.monotonic() - checked > 5.0:
                # nobody would ever end the job without a controller: start one
                checked = time.monotonic()
                ensure_controller()
            if stop is None:
                time.sleep(poll_s)
            elif stop.wait(poll_s):
                return summarize(job, attempts)
    finally:
        store.close()


def _poll_live(ops: Any, store: JobStore, a: AttemptRow, on_line: LineCallback, already: int,
               stop: threading.Event, poll_s: float) -> int:
    """Follow attempt `a`'s output by incremental reads every `poll_s` (no long-lived
    stream or thread), skipping the first `already` lines, until the controller decides
    the attempt (its saved copy then follows) or `stop` is set. Returns how many lines
    have now been shown."""
    seen = 0
    offsets: dict[int, int] = {}

    def emit(line: str) -> None:
        nonlocal seen
        seen += 1
        if seen > already:
            on_line(line.rstrip("\n"))

    checked = time.monotonic()
    while not stop.is_set():
        with contextlib.suppress(Exception):  # unreachable head: try again, then the copy
            offsets = ops.fetch_log_since(a.cluster_name, a.cluster_job_id, offsets, emit)
        now = store.attempt(a.job_id, a.attempt)
        if (now.outcome is not None or now.phase == "ENDED"
                or now.cluster_job_id != a.cluster_job_id or now.gang_runs != a.gang_runs):
            break  # decided, or the gang restarted: its saved copy follows
        if time.monotonic() - checked > 5.0:  # a dead controller would never decide
            checked = time.monotonic()
            ensure_controller()
        stop.wait(poll_s)
    return max(already, seen)


def _stream_live(ops: Any, store: JobStore, a: AttemptRow, on_line: LineCallback, already: int,
                 follow: bool) -> int:
    """Stream attempt `a`'s output from its cluster, skipping the first `already` lines.
    Returns how many lines have now been shown."""
    lock = threading.Lock()
    stopped = threading.Event()
    seen = 0

    def emit(line: str) -> None:
        nonlocal seen
        with lock:
            if stopped.is_set():
                return
            seen += 1
            if seen > already:
                on_line(line.rstrip("\n"))

    def work() -> None:
        with contextlib.suppress(Exception):  # unreachable node: the saved copy follows
            ops.fetch_logs(a.cluster_name, a.cluster_job_id, emit, follow)

    t = threading.Thread(target=work, daemon=True, name=f"logs-{a.cluster_name}")
    t.start()
    if not follow:
        t.join(30.0)
    checked = time.monotonic()
    while t.is_alive():
        t.join(0.3)
        now = store.attempt(a.job_id, a.attempt)
        if (now.outcome is not None or now.phase == "ENDED"
                or now.cluster_job_id != a.cluster_job_id or now.gang_runs != a.gang_runs):
            t.join(1.0)  # decided, or the gang restarted: its saved copy follows
            break
        if time.monotonic() - checked > 5.0:  # a dead controller would never decide
            checked = time.monotonic()
            ensure_controller()
    with lock:
        stopped.set()
        return max(already, seen)


def controller_log_lines(job_id: int | None = None) -> list[str]:
    """The controller's log (only lines about `job_id` when given)."""
    lines = _read_lines(paths.controller_log_path())
    if job_id is None:
        return lines
    tag = f"job {job_id}:"
    return [ln for ln in lines if tag in ln]


# ---- the controller process ---------------------------------------------------------------


def jobs_controller_status() -> ControllerInfo:
    return probe()


def jobs_controller_start(wait_s: float = 5.0) -> ControllerInfo:
    """Start the controller unless one runs. Returns once it holds its lock (or the
    wait expires: the process may still be starting). Idempotent."""
    info = probe()
    if info.running:
        return info
    JobStore().close()  # a damaged state DB: say so here, not in a controller that dies
    paths.jobs_dir().mkdir(parents=True, exist_ok=True)
    with open(paths.controller_log_path(), "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "launcher.jobs.daemon"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            close_fds=True, env=dict(os.environ),
        )
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        info = probe()
        if info.running:
            return info
        if proc.poll() is not None:  # lost the race to another controller, or died
            return probe()
        time.sleep(0.02)
    return probe()


def jobs_controller_stop(timeout: float = 30.0) -> ControllerInfo:
    """SIGTERM the controller and wait for it to let go of its lock. Jobs keep running
    on their clusters; the next controller resumes them."""
    info = probe()
    if not info.running or info.pid is None:
        return info
    pid = info.pid
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return probe()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        info = probe()
        if not info.running:
            return info
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)  # the daemon writes its threads' stacks to its log
    raise LauncherError(
        f"The controller (pid {pid}) did not stop within {timeout:.0f} s; the stacks of "
        f"its threads (what it is waiting on) are at the end of {paths.controller_log_path()}."
    )


def server_replicas() -> list[dict[str, Any]] | None:
    """On a team server (the state DB on a database server): the server replicas sharing
    it, each with how many managed jobs it holds a lease on (launcher/jobs/leases.py).
    None with the embedded SQLite file (one server, no leases)."""
    from launcher.jobs import leases

    if not leases.enabled():
        return None
    store = JobStore()
    try:
        return leases.replicas(store)
    finally:
        store.close()
