#!/usr/bin/env python3
"""launcher head-node agent: the cluster's job queue, gang runs, logs, cancel, autostop.

STDLIB ONLY. This file is copied to the head node (~/.launcher-agent/agent.py)
and run there as `python3 agent.py COMMAND`; it must never import `launcher`.
Its home directory is the directory it lives in (override: LAUNCHER_AGENT_HOME):

    agent.py agent_*.py    the shipped code (AGENT_FILES; this file is the entry point)
    agent                  launcher script written by `setup` (the fast way in: python -S)
    nodes.json known_hosts jobs.db          config, pinned worker host keys, the queue
    daemon.lock daemon.json wake.fifo daemon.log autostop.log
    logs/JOB/rank-N.log    a rank's output;  logs/JOB/rank-N.ctl: its wrapper's pgid/exit code
    logs/JOB/.truncated    the job's logs ran out of disk space (see agent_daemon: disk space)
    disk.reserve           space the daemon frees to record job ends on a full disk
    notice-rank-N.json     interruption notices dropped by the local cloud
    logs/JOB/health.json   the health watch's failing finding; health.jsonl: per-node metrics

`python3 agent.py daemon` is the one long-lived process (a flock on daemon.lock
keeps it unique). It starts queued jobs one at a time (FIFO, a job holds the
whole cluster), supervises their ranks, enforces autostop and relays
interruption notices. Every other command is a short-lived CLI that prints one
JSON document on stdout (errors: {"error": ..., "kind": ...} and a non-zero
exit). See docs/job-queue.md for the semantics and launcher/runtime/jobspec.py
for the JSON shapes, which this file mirrors.

Rank processes write straight into their log files (never through a pipe held
by the daemon), so a daemon restart or a vanished client loses no output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
import time

END_MARKER = "@@launcher-agent-end@@"
STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
_NOTICE_FILE = re.compile(r"^notice-rank-(\d+)\.json$")
PREEMPTED_MARKER = ".launcher-preempted"  # = local_runner.PREEMPTED_MARKER (local nodes)

# --------------------------------------------------------------------------- shapes
# The job spec, nodes.json and AgentError live in agent_spec.py (agent_ranks.py reads
# them too); the names stay reachable here (agent.JobSpec, agent.AgentError, ...).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from launcher.runtime import agent_spec as spec
else:
    try:
        from . import agent_spec as spec
    except ImportError:  # on the node: a sibling of agent.py
        import agent_spec as spec

EXIT_ERROR, EXIT_INVALID = spec.EXIT_ERROR, spec.EXIT_INVALID
EXIT_VERSION, EXIT_NOT_FOUND = spec.EXIT_VERSION, spec.EXIT_NOT_FOUND
AgentError = spec.AgentError
JobSpec = spec.JobSpec
WorkerAccess = spec.WorkerAccess
NodesConfig = spec.NodesConfig
parse_job_spec = spec.parse_job_spec
parse_worker = spec.parse_worker
parse_nodes = spec.parse_nodes


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def kill_grace() -> float:
    """Seconds between SIGTERM and SIGKILL when the agent stops a job's ranks."""
    return _env_float("LAUNCHER_AGENT_KILL_GRACE", 5.0)


# --------------------------------------------------------------------------- paths


class Paths:
    """Where everything of one agent lives (its home directory)."""

    __slots__ = ("home",)

    def __init__(self, home: str) -> None:
        self.home = home

    @classmethod
    def default(cls) -> Paths:
        home = os.environ.get("LAUNCHER_AGENT_HOME") or os.path.dirname(os.path.abspath(__file__))
        return cls(home)

    def p(self, *parts: str) -> str:
        return os.path.join(self.home, *parts)

    @property
    def script(self) -> str:
        return self.p("agent.py")

    @property
    def db(self) -> str:
        return self.p("jobs.db")

    @property
    def nodes(self) -> str:
        return self.p("nodes.json")

    @property
    def known_hosts(self) -> str:
        return self.p("known_hosts")

    @property
    def lock(self) -> str:
        return self.p("daemon.lock")

    @property
    def daemon_info(self) -> str:
        return self.p("daemon.json")

    @property
    def fifo(self) -> str:
        return self.p("wake.fifo")

    @property
    def logs(self) -> str:
        return self.p("logs")

    def job_dir(self, job_id: int) -> str:
        return self.p("logs", str(job_id))

    @property
    def reserve(self) -> str:
        """Space the daemon holds back so it can still record job ends on a full disk."""
        return self.p("disk.reserve")

    @property
    def autodowned(self) -> str:
        """Marker written when autostop took the cluster down from the head (JSON)."""
        return self.p("autodowned.json")


