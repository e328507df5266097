"""The node side of a task's `setup`: the shell commands that start, guard and stop it.

Each setup run on a node is named by a fresh token and lives in `~/.launcher-setup/`:

- `<token>.sh`: the task's setup script (written first by the client);
- `<token>.pgid`: "PGID BOOT_ID" of the setup's process group (it is a group leader:
  `setsid`), so the client can stop the whole tree;
- `<token>.cancel`: written by `abort_command`; a setup that starts after it exits at
  once (Ctrl-C can come before the command reached the node);
- `lock` + `owner`: at most one setup per node (that is, per cluster) at a time. The
  leader holds `flock` on `lock` for the setup's life (the kernel frees it when the
  leader dies, so a crash never leaves a stale lock) and writes `owner`
  ("PGID BOOT_ID HOST TOKEN STARTED"). A second setup is refused, naming the owner,
  while the lock is held or while the owner's process group still has a live process
  on this boot (its leader killed alone, or a node without `flock`); an owner whose
  group is gone is stale and is replaced.

The setup itself runs with SkyPilot's semantics (agent_ranks.task_shell): an
interactive bash that sources ~/.bashrc and conda, exports PYTHONUNBUFFERED=1, then
the task's variables (read from the command's stdin, never from its command line) and
enters the workdir.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from launcher.errors import ClusterBusyError
from launcher.runtime.agent_ranks import task_shell

SETUP_DIR = ".launcher-setup"  # under each node's home
BUSY_EXIT = 75  # EX_TEMPFAIL: another setup holds the node
CANCELLED_EXIT = 130
BUSY_MARKER = "LAUNCHER_SETUP_BUSY"
# The interrupted grace: SIGTERM to the setup's group, then SIGKILL this much later.
ABORT_GRACE_S = 2.0

_D = f'"$HOME"/{SETUP_DIR}'
_BOOT = "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
_BUSY_RE = re.compile(rf"^{BUSY_MARKER} (\S+) (\S+) (\S+)$")
# `__live PGID`: whether the process group has a process that is not a zombie (`kill -0`
# also counts zombies, which a slow init reaps up to seconds after a kill). Builtins only:
# the state and group are the 1st and 3rd fields after the `(comm)` of /proc/PID/stat.
_LIVE = (
    '__live() { if [ ! -d /proc/self ]; then kill -0 -- "-$1" 2>/dev/null; return; fi; '
    'for __s in /proc/[0-9]*/stat; do read -r __l 2>/dev/null < "$__s" || continue; '
    '__l=${__l##*) }; set -- "$1" $__l; [ "$4" = "$1" ] && [ "$2" != Z ] && return 0; '
    "done; return 1; }"
)


@dataclass(frozen=True)
class RunningSetup:
    """A setup that holds a node: its process group, the node's hostname, its start time
    (UNIX seconds; None when unknown)."""

    pgid: str
    host: str
    started: float | None


class SetupBusyError(ClusterBusyError):
    """A setup from an earlier launch still runs on a node of the cluster."""

    def __init__(self, cluster: str, rank: int, address: str, running: RunningSetup) -> None:
        since = ""
        if running.started is not None:
            import time

            since = f", running for {max(0, round(time.time() - running.started))} s"
        super().__init__(
            f"Setup of an earlier launch is still running on node {rank} of cluster "
            f"{cluster!r} ({address}, host {running.host}: process group {running.pgid}"
            f"{since}). Two setups on one cluster would collide, so nothing was started. "
            f"Wait for it to end and launch again, or stop it (on that node: "
            f"`kill -- -{running.pgid}`), or `launcher down {cluster}`."
        )
        self.cluster = cluster
        self.rank = rank
        self.running = running


def _token_ok(token: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{8,64}", token):
        raise ValueError(f"bad setup token {token!r}")
    return token


def setup_command(token: str, keep: list[str], workdir: str | None) -> str:
    """The command (for `runner.run`, stdin = the `export ...` lines of the setup's
    variables) that runs `<token>.sh` on a node as described in the module docstring.

    Output: the script's stdout and stderr. Exit status: the script's; BUSY_EXIT after a
    `BUSY_MARKER PGID HOST STARTED` line when another setup holds the node;
    CANCELLED_EXIT when `abort_command(token)` came first.
    """
    t = _token_ok(token)
    cd = workdir if workdir else '"$HOME"'
    run = task_shell(keep, cd)
    leader = "\n".join([
        f"d={_D}; t={t}; b={_BOOT}; h=$(hostname 2>/dev/null || uname -n)",
        _LIVE,
        '__launcher_env=$(cat)',  # before anything can exit: the client is still writing it
        'echo "$$ $b" > "$d/$t.pgid"',
        # after the pgid is recorded: an abort either sees it or left the cancel file
        'if [ -e "$d/$t.cancel" ]; then rm -f "$d/$t".*; exit ' + str(CANCELLED_EXIT) + "; fi",
        '__busy() { echo "' + BUSY_MARKER + ' ${1:-?} ${2:-?} ${3:-?}"; '
        'rm -f "$d/$t.pgid" "$d/$t.sh"; exit ' + str(BUSY_EXIT) + "; }",
        'exec 9>>"$d/lock"',
        'if command -v flock >/dev/null 2>&1 && ! flock -n 9; then',
        '  read -r op ob oh ot os 2>/dev/null < "$d/owner"; __busy "$op" "$oh" "$os"; fi',
        'if read -r op ob oh ot os 2>/dev/null < "$d/owner" && [ -n "$op" ] && [ "$op" != "$$" ]'
        ' && [ "$ob" = "$b" ] && __live "$op"; then __busy "$op" "$oh" "$os"; fi',
        'echo "$$ $b $h $t $(date +%s)" > "$d/owner"',
        'find "$d" -maxdepth 1 -name "*.cancel" -mmin +60 -delete 2>/dev/null',
        'eval "$__launcher_env"; unset __launcher_env',
        # SIGTERM (an abort) is for the script; this leader stays to clean up after it
        "trap : TERM",
        f'{run} "$d/$t.sh" 9>&- </dev/null',
        "rc=$?",
        'rm -f "$d/owner" "$d/$t.pgid" "$d/$t.sh"',
        'exit "$rc"',
    ])
    return (
        f"d={_D}; mkdir -p \"$d\" && chmod 700 \"$d\" || exit 1; "
        "if command -v setsid >/dev/null 2>&1; then "
        f"exec setsid -w bash -c {shlex.quote(leader)}; "
        f"else exec bash -c {shlex.quote(leader)}; fi"
    )


def abort_command(token: str, grace_s: float = ABORT_GRACE_S) -> str:
    """Stop setup `token` on a node: SIGTERM to its process group, SIGKILL after
    `grace_s`; a setup that has not started yet will not (the cancel file)."""
    t = _token_ok(token)
    tries = max(1, int(grace_s / 0.1))
    return "; ".join([
        f"d={_D}; t={t}",
        _LIVE,
        '[ -d "$d" ] && : > "$d/$t.cancel"',
        'if read -r pg pb 2>/dev/null < "$d/$t.pgid" && [ -n "$pg" ] && '
        'kill -TERM -- "-$pg" 2>/dev/null; then '
        f'for i in $(seq {tries}); do __live "$pg" || break; sleep 0.1; done; '
        'kill -KILL -- "-$pg" 2>/dev/null; fi',
        "true",
    ])


def probe_command() -> str:
    """Prints a BUSY_MARKER line when a setup holds the node (see the module docstring)."""
    return "; ".join([
        f"d={_D}; b={_BOOT}",
        _LIVE,
        'if read -r op ob oh ot os 2>/dev/null < "$d/owner" && [ -n "$op" ] && '
        '[ "$ob" = "$b" ] && __live "$op"; then '
        f'echo "{BUSY_MARKER} $op ${{oh:-?}} ${{os:-?}}"; fi',
        "true",
    ])


def parse_busy(line: str) -> RunningSetup | None:
    """The RunningSetup a BUSY_MARKER line names, else None."""
    m = _BUSY_RE.match(line.strip())
    if m is None:
        return None
    started = float(m.group(3)) if m.group(3).isdigit() else None
    return RunningSetup(m.group(1), m.group(2), started)
