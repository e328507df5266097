"""The agent's long-lived daemon: queue, gang supervision, notices, autostop. STDLIB ONLY.

Shipped next to agent.py and started by `python3 agent.py daemon` (detached by
`start_daemon`). One daemon per agent home, guaranteed by a flock on
daemon.lock. It is single-threaded: it sleeps in one `select` on its wake FIFO,
a SIGCHLD self-pipe and an inotify watch of its home (for notice files), with a
timeout only for deadlines (SIGKILL after grace, autostop, polled notice sources).

Restart-safe: rank processes write their own log and control files, so a new
daemon adopts the RUNNING job of a dead one (polling its pids, the only polled
path) and keeps the PENDING queue.

Disk-full-safe: writes of its own that fail for want of space never stop the loop.
It holds RESERVE_BYTES in disk.reserve and frees them when a DB write fails, so a
job's end is still recorded; a job whose log file system fills up gets its logs
marked truncated (logs/JOB/.truncated; `logs` then ends with "log truncated: no
space left on MOUNT"); the reserve is taken back once there is room again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

# Lean on purpose (no dataclasses/typing/selectors/socket/traceback at import): one daemon
# runs per cluster, hundreds of them on one machine in the local cloud's scale tests.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.runtime import agent as core
    from launcher.runtime import agent_autostop as autostop
    from launcher.runtime import agent_disk as disk
    from launcher.runtime import agent_notices as notices
    from launcher.runtime import agent_storage as storage
    from launcher.runtime import agent_watch as watch
else:
    try:
        from . import agent as core
        from . import agent_autostop as autostop
        from . import agent_disk as disk
        from . import agent_notices as notices
        from . import agent_storage as storage
        from . import agent_watch as watch
    except ImportError:  # on the node: a sibling of agent.py
        import agent as core
        import agent_autostop as autostop
        import agent_disk as disk
        import agent_notices as notices
        import agent_storage as storage
        import agent_watch as watch

ADOPTED_POLL_S = 0.25
SAFETY_WAKE_S = 30.0  # everything is event-driven; this only bounds a missed wake-up
# Killing a rank group on a node the head cannot reach (network cut) is retried in the
# background: attempt N waits min(2 N, 15) s, up to KILL_RETRY_MAX attempts (~10 min).
KILL_RETRY_MAX = 40
# Disk space: while a job runs its log file system is checked every DISK_CHECK_S; under
# DISK_FULL_BYTES free, the job's logs are marked truncated. The daemon holds RESERVE_BYTES
# in disk.reserve, released when a write of its own fails for want of space.
DISK_CHECK_S = 2.0
DISK_FULL_BYTES = 4096
RESERVE_BYTES = 128 * 1024


# --------------------------------------------------------------------------- notices

# The sources (local files, AWS/GCP/Azure metadata) live in agent_notices.py.
NOTICE_SOURCES = notices.NOTICE_SOURCES



# --------------------------------------------------------------------------- supervision state


class RankProc:
    """One rank's local process: the wrapper (`bash -s`) or the ssh client carrying it."""

    __slots__ = ("rank", "worker", "pid", "proc", "ctl_path", "ended", "exit_code")

    def __init__(self, rank: int, worker: core.WorkerAccess, pid: int,
                 proc: subprocess.Popen[bytes] | None, ctl_path: str, ended: bool = False,
                 exit_code: int | None = None) -> None:
        self.rank = rank
        self.worker = worker
        self.pid = pid
        self.proc = proc  # None: adopted from an earlier daemon, polled by pid
        self.ctl_path = ctl_path
        self.ended = ended
        self.exit_code = exit_code


class RunningJob:
    __slots__ = ("id", "ranks", "failure", "stopping", "kill_at", "killed", "notice",
                 "truncated", "watch", "health")

    def __init__(self, job_id: int) -> None:
        self.id = job_id
        self.ranks: list[RankProc] = []
        self.failure: tuple[int, int, str] | None = None  # first failed (rank, code, reason)
        self.stopping: str | None = None  # "cancel" | "failure"
        self.kill_at: float | None = None  # monotonic time of the SIGKILL round
        self.killed = False
        self.notice: dict | None = None
        self.truncated = False  # its logs ran out of disk space
        self.watch: watch.HealthWatch | None = None  # the health watch (agent_watch.py)
        self.health: dict | None = None  # the first failing finding of the watch


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _killpg(pgid: int, sig: int) -> None:
    if pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_AGENT_")}