def load_nodes(paths: Paths) -> NodesConfig:
    try:
        with open(paths.nodes) as f:
            return parse_nodes(json.load(f))
    except FileNotFoundError:
        raise AgentError("agent not installed: nodes.json is missing", "not_installed") from None


# --------------------------------------------------------------------------- database

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    status TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    num_nodes INTEGER NOT NULL,
    submitted_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    exit_code INTEGER,
    failed_rank INTEGER,
    reason TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    notice_json TEXT
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, id);
CREATE TABLE IF NOT EXISTS ranks (
    job_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    kind TEXT NOT NULL,
    pid INTEGER,
    exit_code INTEGER,
    ended_at REAL,
    how TEXT,
    PRIMARY KEY (job_id, rank)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    job_id INTEGER,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
SCHEMA_VERSION = 1


def connect(paths: Paths) -> sqlite3.Connection:
    """Open jobs.db (WAL, autocommit; use `with tx(conn)` for transactions)."""
    os.makedirs(paths.home, mode=0o700, exist_ok=True)
    fresh = not os.path.exists(paths.db)
    conn = sqlite3.connect(paths.db, timeout=15, isolation_level=None)
    if fresh:
        os.chmod(paths.db, 0o600)  # job specs hold secret values
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 15000")
    conn.execute("PRAGMA secure_delete = ON")  # forgotten secret values are zeroed on disk
    if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
        conn.execute("PRAGMA journal_mode = WAL")  # persistent; must be set outside a transaction
        # IF NOT EXISTS everywhere: two processes creating the schema at once is harmless.
        conn.executescript(
            "BEGIN IMMEDIATE;" + _SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def record_json(row: sqlite3.Row, paths: Paths | None = None) -> dict:
    """A jobs row as the JobRecord JSON shape (never env values). With `paths`, also
    "log_truncated": why the job's logs were cut short (disk full), or null."""
    out = {
        "id": row["id"], "name": row["name"], "status": row["status"],
        "num_nodes": row["num_nodes"], "submitted_at": row["submitted_at"],
        "started_at": row["started_at"], "ended_at": row["ended_at"],
        "exit_code": row["exit_code"], "failed_rank": row["failed_rank"],
        "reason": row["reason"],
        "notice": json.loads(row["notice_json"]) if row["notice_json"] else None,
    }
    if paths is not None:
        out["log_truncated"] = read_truncated(paths, row["id"])
        out["health"] = read_health(paths, row["id"])
    return out


def read_health(paths: Paths, job_id: int) -> dict | None:
    """The health watch's failing finding for the job (agent_watch.record_finding), or None."""
    try:
        with open(os.path.join(paths.job_dir(job_id), "health.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_history(paths: Paths, job_id: int) -> list[dict]:
    """The job's per-node metric rows (logs/JOB/health.jsonl, agent_watch.py), oldest first."""
    rows = []
    try:
        with open(os.path.join(paths.job_dir(job_id), "health.jsonl")) as f:
            for line in f:
                with contextlib.suppress(ValueError):
                    rows.append(json.loads(line))
    except OSError:
        return []
    return rows


def get_job(conn: sqlite3.Connection, job_id: int) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise AgentError(f"no job {job_id} on this cluster", "not_found", EXIT_NOT_FOUND)
    return row


def add_event(conn: sqlite3.Connection, kind: str, detail: str, job_id: int | None = None) -> None:
    conn.execute("INSERT INTO events (ts, kind, job_id, detail) VALUES (?, ?, ?, ?)",
                 (time.time(), kind, job_id, detail))


def get_setting(conn: sqlite3.Connection, key: str) -> object:
    row = conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
    return json.loads(row[0]) if row else None


def put_setting(conn: sqlite3.Connection, key: str, value: object) -> None:
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)",
                 (key, json.dumps(value)))


def forget_secrets(conn: sqlite3.Connection, job_id: int) -> bool:
    """Drop the values of a job's secrets from its stored spec once the job has ended
    (nothing reads them again). With `secure_delete` on (see `connect`) the old bytes
    are zeroed in the DB file, and a TRUNCATE checkpoint empties the write-ahead log
    that still held them (retried at the daemon's next step when readers block it:
    see `flush_wal`). True when something was dropped."""
    row = conn.execute("SELECT spec_json FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return False
    spec = json.loads(row[0])
    names = set(spec.get("secret_names") or [])
    envs = spec.get("envs") or {}
    if not names & set(envs):
        return False
    spec["envs"] = {k: v for k, v in envs.items() if k not in names}
    conn.execute("UPDATE jobs SET spec_json = ? WHERE id = ?", (json.dumps(spec), job_id))
    flush_wal(conn)
    return True


def flush_wal(conn: sqlite3.Connection) -> bool:
    """Checkpoint the write-ahead log into the DB and truncate it. False when a reader
    kept part of it (try again later)."""
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    return not busy


def mark_done(paths: Paths, job_id: int, conn: sqlite3.Connection | None = None) -> None:
    """Drop logs/JOB/.done after a job's terminal status is committed (wakes log followers).
    With `conn`, first forget the job's secret values (`forget_secrets`). Best effort: on
    a full disk the followers notice the status on their next poll."""
    if conn is not None:
        with contextlib.suppress(sqlite3.Error, ValueError):  # the job's end matters more
            forget_secrets(conn, job_id)
    d = paths.job_dir(job_id)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        with open(os.path.join(d, ".done"), "w"):
            pass
    except OSError:
        pass


# --------------------------------------------------------------------------- disk space
# A full disk must not kill the agent (agent_daemon.py: its reserve file, the truncation
# marker logs/JOB/.truncated); readers derive the message from the marker.

TRUNCATED_FILE = ".truncated"


def mount_point(path: str) -> str:
    """The mount point of the file system holding `path` (which may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def no_space_message(path: str) -> str:
    return f"no space left on {mount_point(path)}"


def read_truncated(paths: Paths, job_id: int) -> str | None:
    """"log truncated: no space left on MOUNT" for a job whose logs were cut short by a
    full disk, or None when they are whole."""
    d = paths.job_dir(job_id)
    if not os.path.exists(os.path.join(d, TRUNCATED_FILE)):
        return None
    return "log truncated: " + no_space_message(d)


# --------------------------------------------------------------------------- rank commands
# Pure functions: what each rank runs and how the head reaches it. They live in
# agent_ranks.py; the names stay reachable here (agent.rank_script, agent.read_control,
# ...) for the sibling modules.
if TYPE_CHECKING:
    from launcher.runtime import agent_ranks as ranks
else:
    try:
        from . import agent_ranks as ranks
    except ImportError:  # on the node: a sibling of agent.py
        import agent_ranks as ranks

RANKS_DIR = ranks.RANKS_DIR
RankControl = ranks.RankControl
rank_env = ranks.rank_env
rank_script = ranks.rank_script
stale_kill_lines = ranks.stale_kill_lines
stale_kill_command = ranks.stale_kill_command
ssh_argv = ranks.ssh_argv
ssh_kill_command = ranks.ssh_kill_command
parse_control = ranks.parse_control
read_control = ranks.read_control
explain_rank_end = ranks.explain_rank_end


# --------------------------------------------------------------------------- waiting


class Waiter:
    """Block until a watched directory changes or a timeout passes.

    Uses Linux inotify through ctypes when available; otherwise falls back to
    sleeping in short slices (correct, only slower to notice).
    """

    IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x2, 0x8, 0x80, 0x100

    def __init__(self) -> None:
        self.fd = -1
        self._libc = None
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                self.fd, self._libc = fd, libc
        except (OSError, AttributeError):
            pass

    def watch(self, path: str, mask: int) -> bool:
        if self._libc is None:
            return False
        return bool(self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask) >= 0)

    def drain(self) -> None:
        if self.fd < 0:
            return
        try:
            while os.read(self.fd, 65536):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def wait(self, timeout: float) -> None:
        import select

        if self.fd < 0:
            time.sleep(min(timeout, 0.1))
            return
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if ready:
            self.drain()


# --------------------------------------------------------------------------- daemon control


def daemon_running(paths: Paths) -> bool:
    """True when some process holds daemon.lock (the daemon is alive)."""
    import fcntl

    try:
        fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our lock if we got it
    return False


def read_daemon_info(paths: Paths) -> dict:
    try:
        with open(paths.daemon_info) as f:
            info = json.load(f)
            return info if isinstance(info, dict) else {}
    except (FileNotFoundError, ValueError):
        return {}


HOSTED_ENV = "LAUNCHER_AGENT_DAEMON_HOSTED"


def start_daemon(paths: Paths, wait_ready: float = 5.0) -> None:
    """Spawn `agent.py daemon` detached (own session, no inherited pipes); wait until ready.

    With LAUNCHER_AGENT_DAEMON_HOSTED set, another process hosts the daemon (a Slurm
    allocation's batch script: under proctrack/cgroup whatever a job step leaves behind
    dies when the step ends, so a daemon spawned here would take its ranks with it):
    nothing is spawned; this waits (up to 30 s) until the hosted daemon holds the lock."""
    import select
    import subprocess

    if os.environ.get(HOSTED_ENV):
        deadline = time.monotonic() + max(wait_ready, 30.0)
        while not daemon_running(paths) and time.monotonic() < deadline:
            time.sleep(0.1)  # the host starts it within a second; nothing to wait on
        return

    os.makedirs(paths.home, mode=0o700, exist_ok=True)
    r, w = os.pipe()
    env = dict(os.environ, LAUNCHER_AGENT_READY_FD=str(w), LAUNCHER_AGENT_HOME=paths.home)
    with open(paths.p("daemon.log"), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-S", paths.script, "daemon"], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, cwd=paths.home, env=env, start_new_session=True,
            close_fds=True, pass_fds=(w,),
        )
    os.close(w)
    try:  # EOF or "ready": the daemon holds the lock (or lost the race to another one)
        select.select([r], [], [], wait_ready)
    finally:
        os.close(r)


def wake_daemon(paths: Paths) -> None:
    """Nudge the daemon (via its FIFO); start it if nobody is listening."""
    import errno

    try:
        fd = os.open(paths.fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT) and not daemon_running(paths):
            start_daemon(paths)
        return
    try:
        os.write(fd, b"w")
    except BlockingIOError:
        pass  # FIFO full: the daemon has wake-ups pending anyway
    finally:
        os.close(fd)


def stop_daemon(paths: Paths, timeout: float = 10.0) -> bool:
    """SIGTERM the daemon (jobs keep running) and wait for its lock to drop."""
    import signal

    pid = read_daemon_info(paths).get("pid")
    if not daemon_running(paths):
        return True
    if isinstance(pid, int):
        import contextlib

        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # rare path (upgrade / shutdown): a short poll is fine
        if not daemon_running(paths):
            return True
        time.sleep(0.02)
    return False


AGENT_FILES = ("agent.py", "agent_daemon.py", "agent_cli.py", "agent_notices.py",
               "agent_storage.py", "agent_ranks.py", "agent_disk.py", "agent_spec.py",
               "agent_watch.py", "health_checks.py", "agent_autostop.py")


def agent_version(home: str) -> str:
    """sha256 over the shipped agent files (the client compares it to skip re-copying)."""
    import hashlib

    h = hashlib.sha256()
    for name in AGENT_FILES:
        try:
            with open(os.path.join(home, name), "rb") as f:
                h.update(f.read())
        except FileNotFoundError:
            return "incomplete"
    return h.hexdigest()


if __name__ == "__main__":
    # The sibling modules import this one as `agent`; make that the running module.
    sys.modules.setdefault("agent", sys.modules[__name__])
    import agent_cli

    sys.exit(agent_cli.main(sys.argv[1:]))
