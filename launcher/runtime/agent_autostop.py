"""The agent daemon's autostop: act once the job queue has been idle long enough. STDLIB ONLY.

Shipped next to agent.py (see agent.AGENT_FILES). The daemon owns one `Autostop` and
calls `check()` at every step; `due_at` says when the next call is needed. The setting
(`agent.py autostop`, stored as the "autostop" setting) is
    {"idle_minutes": float, "down": bool, "action": str, "set_at": epoch seconds,
     "last_attempt": epoch seconds (written here)}.
The queue is idle while no job is PENDING or RUNNING; the idle period starts at the
latest of the setting's `set_at`, the last job's end and the last submission. Once it
has lasted `idle_minutes`, the configured `action` runs in the background (a shell
command, orphaned: it usually tears down this very node, daemon included); with no
action and `down`, the agent downs the cluster itself (`autodown`). If the cluster is
still up after the action ran, it is tried again every max(idle, AUTOSTOP_RETRY_S).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    from launcher.runtime import agent as core
else:
    try:
        from . import agent as core
    except ImportError:  # on the node: a sibling of agent.py
        import agent as core

AUTOSTOP_RETRY_S = 300.0  # the cluster is still up after the action ran: try it again


class Autostop:
    """The autostop of one agent home. `event(kind, detail)` records an agent event;
    `ssh_helper(worker, command)` runs a command on a remote worker in the background
    (the daemon's, retried when ssh cannot connect)."""

    def __init__(self, paths: core.Paths, base_env: dict[str, str],
                 event: Callable[[str, str], None],
                 ssh_helper: Callable[[core.WorkerAccess, str], None]) -> None:
        self.paths = paths
        self.base_env = base_env
        self.event = event
        self.ssh_helper = ssh_helper
        self.due_at: float | None = None  # wall clock: when check() has work to do next
        self.downed = False  # autodown ran: the daemon must stop

    def check(self, conn: sqlite3.Connection, job_running: bool) -> subprocess.Popen[bytes] | None:
        """Fire the autostop if it is due: returns the started action's process (a helper
        for the daemon to reap), None when nothing was started. Sets `due_at`, and
        `downed` when the agent downed the cluster itself."""
        self.due_at = None
        cfg = core.get_setting(conn, "autostop")
        if not isinstance(cfg, dict) or job_running:
            return None
        busy = conn.execute(
            "SELECT COUNT(*) FROM jobs WHERE status IN ('PENDING', 'RUNNING')").fetchone()[0]
        if busy:
            return None
        last_end, last_sub = conn.execute(
            "SELECT MAX(ended_at), MAX(submitted_at) FROM jobs").fetchone()
        idle_since = max(cfg["set_at"], last_end or 0, last_sub or 0)
        idle_s = float(cfg["idle_minutes"]) * 60
        due = idle_since + idle_s
        last_attempt = cfg.get("last_attempt") or 0
        if last_attempt >= idle_since:  # fired in this idle period: retry only now and then
            due = last_attempt + max(idle_s, AUTOSTOP_RETRY_S)
        if time.time() < due:
            self.due_at = due
            return None
        cfg["last_attempt"] = time.time()
        core.put_setting(conn, "autostop", cfg)
        action = cfg.get("action") or ""
        verb = "down" if cfg.get("down") else "stop"
        if not action and cfg.get("down"):
            self.autodown(cfg)
            return None
        if not action:
            self.event("autostop",
                       f"idle for {cfg['idle_minutes']:g} min; {verb} due, no action configured")
            return None
        self.event("autostop", f"idle for {cfg['idle_minutes']:g} min; {verb}: running {action}")
        # Orphaned on purpose (the outer bash exits at once): the action usually tears down
        # this very node, daemon included, and must not count the daemon as its ancestor.
        script = '(bash -c "$1"; echo "autostop action exited with code $?") </dev/null &'
        with open(self.paths.p("autostop.log"), "ab") as log:
            return subprocess.Popen(["bash", "-c", script, "launcher-autostop", action],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=self.paths.home, env=self.base_env, start_new_session=True)

    def autodown(self, cfg: dict) -> None:
        """Autostop --down with no action (clouds whose nodes cannot tear themselves down,
        e.g. an ssh pool): kill what jobs left on every node, write the `autodowned`
        marker (every later agent command but `setup` then answers kind "autodowned", and
        the client releases the nodes and forgets the cluster), and set `downed` (the
        daemon then stops)."""
        doc = {"at": time.time(), "idle_minutes": cfg["idle_minutes"]}
        tmp = self.paths.autodowned + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.paths.autodowned)
        self.event("autodowned",
                   f"idle for {cfg['idle_minutes']:g} min; cluster down, agent stopped")
        try:
            workers = core.load_nodes(self.paths).workers
        except core.AgentError:
            workers = []
        command = core.stale_kill_command()
        for w in workers:
            if w.kind in ("ssh", "srun"):
                self.ssh_helper(w, command)
                continue
            home = os.path.expanduser(w.home or "~")
            with contextlib.suppress(OSError):
                subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=dict(self.base_env, HOME=home), cwd=home,
                                 start_new_session=True)
        self.downed = True