class Daemon:
    """Run with `Daemon(paths).run()`; returns when SIGTERM/SIGINT arrives. Jobs keep running."""

    def __init__(self, paths: core.Paths) -> None:
        self.paths = paths
        self.conn = core.connect(paths)
        self.job: RunningJob | None = None
        self.helpers: list[tuple[subprocess.Popen[bytes], str]] = []
        # ssh kill helpers by pid -> (worker, command, attempt); failed ones wait in retries
        self.ssh_kills: dict[int, tuple[core.WorkerAccess, str, int]] = {}
        self.kill_retries: list[tuple[float, core.WorkerAccess, str, int]] = []
        self.stop_requested = False
        self.draining_until = 0.0  # monotonic: no job starts while a notice's grace runs
        self.waiter = core.Waiter()
        self.base_env = _base_env()
        self.autostop = autostop.Autostop(paths, self.base_env, self._event, self._ssh_helper)
        self.wal_dirty = False  # flush the write-ahead log at the next step
        self.sources: list[notices.NoticeSource] = []
        self.next_poll: dict[str, float] = {}
        self.next_disk_check = 0.0  # monotonic
        self.reserve_held = False

    # ----------------------------------------------------------------- lifecycle

    def run(self) -> int:
        import fcntl

        lock_fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._signal_ready()
            return 0  # another daemon is alive
        info = {"pid": os.getpid(), "version": core.agent_version(self.paths.home),
                "started_at": time.time()}
        self._write_daemon_info(info)
        self._setup_wakeups()
        self._ensure_reserve()
        self._load_sources()
        self._adopt()
        self._forget_ended_secrets()
        self._event("daemon_started", f"pid {os.getpid()}")
        self._signal_ready()
        while not self.stop_requested:
            try:
                self.step()
            except Exception as exc:  # keep supervising; the log says what broke
                self._log_exception(exc)
                time.sleep(1.0)
            if not self.stop_requested:
                self.wait(self.next_timeout())
        if self.job is not None and self.job.watch is not None:
            self.job.watch.close()  # its probes; a new daemon adopting the job starts a watch
        self._event("daemon_stopped", f"pid {os.getpid()}")
        return 0

    def _write_daemon_info(self, info: dict) -> None:
        tmp = self.paths.daemon_info + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(info, f)
            os.replace(tmp, self.paths.daemon_info)
        except OSError:  # a full disk: the lock still guards uniqueness
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    @staticmethod
    def _log_exception(exc: BaseException) -> None:
        """Print a traceback to daemon.log; a log that cannot be written (full disk) is no
        reason to die."""
        import traceback

        with contextlib.suppress(Exception):
            traceback.print_exception(exc)
            sys.stderr.flush()

    # ----------------------------------------------------------------- disk space

    def _db(self, fn: Callable[..., object], *args: object, required: bool = True) -> object:
        """Run one DB write. On a full disk: release the reserve and try once more; then
        raise (required) or give up quietly (best-effort writes such as events)."""
        for attempt in (0, 1):
            try:
                return fn(*args)
            except (sqlite3.Error, OSError) as exc:
                if not disk.is_disk_full(exc):
                    raise
                if attempt == 0 and self._release_reserve():
                    continue
                if required:
                    raise
                return None
        return None

    def _event(self, kind: str, detail: str, job_id: int | None = None) -> None:
        self._db(core.add_event, self.conn, kind, detail, job_id, required=False)

    def _ensure_reserve(self) -> None:
        """Hold RESERVE_BYTES in disk.reserve when there is room for it (and then some)."""
        if self.reserve_held:
            return
        path = self.paths.reserve
        try:
            if os.path.getsize(path) >= RESERVE_BYTES:
                self.reserve_held = True
                return
        except OSError:
            pass
        try:
            if disk.space_left(self.paths.home) < 4 * RESERVE_BYTES:
                return
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, bytes(RESERVE_BYTES))
            finally:
                os.close(fd)
            self.reserve_held = True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _release_reserve(self) -> bool:
        """Free the reserve (True if there was one to free)."""
        held = self.reserve_held or os.path.exists(self.paths.reserve)
        self.reserve_held = False
        with contextlib.suppress(OSError):
            os.unlink(self.paths.reserve)
        return held

    def _check_disk(self, job: RunningJob | None, force: bool = False) -> None:
        """Every DISK_CHECK_S (or now, with `force`): a running job whose log file system
        is full gets its logs marked truncated; the reserve is taken back once there is room."""
        now = time.monotonic()
        if not force and now < self.next_disk_check:
            return
        self.next_disk_check = now + DISK_CHECK_S
        if job is not None and not job.truncated:
            jd = self.paths.job_dir(job.id)
            try:
                full = disk.space_left(jd) < DISK_FULL_BYTES
            except OSError:
                full = False
            if full:
                job.truncated = True
                if not disk.mark_truncated(self.paths.job_dir(job.id), core.TRUNCATED_FILE):
                    self._release_reserve()
                    disk.mark_truncated(self.paths.job_dir(job.id), core.TRUNCATED_FILE)
                self._event("disk_full", "log truncated: " + core.no_space_message(jd), job.id)
        if not self.reserve_held and (job is None or not job.truncated):
            self._ensure_reserve()

    def _signal_ready(self) -> None:
        fd = os.environ.get("LAUNCHER_AGENT_READY_FD")
        if fd and fd.isdigit():
            try:
                os.write(int(fd), b"ready\n")
                os.close(int(fd))
            except OSError:
                pass

    def _setup_wakeups(self) -> None:
        """One poll() over: the wake FIFO, a self-pipe fed by signals (SIGCHLD wakes us
        when a rank exits), and inotify on the home (notice files)."""
        import select

        self.poller = select.poll()
        if not os.path.exists(self.paths.fifo):
            os.mkfifo(self.paths.fifo, 0o600)
        self.fifo_fd = os.open(self.paths.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self._fifo_keep = os.open(self.paths.fifo, os.O_WRONLY | os.O_NONBLOCK)  # no EOF spin
        self.sig_r, sig_w = os.pipe()
        for fd in (self.sig_r, sig_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(sig_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        wake_fds = [self.fifo_fd, self.sig_r]
        if self.waiter.watch(self.paths.home, core.Waiter.IN_CLOSE_WRITE | core.Waiter.IN_MOVED_TO):
            wake_fds.append(self.waiter.fd)
        for fd in wake_fds:
            self.poller.register(fd, select.POLLIN)

    def _on_stop_signal(self, *_: object) -> None:
        self.stop_requested = True

    def _load_sources(self) -> None:
        try:
            names = core.load_nodes(self.paths).notice_sources
        except core.AgentError:
            names = ["local-file"]
        for name in names:
            factory = NOTICE_SOURCES.get(name)
            if factory is None:
                self._event("notice_source_unknown", name)
                continue
            self.sources.append(factory(self.paths, self.conn))

    def wait(self, timeout: float) -> None:
        for fd, _ in self.poller.poll(max(0.0, timeout) * 1000):
            try:
                while os.read(fd, 65536):
                    pass
            except (BlockingIOError, InterruptedError):
                pass

    def next_timeout(self) -> float:
        now = time.monotonic()
        t = SAFETY_WAKE_S
        if self.job is not None:
            if self.job.kill_at is not None and not self.job.killed:
                t = min(t, self.job.kill_at - now)
            if any(r.proc is None and not r.ended for r in self.job.ranks):
                t = min(t, ADOPTED_POLL_S)
        if self.autostop.due_at is not None:
            t = min(t, self.autostop.due_at - time.time())
        if self.draining_until > now:
            t = min(t, self.draining_until - now)
        if self.job is not None and not self.job.truncated:
            t = min(t, self.next_disk_check - now)
        if self.job is not None and self.job.watch is not None:
            t = min(t, self.job.watch.due() - now)
        if self.waiter.fd < 0:
            t = min(t, 1.0)  # notice files are only seen by polling then
        for due in self.next_poll.values():
            t = min(t, due - now)
        for due, *_ in self.kill_retries:
            t = min(t, due - now)
        return max(0.0, t)

    # ----------------------------------------------------------------- one step

    def _forget_ended_secrets(self) -> None:
        """Drop the secret values of every ended job still holding them (an agent of an
        older version, or one killed between a job's end and the scrub)."""
        ended = self.conn.execute(
            "SELECT id FROM jobs WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')").fetchall()
        for (job_id,) in ended:
            with contextlib.suppress(sqlite3.Error, ValueError):
                core.forget_secrets(self.conn, job_id)
        self.wal_dirty = True

    def step(self) -> None:
        if self.wal_dirty:  # a checkpoint a reader blocked: the log may hold old values
            with contextlib.suppress(sqlite3.Error):
                self.wal_dirty = not core.flush_wal(self.conn)
        self._reap_helpers()
        self._check_disk(self.job)
        if self.job is not None:
            self._supervise(self.job)
        if self.job is not None and self.job.watch is not None:
            self._watch_health(self.job)
        self._poll_notices()
        while self.job is None and self._start_next():
            pass
        self._check_autostop()

    def _reap_helpers(self) -> None:
        """Reap helper processes; an ssh kill that could not reach its node (ssh exit 255)
        is retried later, so a rank cut off by the network dies once the node is back."""
        alive = []
        now = time.monotonic()
        for proc, what in self.helpers:
            rc = proc.poll()
            if rc is None:
                alive.append((proc, what))
                continue
            retry = self.ssh_kills.pop(proc.pid, None)
            if retry is not None and rc == 255 and retry[2] < KILL_RETRY_MAX:
                worker, command, attempt = retry
                self.kill_retries.append((now + min(2.0 * attempt, 15.0), worker, command,
                                          attempt + 1))
        self.helpers = alive
        due = [k for k in self.kill_retries if k[0] <= now]
        if due:
            self.kill_retries = [k for k in self.kill_retries if k[0] > now]
            for _, worker, command, attempt in due:
                self._ssh_helper(worker, command, attempt)

    # ----------------------------------------------------------------- starting jobs

    def _start_next(self) -> bool:
        """Start the oldest PENDING job. True if the queue should be looked at again."""
        if self.stop_requested or time.monotonic() < self.draining_until:
            return False
        row = self.conn.execute(
            "SELECT * FROM jobs WHERE status = 'PENDING' ORDER BY id LIMIT 1").fetchone()
        if row is None:
            return False
        job_id = row["id"]
        try:
            nodes = core.load_nodes(self.paths)
            spec = core.parse_job_spec(json.loads(row["spec_json"]))
            if spec.num_nodes > len(nodes.workers):
                raise core.AgentError(
                    f"job needs {spec.num_nodes} nodes; the cluster has {len(nodes.workers)}")
        except (core.AgentError, ValueError) as exc:
            self._end_unstarted(job_id, f"could not start: {exc}")
            return True
        now = time.time()
        cur = self._db(
            self.conn.execute,
            "UPDATE jobs SET status = 'RUNNING', started_at = ? WHERE id = ? AND status = 'PENDING'",
            (now, job_id))
        if cur.rowcount == 0:  # type: ignore[attr-defined]
            return True  # cancelled in between
        self._db(os.makedirs, self.paths.job_dir(job_id), 0o700, True)
        job = RunningJob(job_id)
        for rank in range(spec.num_nodes):
            worker = nodes.workers[rank]
            ctl = os.path.join(self.paths.job_dir(job_id), f"rank-{rank}.ctl")
            try:
                proc = self._spawn_rank(spec, nodes, job_id, rank, row["submitted_at"])
            except OSError as exc:
                rp = RankProc(rank, worker, 0, None, ctl, ended=True, exit_code=127)
                job.ranks.append(rp)
                self._record_rank(job_id, rp, f"rank {rank}: could not start: {exc}")
                if job.failure is None:
                    job.failure = (rank, 127, f"rank {rank}: could not start: {exc}")
                continue
            job.ranks.append(RankProc(rank, worker, proc.pid, proc, ctl))
        self.job = job  # from here on supervised, whatever the disk says
        self._start_watch(job, spec, nodes)
        self._db(self.conn.executemany,
                 "INSERT OR REPLACE INTO ranks (job_id, rank, kind, pid) VALUES (?, ?, ?, ?)",
                 [(job_id, r.rank, r.worker.kind, r.pid) for r in job.ranks if not r.ended],
                 required=False)
        self._event("job_started", f"{spec.num_nodes} node(s)", job_id)
        if job.failure is not None:
            self._begin_stop(job, "failure")
        return False

    def _spawn_rank(self, spec: core.JobSpec, nodes: core.NodesConfig, job_id: int, rank: int,
                    submitted_at: float) -> subprocess.Popen[bytes]:
        worker = nodes.workers[rank]
        jd = self.paths.job_dir(job_id)
        env_list = core.rank_env(spec, nodes, job_id, rank, submitted_at)
        script = core.rank_script(env_list, spec.workdir, spec.run, job_id, rank,
                                  storage.rank_hooks(spec))
        spath = os.path.join(jd, f".rank-{rank}.sh")
        fd = os.open(spath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(script)
        script_f = open(spath, "rb")  # noqa: SIM115 - handed to the child, closed below
        os.unlink(spath)  # secrets never stay on disk outside jobs.db
        log_f = open(os.path.join(jd, f"rank-{rank}.log"), "ab")  # noqa: SIM115
        ctl_f = open(os.path.join(jd, f"rank-{rank}.ctl"), "ab")  # noqa: SIM115
        try:
            if worker.kind == "local":
                home = os.path.expanduser(worker.home or "~")
                env = dict(self.base_env, HOME=home, PWD=home)
                argv, cwd = ["bash", "-s"], home
                if os.path.exists(os.path.join(home, core.PREEMPTED_MARKER)):
                    # the local cloud reclaimed this node: like a vanished VM, it runs nothing
                    argv = ["sh", "-c", "echo 'launcher: this node was preempted'; exit 255"]
            else:
                env = self.base_env
                argv = core.ssh_argv(worker, self.paths.known_hosts, "bash -s")
                cwd = self.paths.home
            return subprocess.Popen(argv, stdin=script_f, stdout=log_f, stderr=ctl_f, cwd=cwd,
                                    env=env, start_new_session=True, close_fds=True)
        finally:
            script_f.close()
            log_f.close()
            ctl_f.close()

    def _end_unstarted(self, job_id: int, reason: str) -> None:
        self._db(self.conn.execute,
                 "UPDATE jobs SET status = 'FAILED', ended_at = ?, reason = ? "
                 "WHERE id = ? AND status = 'PENDING'", (time.time(), reason, job_id))
        self._event("job_failed", reason, job_id)
        core.mark_done(self.paths, job_id, self.conn)

    def _record_rank(self, job_id: int, r: RankProc, how: str | None) -> None:
        """Best effort (the job's record is what counts; this row only helps adoption)."""
        self._db(self.conn.execute,
                 "INSERT OR REPLACE INTO ranks (job_id, rank, kind, pid, exit_code, ended_at, how) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (job_id, r.rank, r.worker.kind, r.pid, r.exit_code, time.time(), how),
                 required=False)

    # ----------------------------------------------------------------- supervising

    def _supervise(self, job: RunningJob) -> None:
        for r in job.ranks:
            if r.ended:
                continue
            if r.proc is not None:
                rc = r.proc.poll()
                if rc is None:
                    continue
                self._rank_ended(job, r, rc)
            elif not _pid_alive(r.pid):
                self._rank_ended(job, r, None)
        if job.stopping is None:
            row = self.conn.execute(
                "SELECT cancel_requested FROM jobs WHERE id = ?", (job.id,)).fetchone()
            if row is not None and row[0]:
                self._begin_stop(job, "cancel")
        if (job.kill_at is not None and not job.killed and time.monotonic() >= job.kill_at
                and not all(r.ended for r in job.ranks)):
            job.killed = True
            self._signal_ranks(job, "KILL")
        if all(r.ended for r in job.ranks):
            self._finish(job)

    def _rank_ended(self, job: RunningJob, r: RankProc, returncode: int | None) -> None:
        self._check_disk(job, force=True)  # a rank that died of a full disk: say so first
        ctl = core.read_control(r.ctl_path)
        code, reason = core.explain_rank_end(r.rank, r.worker, returncode, ctl)
        r.ended, r.exit_code = True, code
        if r.worker.kind in ("ssh", "srun") and ctl.exit_code is None and ctl.pgid:
            # The connection died, not the run: it may still be running there. Kill it
            # (retried until the node is reachable again, see _reap_helpers).
            self._ssh_helper(r.worker, core.ssh_kill_command(ctl.pgid, "KILL"))
        if code != 0 and job.failure is None and job.stopping != "cancel":
            job.failure = (r.rank, code, reason or f"rank {r.rank} exited with code {code}")
        if code != 0 and job.stopping is None:
            self._begin_stop(job, "failure")
        self._record_rank(job.id, r, reason)

    def _begin_stop(self, job: RunningJob, why: str) -> None:
        job.stopping = why
        grace = core.kill_grace()
        if job.notice is not None:  # let the notice's own grace run out first
            left = job.notice["received_at"] + job.notice["grace_seconds"] - time.time()
            grace = max(grace, left)
        job.kill_at = time.monotonic() + grace
        self._signal_ranks(job, "TERM")

    def _signal_ranks(self, job: RunningJob, signame: str) -> None:
        """SIGTERM: the run's process group (the wrapper then records the exit code).
        SIGKILL: the run's group and the wrapper / ssh process too."""
        sig = signal.SIGKILL if signame == "KILL" else signal.SIGTERM
        for r in job.ranks:
            if r.ended:
                continue
            pgid = core.read_control(r.ctl_path).pgid
            if r.worker.kind == "local":
                targets = [pgid] if pgid else [r.pid]
                if sig == signal.SIGKILL and r.pid not in targets:
                    targets.append(r.pid)
                for target in targets:
                    _killpg(target, sig)
                continue
            if pgid:
                self._ssh_helper(r.worker, core.ssh_kill_command(pgid, signame))
            if sig == signal.SIGKILL or not pgid:
                _killpg(r.pid, sig)

    def _ssh_helper(self, worker: core.WorkerAccess, command: str, attempt: int = 1) -> None:
        """Run `command` on `worker` in the background; retried when ssh cannot connect."""
        argv = core.ssh_argv(worker, self.paths.known_hosts, command, connect_timeout=5)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True,
                                    env=self.base_env, cwd=self.paths.home)
        except OSError:
            return
        self.helpers.append((proc, "ssh-kill"))
        self.ssh_kills[proc.pid] = (worker, command, attempt)

    def _finish(self, job: RunningJob) -> None:
        exit_code: int | None
        if job.watch is not None:
            job.watch.close()
            job.watch = None
        if job.notice is not None:
            status = "FAILED"
            n = job.notice
            reason = (f"preempted: interruption notice for node rank {n['rank']} "
                      f"(grace {n['grace_seconds']:g}s, {n['source']})")
            failed_rank = n["rank"]
            exit_code = job.failure[1] if job.failure else max(
                (r.exit_code or 0 for r in job.ranks), default=0)
        elif job.stopping == "health" and job.health is not None:
            status, failed_rank = "FAILED", job.health.get("rank")
            reason = "health: " + watch.headline(job.health)
            exit_code = max((r.exit_code or 0 for r in job.ranks), default=0) or None
        elif job.stopping == "cancel" and job.failure is None:
            status, reason, failed_rank, exit_code = "CANCELLED", "cancelled", None, None
        elif job.failure is not None:
            status = "FAILED"
            failed_rank, exit_code, reason = job.failure
        else:
            status, reason, failed_rank, exit_code = "SUCCEEDED", None, None, 0
        self._check_disk(job, force=True)
        # required: on failure the job stays ours and the next step tries again
        self._db(self.conn.execute,
                 "UPDATE jobs SET status = ?, ended_at = ?, exit_code = ?, failed_rank = ?, "
                 "reason = ? WHERE id = ?",
                 (status, time.time(), exit_code, failed_rank, reason, job.id))
        self.wal_dirty = True
        self.job = None
        self._event("job_" + status.lower(), reason or "", job.id)
        core.mark_done(self.paths, job.id, self.conn)

    # ----------------------------------------------------------------- adoption

    def _adopt(self) -> None:
        """Take over the RUNNING job a previous daemon left behind."""
        rows = self.conn.execute("SELECT * FROM jobs WHERE status = 'RUNNING' ORDER BY id").fetchall()
        try:
            workers = {w.rank: w for w in core.load_nodes(self.paths).workers}
        except core.AgentError:
            workers = {}
        for i, row in enumerate(rows):
            job = RunningJob(row["id"])
            if row["notice_json"]:
                job.notice = json.loads(row["notice_json"])
            rank_rows = self.conn.execute(
                "SELECT * FROM ranks WHERE job_id = ? ORDER BY ended_at, rank", (row["id"],)).fetchall()
            for rr in rank_rows:
                worker = workers.get(rr["rank"]) or core.WorkerAccess(rr["rank"], "?", rr["kind"])
                ctl = os.path.join(self.paths.job_dir(row["id"]), f"rank-{rr['rank']}.ctl")
                ended = rr["exit_code"] is not None
                rp = RankProc(rr["rank"], worker, rr["pid"] or 0, None, ctl, ended, rr["exit_code"])
                job.ranks.append(rp)
                if ended and rr["exit_code"] != 0 and job.failure is None:
                    job.failure = (rr["rank"], rr["exit_code"], rr["how"] or "")
            job.ranks.sort(key=lambda r: r.rank)
            if i > 0 or not job.ranks:  # cannot happen normally: one job runs at a time
                self._finish_orphan(row["id"])
                continue
            self._event("job_adopted", f"{len(job.ranks)} rank(s)", job.id)
            self.job = job
            job.health = watch.read_finding(self.paths.job_dir(job.id))
            with contextlib.suppress(core.AgentError, ValueError):
                self._start_watch(job, core.parse_job_spec(json.loads(row["spec_json"])),
                                  core.load_nodes(self.paths))
            if job.failure is not None:
                self._begin_stop(job, "failure")

    def _finish_orphan(self, job_id: int) -> None:
        """A RUNNING job with no rank records (the daemon died while starting it)."""
        jd = self.paths.job_dir(job_id)
        with contextlib.suppress(OSError):
            for name in os.listdir(jd):
                if name.endswith(".ctl"):
                    pgid = core.read_control(os.path.join(jd, name)).pgid
                    if pgid:
                        _killpg(pgid, signal.SIGKILL)
        self._db(self.conn.execute,
                 "UPDATE jobs SET status = 'FAILED', ended_at = ?, reason = ? WHERE id = ?",
                 (time.time(), "lost while the agent was restarting", job_id))
        core.mark_done(self.paths, job_id, self.conn)

    # ----------------------------------------------------------------- health watch

    def _start_watch(self, job: RunningJob, spec: core.JobSpec, nodes: core.NodesConfig) -> None:
        if job.stopping is None:
            job.watch = watch.for_job(self.paths, job.id, spec, nodes, self.base_env)

    def _watch_health(self, job: RunningJob) -> None:
        """Record the watch's findings as events; the first failing one marks the cluster
        degraded and, when the job asks for it (`stop`), SIGTERMs the job."""
        assert job.watch is not None
        for f in job.watch.tick():
            self._event("health-" + f["severity"], watch.event_text(f), job.id)
            if f["severity"] != "fail" or job.health is not None:
                continue
            job.health = f = dict(f, stop=job.watch.stops)
            watch.record_finding(self.paths.job_dir(job.id), f)
            self._db(core.put_setting, self.conn, "health_degraded",
                     dict(f, job_id=job.id), required=False)
            if job.watch.stops and job.stopping is None:
                self._event("health_stop", "SIGTERM sent to the job: " + watch.headline(f),
                            job.id)
                self._begin_stop(job, "health")

    # ----------------------------------------------------------------- notices

    def _poll_notices(self) -> None:
        now = time.monotonic()
        for src in self.sources:
            if src.interval is not None:
                if now < self.next_poll.get(src.name, 0.0):
                    continue
                self.next_poll[src.name] = now + src.interval
            try:
                notices = src.poll()
            except Exception as exc:  # a flaky metadata endpoint must not stop the daemon
                self._event("notice_source_error", f"{src.name}: {exc}")
                continue
            for n in notices:
                self._on_notice(n)

    def _on_notice(self, n: dict) -> None:
        job = self.job
        relay = job is not None and job.notice is None and n["rank"] < len(job.ranks)
        core.add_event(
            self.conn, "notice",
            f"node rank {n['rank']}: interruption notice ({n['source']}), grace "
            f"{n['grace_seconds']:g}s" + ("; SIGTERM sent to the job" if relay else ""),
            job.id if job else None)
        core.put_setting(self.conn, "last_notice", n)
        self.draining_until = max(self.draining_until,
                                  time.monotonic() + n["grace_seconds"] + 5.0)
        if job is not None and relay:
            job.notice = n
            self.conn.execute("UPDATE jobs SET notice_json = ? WHERE id = ?",
                              (json.dumps(n), job.id))
            self._signal_ranks(job, "TERM")
            with contextlib.suppress(Exception):  # best effort: the ranks save at exit too
                self.helpers += [(p, "checkpoint-save") for p in storage.save_on_notice(
                    self.paths, self.conn, job.id, [r.rank for r in job.ranks], self.base_env)]

    # ----------------------------------------------------------------- autostop

    def _check_autostop(self) -> None:
        """Fire the autostop when due (agent_autostop.py); an autodown stops this daemon."""
        proc = self.autostop.check(self.conn, job_running=self.job is not None)
        if proc is not None:
            self.helpers.append((proc, "autostop"))
        if self.autostop.downed:
            self.stop_requested = True


def run_daemon(paths: core.Paths) -> int:
    return Daemon(paths).run()
