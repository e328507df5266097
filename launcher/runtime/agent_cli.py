"""The agent's short-lived commands (`python3 agent.py COMMAND`). STDLIB ONLY.

Each command prints one JSON document on stdout and exits 0; on error it prints
{"error": message, "kind": kind} and exits non-zero (2 invalid input,
3 agent files differ from what the client expects, 4 no such job, 1 other).
`logs` is the exception: it streams "(rank N) line" lines, then one final line
"@@launcher-agent-end@@ <JobRecord JSON>".

    setup [--expect-version V]      stdin: nodes config JSON -> {"version", "daemon_pid"}
    submit [--follow]               stdin: JobSpec JSON -> {"job_id": N} (then, with --follow,
                                    the output of `logs N --follow`)
    queue                           -> {"jobs": [JobRecord...]}
    job ID                          -> JobRecord
    logs ID [--follow] [--rank R]   -> lines, then the end marker line
    logs ID --offsets R=B,R=B...    -> the complete lines each rank's log has past byte B,
                                    then the end marker, whose record adds "log_offsets"
                                    {rank: byte after the last line sent} (incremental sync)
    cancel (ID... | --all)          -> {"cancelled", "already_finished", "not_found", "cancelling"}
    autostop (--idle-minutes M [--down] [--action CMD] | --off) -> {"autostop": cfg|null}
    status                          -> agent, daemon, queue, autostop, last notice
    events [--since ID]             -> {"events": [...]}
    shutdown [--cancel-jobs]        -> {"stopped": bool, ...}
    daemon                          (the long-lived loop; started by setup/submit)

Once autostop has taken the cluster down from the head (the `autodowned.json`
marker, see agent_daemon.Daemon._autodown), every command but `setup` fails with
kind "autodowned" (exit 5) and the marker's JSON; `setup` (a new launch) clears it.
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import sys
import time

TYPE_CHECKING = False  # not `from typing import ...`: keeps every CLI call ~5 ms faster
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from launcher.runtime import agent as core
else:
    try:
        from . import agent as core
    except ImportError:  # on the node: a sibling of agent.py
        import agent as core


class Args:
    """Parsed command-line options (argparse costs ~10 ms per call; this parser ~0)."""

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    def __getattr__(self, name: str) -> Any:
        return self.values.get(name)


def _usage(message: str) -> core.AgentError:
    return core.AgentError(f"usage: {message}", "invalid", core.EXIT_INVALID)


def parse_args(argv: list[str]) -> tuple[str, Args]:
    """(command, options) for `argv`. Options: "--flag" (bool) or "--name VALUE";
    positionals: "job_id" (one int) or "job_ids" (any number of ints)."""
    if not argv or argv[0] not in COMMANDS:
        raise _usage(f"agent.py {{{','.join(COMMANDS)}}} ...")
    command, rest = argv[0], argv[1:]
    _, positional, options = COMMANDS[command]
    values: dict[str, object] = {}
    ints: list[int] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg.startswith("--"):
            if arg not in options:
                raise _usage(f"{command}: unknown option {arg}")
            kind = options[arg]
            key = arg[2:].replace("-", "_")
            if kind is bool:
                values[key] = True
            else:
                if i + 1 >= len(rest):
                    raise _usage(f"{command}: {arg} needs a value")
                i += 1
                try:
                    values[key] = kind(rest[i])
                except ValueError:
                    raise _usage(f"{command}: bad value for {arg}: {rest[i]!r}") from None
        else:
            try:
                ints.append(int(arg))
            except ValueError:
                raise _usage(f"{command}: expected a job id, got {arg!r}") from None
        i += 1
    if positional == "job_id":
        if len(ints) != 1:
            raise _usage(f"{command} JOB_ID")
        values["job_id"] = ints[0]
    elif positional == "job_ids":
        values["job_ids"] = ints
    elif ints:
        raise _usage(f"{command} takes no job ids")
    return command, Args(values)


def _read_stdin_json() -> object:
    try:
        return json.loads(sys.stdin.read())
    except ValueError as exc:
        raise core.AgentError(f"stdin is not valid JSON: {exc}", "invalid",
                              core.EXIT_INVALID) from None


def _write_private(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- commands


def cmd_setup(paths: core.Paths, args: Args) -> dict:
    """Write nodes.json (+ known_hosts) and make sure the current daemon runs. Idempotent."""
    version = core.agent_version(paths.home)
    if args.expect_version and args.expect_version != version:
        raise core.AgentError("agent files differ from the client's", "version_mismatch",
                              core.EXIT_VERSION, {"version": version})
    doc = _read_stdin_json()
    nodes = core.parse_nodes(doc)
    if os.path.exists(paths.autodowned):
        os.unlink(paths.autodowned)  # a new launch on these nodes
    os.makedirs(paths.home, mode=0o700, exist_ok=True)
    os.chmod(paths.home, 0o700)  # the queue holds secret values; the client's copy may be 0755
    _write_private(paths.nodes, json.dumps(nodes.to_json(), indent=1))
    # The fast entry point the client uses: this interpreter (no version-manager shims), no
    # site-packages, and the modules imported (byte-compiled once) rather than run as a script.
    # (The trailing comment puts agent.py's path on the command line, as for the daemon, so
    # the local cloud can tell agent processes from a node's job processes.)
    boot = (f"import sys; sys.dont_write_bytecode = False; sys.path.insert(0, {paths.home!r}); "
            f"import agent_cli; sys.exit(agent_cli.main(sys.argv[1:]))  # {paths.script}")
    launcher_sh = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -c {shlex.quote(boot)} \"$@\"\n"
    _write_private(paths.p("agent"), launcher_sh)
    os.chmod(paths.p("agent"), 0o700)
    known_hosts = doc.get("known_hosts") if isinstance(doc, dict) else None
    if isinstance(known_hosts, str):
        _write_private(paths.known_hosts, known_hosts)
    core.connect(paths).close()
    running = core.daemon_running(paths)
    if running and core.read_daemon_info(paths).get("version") != version:
        core.stop_daemon(paths)  # an older agent: jobs keep running, the new daemon adopts them
        running = False
    if not running:
        core.start_daemon(paths)
    return {"version": version, "daemon_pid": core.read_daemon_info(paths).get("pid"),
            "daemon_running": core.daemon_running(paths)}


def cmd_submit(paths: core.Paths, args: Args) -> dict | None:
    raw = _read_stdin_json()
    spec = core.parse_job_spec(raw)
    nodes = core.load_nodes(paths)
    if spec.num_nodes > len(nodes.workers):
        raise core.AgentError(
            f"job needs {spec.num_nodes} nodes; cluster {nodes.cluster} has {len(nodes.workers)}",
            "invalid", core.EXIT_INVALID)
    conn = core.connect(paths)
    cur = conn.execute(
        "INSERT INTO jobs (name, status, spec_json, num_nodes, submitted_at) "
        "VALUES (?, 'PENDING', ?, ?, ?)",
        (spec.name, json.dumps(raw), spec.num_nodes, time.time()))
    job_id = cur.lastrowid
    core.add_event(conn, "job_submitted", spec.name or "", job_id)
    conn.close()
    core.wake_daemon(paths)
    if not args.follow:
        return {"job_id": job_id}
    # submit --follow: the id line, then exactly what `logs ID --follow` prints (one round trip)
    sys.stdout.write(json.dumps({"job_id": job_id}) + "\n")
    sys.stdout.flush()
    cmd_logs(paths, Args({"job_id": job_id, "follow": True}))
    return None


def cmd_queue(paths: core.Paths, args: Args) -> dict:
    conn = core.connect(paths)
    rows = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    return {"jobs": [core.record_json(r, paths) for r in rows]}


def cmd_job(paths: core.Paths, args: Args) -> dict:
    return core.record_json(core.get_job(core.connect(paths), args.job_id), paths)


class _Tail:
    __slots__ = ("f", "partial", "start")

    def __init__(self) -> None:
        self.f: object = None
        self.partial = b""
        self.start = 0  # byte offset to read from (`logs --offsets`)


def _parse_offsets(text: str) -> dict[int, int]:
    """"0=123,1=45" -> {0: 123, 1: 45}."""
    out: dict[int, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        rank, _, off = part.partition("=")
        try:
            out[int(rank)] = max(0, int(off))
        except ValueError:
            raise _usage(f"logs: bad --offsets entry {part!r} (expected RANK=BYTES)") from None
    return out


def cmd_logs(paths: core.Paths, args: Args) -> None:
    """Stream a job's rank logs; with --follow until the job ends (or the client that
    started this command is gone). Logs cut short by a full disk end with the line
    "launcher: log truncated: no space left on MOUNT". Then the end marker."""
    conn = core.connect(paths)
    job_id = args.job_id
    row = core.get_job(conn, job_id)
    ranks = [args.rank] if args.rank is not None else list(range(row["num_nodes"]))
    job_dir = paths.job_dir(job_id)
    waiter = core.Waiter() if args.follow else None
    dir_watched = False
    if waiter is not None:
        os.makedirs(paths.logs, mode=0o700, exist_ok=True)
        waiter.watch(paths.logs, core.Waiter.IN_CREATE)
    tails = {r: _Tail() for r in ranks}
    offsets = _parse_offsets(args.offsets) if args.offsets else None
    if offsets is not None:
        waiter = None  # one pass; a partial last line waits for the next call
        for r, t in tails.items():
            t.start = offsets.get(r, 0)
    next_daemon_check = time.monotonic() + 5.0
    out = sys.stdout.buffer
    parent = os.getppid()  # sshd or the local runner: when it goes, nobody reads us

    def pump(final: bool) -> None:
        wrote = False
        for r, t in tails.items():
            if t.f is None:
                try:
                    t.f = open(os.path.join(job_dir, f"rank-{r}.log"), "rb")  # noqa: SIM115
                except FileNotFoundError:
                    continue
                if t.start:
                    t.f.seek(t.start)
            prefix = b"(rank %d) " % r
            while True:
                chunk = t.f.read(1 << 16)  # type: ignore[attr-defined]
                if not chunk:
                    break
                lines = (t.partial + chunk).split(b"\n")
                t.partial = lines.pop()
                if len(t.partial) > 1 << 16:  # a very long unterminated line: emit it anyway
                    lines.append(t.partial)
                    t.partial = b""
                out.write(b"".join(prefix + line + b"\n" for line in lines))
                wrote = True
            if final and t.partial and offsets is None:
                out.write(prefix + t.partial + b"\n")
                t.partial = b""
                wrote = True
        if wrote:
            out.flush()

    while True:
        if waiter is not None and not dir_watched and os.path.isdir(job_dir):
            dir_watched = waiter.watch(
                job_dir, core.Waiter.IN_MODIFY | core.Waiter.IN_CREATE | core.Waiter.IN_CLOSE_WRITE)
        row = core.get_job(conn, job_id)  # read before pumping: a terminal job's files are whole
        done = row["status"] in core.TERMINAL or waiter is None
        pump(final=done)
        if done or waiter is None:
            break
        if os.getppid() != parent:  # our client is gone: no orphan follower stays behind
            return
        if time.monotonic() >= next_daemon_check:  # nobody would ever end the job otherwise
            next_daemon_check = time.monotonic() + 5.0
            if not core.daemon_running(paths):
                core.start_daemon(paths)
        waiter.wait(1.0 if dir_watched else 0.25)
    record = core.record_json(row, paths)
    if offsets is not None:
        record["log_offsets"] = {
            str(r): (t.f.tell() - len(t.partial)  # type: ignore[attr-defined]
                     if t.f is not None else t.start) for r, t in tails.items()}
    if record["log_truncated"]:
        out.write(f"launcher: {record['log_truncated']}\n".encode())
    out.write(f"{core.END_MARKER} {json.dumps(record)}\n".encode())
    out.flush()


def cancel_jobs(paths: core.Paths, ids: list[int] | None) -> dict:
    """Cancel jobs (None = every unfinished one). PENDING ones at once; RUNNING ones through
    the daemon (SIGTERM, SIGKILL after the grace), waiting until they have ended."""
    conn = core.connect(paths)
    if ids is None:
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM jobs WHERE status IN ('PENDING', 'RUNNING') ORDER BY id")]
    result: dict[str, list[int]] = {"cancelled": [], "already_finished": [], "not_found": [],
                                    "cancelling": []}
    waiting: list[int] = []
    now = time.time()
    for job_id in ids:
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            result["not_found"].append(job_id)
            continue
        if row[0] in core.TERMINAL:
            result["already_finished"].append(job_id)
            continue
        cur = conn.execute(
            "UPDATE jobs SET status = 'CANCELLED', ended_at = ?, reason = ? "
            "WHERE id = ? AND status = 'PENDING'", (now, "cancelled before it started", job_id))
        if cur.rowcount:
            core.add_event(conn, "job_cancelled", "cancelled before it started", job_id)
            core.mark_done(paths, job_id, conn)
            result["cancelled"].append(job_id)
            continue
        conn.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
        waiting.append(job_id)
    if waiting:
        core.wake_daemon(paths)
        waiter = core.Waiter()
        for job_id in waiting:
            os.makedirs(paths.job_dir(job_id), mode=0o700, exist_ok=True)
            waiter.watch(paths.job_dir(job_id), core.Waiter.IN_CREATE)
        deadline = time.monotonic() + core.kill_grace() + 15.0
        while True:
            marks = ",".join("?" * len(waiting))
            statuses = dict(conn.execute(
                f"SELECT id, status FROM jobs WHERE id IN ({marks})", waiting).fetchall())
            if all(s in core.TERMINAL for s in statuses.values()) or time.monotonic() > deadline:
                break
            waiter.wait(min(0.5, max(0.0, deadline - time.monotonic())))
        for job_id in waiting:
            s = statuses.get(job_id)
            key = ("cancelled" if s == "CANCELLED" else
                   "already_finished" if s in core.TERMINAL else "cancelling")
            result[key].append(job_id)
    return result


def cmd_cancel(paths: core.Paths, args: Args) -> dict:
    if not args.all and not args.job_ids:
        raise core.AgentError("cancel: give job ids or --all", "invalid", core.EXIT_INVALID)
    return cancel_jobs(paths, None if args.all else args.job_ids)


def cmd_autostop(paths: core.Paths, args: Args) -> dict:
    conn = core.connect(paths)
    if args.off:
        conn.execute("DELETE FROM settings WHERE key = 'autostop'")
        core.add_event(conn, "autostop_set", "off")
        cfg = None
    else:
        if args.idle_minutes is None or args.idle_minutes < 0:
            raise core.AgentError("autostop: --idle-minutes must be >= 0 (or --off)", "invalid",
                                  core.EXIT_INVALID)
        cfg = {"idle_minutes": args.idle_minutes, "down": bool(args.down),
               "action": args.action or "", "set_at": time.time()}
        core.put_setting(conn, "autostop", cfg)
        core.add_event(conn, "autostop_set",
                       f"{args.idle_minutes:g} min, {'down' if args.down else 'stop'}")
    core.wake_daemon(paths)
    return {"autostop": cfg}


def cmd_status(paths: core.Paths, args: Args) -> dict:
    conn = core.connect(paths)
    try:
        nodes: core.NodesConfig | None = core.load_nodes(paths)
    except core.AgentError:
        nodes = None
    info = core.read_daemon_info(paths)
    running = conn.execute("SELECT id FROM jobs WHERE status = 'RUNNING' ORDER BY id").fetchone()
    pending = conn.execute("SELECT COUNT(*) FROM jobs WHERE status = 'PENDING'").fetchone()[0]
    ranks = []
    if running is not None:
        for rr in conn.execute("SELECT rank, kind, pid, exit_code FROM ranks WHERE job_id = ? "
                               "ORDER BY rank", (running[0],)):
            ctl = core.read_control(os.path.join(paths.job_dir(running[0]), f"rank-{rr[0]}.ctl"))
            ranks.append({"rank": rr[0], "kind": rr[1], "pid": rr[2], "pgid": ctl.pgid,
                          "exit_code": rr[3]})
    autostop = core.get_setting(conn, "autostop")
    idle_since = None
    if running is None and not pending:
        last_end, last_sub = conn.execute(
            "SELECT MAX(ended_at), MAX(submitted_at) FROM jobs").fetchone()
        base = autostop["set_at"] if isinstance(autostop, dict) else 0
        idle_since = max(base, last_end or 0, last_sub or 0) or None
    return {
        "version": core.agent_version(paths.home),
        "cluster": nodes.cluster if nodes else None,
        "num_nodes": len(nodes.workers) if nodes else 0,
        "daemon": {"running": core.daemon_running(paths), "pid": info.get("pid"),
                   "version": info.get("version"), "started_at": info.get("started_at")},
        "running_job": running[0] if running else None,
        "running_ranks": ranks,
        "pending_jobs": pending,
        "idle_since": idle_since,
        "autostop": autostop,
        "last_notice": core.get_setting(conn, "last_notice"),
    }


def cmd_events(paths: core.Paths, args: Args) -> dict:
    conn = core.connect(paths)
    rows = conn.execute("SELECT * FROM events WHERE id > ? ORDER BY id",
                        (args.since or 0,)).fetchall()
    return {"events": [{"id": r["id"], "ts": r["ts"], "kind": r["kind"], "job_id": r["job_id"],
                        "detail": r["detail"]} for r in rows]}


def cmd_health(paths: core.Paths, args: Args) -> dict:
    """The health watch's view: the cluster's degraded finding (until cleared with
    --clear, which `launcher health` sends when every node passes), and for one job (the
    running or last one, or --job) its failing finding, its health events and, with
    --history, its per-node metric rows (logs/JOB/health.jsonl)."""
    conn = core.connect(paths)
    if args.clear:
        conn.execute("DELETE FROM settings WHERE key = 'health_degraded'")
    job_id = args.job
    if job_id is None:
        row = conn.execute("SELECT id FROM jobs WHERE started_at IS NOT NULL "
                           "ORDER BY (status = 'RUNNING') DESC, id DESC LIMIT 1").fetchone()
        job_id = row[0] if row else None
    out: dict = {"degraded": core.get_setting(conn, "health_degraded"), "job_id": job_id,
                 "finding": None, "events": [], "history": None}
    if job_id is None:
        return out
    out["finding"] = core.read_health(paths, job_id)
    out["events"] = [{"ts": r["ts"], "kind": r["kind"], "detail": r["detail"]}
                     for r in conn.execute(
                         "SELECT * FROM events WHERE job_id = ? AND kind LIKE 'health%' "
                         "ORDER BY id", (job_id,))]
    if args.history:
        out["history"] = core.read_history(paths, job_id)
    return out


def cmd_shutdown(paths: core.Paths, args: Args) -> dict:
    cancel = cancel_jobs(paths, None) if args.cancel_jobs else None
    return {"stopped": core.stop_daemon(paths), "cancel": cancel}


def cmd_daemon(paths: core.Paths, args: Args) -> None:
    if TYPE_CHECKING:
        from launcher.runtime import agent_daemon
    else:
        try:
            from . import agent_daemon
        except ImportError:
            import agent_daemon
    sys.exit(agent_daemon.run_daemon(paths))


# --------------------------------------------------------------------------- entry


if TYPE_CHECKING:
    Handler = Callable[[core.Paths, Args], dict | None]
COMMANDS: dict[str, tuple[Handler, str | None, dict[str, type]]] = {
    "setup": (cmd_setup, None, {"--expect-version": str}),
    "submit": (cmd_submit, None, {"--follow": bool}),
    "queue": (cmd_queue, None, {}),
    "job": (cmd_job, "job_id", {}),
    "logs": (cmd_logs, "job_id", {"--follow": bool, "--rank": int, "--offsets": str}),
    "cancel": (cmd_cancel, "job_ids", {"--all": bool}),
    "autostop": (cmd_autostop, None, {"--idle-minutes": float, "--down": bool, "--action": str,
                                      "--off": bool}),
    "status": (cmd_status, None, {}),
    "events": (cmd_events, None, {"--since": int}),
    "health": (cmd_health, None, {"--job": int, "--history": bool, "--clear": bool}),
    "shutdown": (cmd_shutdown, None, {"--cancel-jobs": bool}),
    "daemon": (cmd_daemon, None, {}),
}


def _raise_autodowned(paths: core.Paths) -> None:
    try:
        with open(paths.autodowned) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    raise core.AgentError("the cluster was taken down by autostop", "autodowned", 5,
                          doc if isinstance(doc, dict) else {})


def _out_of_space(paths: core.Paths, exc: BaseException) -> bool:
    """A write failed for want of space (SQLite may say "disk I/O error" then)."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "disk is full" in str(exc):
        return True
    try:
        st = os.statvfs(paths.home)
    except OSError:
        return False
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize < 4096


def main(argv: list[str]) -> int:
    paths = core.Paths.default()
    try:
        command, args = parse_args(argv)
        if command not in ("setup", "daemon") and os.path.exists(paths.autodowned):
            _raise_autodowned(paths)
        result = COMMANDS[command][0](paths, args)
        if result is not None:
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
        return 0
    except core.AgentError as exc:
        doc = {"error": str(exc), "kind": exc.kind, **exc.extra}
        sys.stdout.write(json.dumps(doc) + "\n")
        return exc.code
    except (OSError, sqlite3.Error) as exc:
        if not _out_of_space(paths, exc):
            raise
        doc = {"error": "disk full: " + core.no_space_message(paths.home), "kind": "disk_full"}
        sys.stdout.write(json.dumps(doc) + "\n")
        return core.EXIT_ERROR
    except BrokenPipeError:  # the client went away mid-stream: not an error for the job
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
