"""How the head runs one rank: its environment, its bash program, ssh, its control channel.
STDLIB ONLY (shipped with the agent; imports nothing from launcher).

Split out of agent.py, which re-exports every name here (`agent.rank_script` etc.):

- `rank_env(spec, nodes, job_id, rank, submitted_at)`: the variables a rank exports.
- `rank_script(env, workdir, run, job_id, rank, hooks)`: the bash program a rank runs
  (fed to `bash -s`, locally or over ssh); `stale_kill_lines`/`stale_kill_command`:
  the node-side cleanup of rank process groups whose job ended.
- `ssh_argv`/`ssh_kill_command`: how the head reaches a worker.
- `RankControl`, `parse_control`, `read_control`: what a rank's wrapper reported on its
  .ctl file; `explain_rank_end`: a rank's exit code and failure reason from it.
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from launcher.runtime.agent_spec import JobSpec, NodesConfig, WorkerAccess


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def rank_env(spec: JobSpec, nodes: NodesConfig, job_id: int, rank: int,
             submitted_at: float) -> list[tuple[str, str]]:
    """The variables exported for `rank`, in export order (later wins).

    CUDA_VISIBLE_DEVICES of the node first, then the job's envs and secrets, then
    the LAUNCHER_* / SKYPILOT_* values, which user envs cannot override.
    """
    out: list[tuple[str, str]] = []
    cvd = nodes.workers[rank].cuda_visible_devices
    if cvd is not None:
        out.append(("CUDA_VISIBLE_DEVICES", cvd))
    out.extend(spec.envs.items())
    ips = "\n".join(w.ip for w in nodes.workers[: spec.num_nodes])
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(submitted_at))
    task_id = spec.task_id or f"launcher-{stamp}_{nodes.cluster}_{job_id}"
    info = spec.cluster_info_json or nodes.cluster_info_json or json.dumps(
        {"cluster_name": nodes.cluster})
    shared = [
        ("NODE_RANK", str(rank)), ("NODE_IPS", ips), ("NUM_NODES", str(spec.num_nodes)),
        ("NUM_GPUS_PER_NODE", _fmt_num(spec.gpus_per_node)), ("TASK_ID", task_id),
        ("CLUSTER_INFO", info),
    ]
    out += [("LAUNCHER_" + k, v) for k, v in shared]
    out.append(("LAUNCHER_JOB_ID", str(job_id)))
    if spec.checkpoint_dir:
        out.append(("LAUNCHER_CHECKPOINT_DIR", spec.checkpoint_dir))
    out += [("SKYPILOT_" + k, v) for k, v in shared]
    return out


def _workdir_expr(workdir: str | None) -> str:
    import shlex

    if not workdir or workdir == "~":
        return '"$HOME"'
    if workdir.startswith("~/"):
        return '"$HOME"/' + shlex.quote(workdir[2:])
    if workdir.startswith("/"):
        return shlex.quote(workdir)
    return '"$HOME"/' + shlex.quote(workdir)


# Where each node records its ranks' process groups ("PGID BOOT_ID" per file), so a later
# job (or the autodown cleanup) can kill groups the head could not reach when their job ended.
RANKS_DIR = '"$HOME"/.launcher-agent/ranks'
_BOOT_ID = "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"


def stale_kill_lines(keep_job: int | None = None) -> list[str]:
    """Shell lines (run on a node) that SIGKILL the recorded rank groups of ended jobs
    (all but `keep_job`) and drop their records. Groups from an earlier boot are skipped."""
    skip = f'case "$__f" in */job-{int(keep_job)}-*) continue;; esac; ' if keep_job else ""
    return [
        f"__launcher_d={RANKS_DIR}; __launcher_boot={_BOOT_ID}",
        'for __f in "$__launcher_d"/*.pgid; do [ -e "$__f" ] || continue; ' + skip
        + '__g=; __b=; read -r __g __b < "$__f"; '
        '[ -n "$__g" ] && [ "$__b" = "$__launcher_boot" ] && kill -KILL -- "-$__g" 2>/dev/null; '
        'rm -f "$__f"; done',
    ]


def stale_kill_command() -> str:
    """Remote command form of stale_kill_lines() (every recorded group: no job is running)."""
    return "; ".join(stale_kill_lines())


def rank_script(env: list[tuple[str, str]], workdir: str | None, run: str,
                job_id: int = 0, rank: int = 0,
                hooks: tuple[list[str], list[str], list[str]] = ([], [], [])) -> str:
    """The bash program one rank runs (fed to `bash -s` on stdin, locally or over ssh).

    Its stdout is the rank's log; the user's run gets stdout+stderr merged there
    and runs in its own process group. The wrapper's stderr (the .ctl file)
    carries `LAUNCHER_PGID=<pgid>` at start and `LAUNCHER_EXIT=<code>` at the
    end; a SIGTERM/HUP/INT to the wrapper is forwarded to the run's group. The
    whole program is one function so bash has read all of stdin before running.

    Process hygiene on the node: first the groups recorded by earlier jobs that are
    still alive (their head lost the node) are killed; this rank's group is recorded
    under RANKS_DIR while it runs; when the run ends (success too) whatever it left
    in its group (`cmd &`) gets SIGTERM, then SIGKILL after up to 2 s, as SkyPilot does.
    `hooks` (before the run, right after it started, after it ended): the checkpoint
    store's lines from agent_storage.rank_hooks.
    """
    import shlex

    rec = f'"$__launcher_d"/job-{int(job_id)}-rank-{int(rank)}.pgid'
    lines = ["__launcher_rank() {"]
    lines += ["mkdir -p " + RANKS_DIR + " 2>/dev/null"]
    lines += stale_kill_lines(keep_job=job_id)
    # a node-relative checkpoint dir (~/ckpt, ckpt) is exported absolute, as the job needs it
    lines += [f"export {k}={_workdir_expr(v)}" if k == "LAUNCHER_CHECKPOINT_DIR"
              and not v.startswith("/") else f"export {k}={shlex.quote(v)}" for k, v in env]
    wd = _workdir_expr(workdir)
    lines += hooks[0]
    lines += [
        f"cd {wd} || {{ echo \"launcher: cannot enter workdir {workdir or '~'}\";"
        ' echo "LAUNCHER_EXIT=1" >&2; exit 1; }',
        "set -m",
        f"bash -c {shlex.quote(run)} 2>&1 &",
        "__launcher_p=$!",
        f'echo "$__launcher_p $__launcher_boot" > {rec} 2>/dev/null',
        'echo "LAUNCHER_PGID=$__launcher_p" >&2',
        *hooks[1],
        "__launcher_s=",
        "trap '__launcher_s=1; kill -TERM -- -$__launcher_p 2>/dev/null' TERM HUP INT",
        'while :; do __launcher_s=; wait "$__launcher_p"; __launcher_rc=$?;'
        ' [ -n "$__launcher_s" ] || break; done',
        # leftovers of the run (`cmd &`): SIGTERM, up to 2 s to exit, then SIGKILL
        'if kill -TERM -- "-$__launcher_p" 2>/dev/null; then for __i in 1 2 3 4 5 6 7 8 9 10; do'
        ' kill -0 -- "-$__launcher_p" 2>/dev/null || break; sleep 0.2; done;'
        ' kill -KILL -- "-$__launcher_p" 2>/dev/null; fi',
        f"rm -f {rec}",
        *hooks[2],
        'echo "LAUNCHER_EXIT=$__launcher_rc" >&2',
        'exit "$__launcher_rc"',
        "}",
        "__launcher_rank </dev/null",
        "",
    ]
    return "\n".join(lines)


def ssh_argv(worker: WorkerAccess, known_hosts: str, remote_command: str,
             connect_timeout: int = 10) -> list[str]:
    """The ssh command line the head uses to reach `worker` (host keys pinned, no prompts)."""
    argv = ["ssh", "-T"]
    if worker.key_path:
        argv += ["-i", os.path.expanduser(worker.key_path), "-o", "IdentitiesOnly=yes"]
    argv += [
        "-p", str(worker.port),
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "ServerAliveInterval=5",
        "-o", "ServerAliveCountMax=3",
        "-o", f"ConnectTimeout={connect_timeout}",
        "-o", "LogLevel=ERROR",
        f"{worker.user}@{worker.host}",
        remote_command,
    ]
    return argv


def ssh_kill_command(pgid: int, signame: str) -> str:
    """Remote command that signals a rank's process group on a worker."""
    return f"kill -{signame} -- -{int(pgid)}"


class RankControl:
    """What a rank's wrapper reported on its control channel (the .ctl file)."""

    __slots__ = ("pgid", "exit_code", "other")

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.exit_code: int | None = None
        self.other: list[str] = []


def parse_control(text: str) -> RankControl:
    ctl = RankControl()
    for line in text.splitlines():
        if line.startswith("LAUNCHER_PGID=") and line[14:].isdigit():
            ctl.pgid = int(line[14:])
        elif line.startswith("LAUNCHER_EXIT=") and line[14:].isdigit():
            ctl.exit_code = int(line[14:])
        elif line.strip():
            ctl.other.append(line.strip())
    return ctl


def read_control(path: str) -> RankControl:
    try:
        with open(path, errors="replace") as f:
            return parse_control(f.read())
    except FileNotFoundError:
        return RankControl()


def explain_rank_end(rank: int, worker: WorkerAccess, returncode: int | None,
                     ctl: RankControl) -> tuple[int, str | None]:
    """(exit code, failure reason or None) for a rank whose local process ended.

    The wrapper's LAUNCHER_EXIT is the truth when present. Without it: ssh's 255
    means the connection was lost; a negative returncode means the wrapper (the
    node's processes) was killed by that signal.
    """
    if ctl.exit_code is not None:
        code = ctl.exit_code
        return code, (None if code == 0 else f"rank {rank} exited with code {code}")
    if worker.kind == "ssh" and returncode in (255, None):
        why = f": {ctl.other[-1]}" if ctl.other else ""
        return 255, f"rank {rank}: lost connection to {worker.host}{why}"
    if returncode is None:
        return 255, f"rank {rank}: process lost while the agent was restarting"
    if returncode < 0:
        import signal

        try:
            signame = signal.Signals(-returncode).name
        except ValueError:
            signame = f"signal {-returncode}"
        return 128 - returncode, f"rank {rank}: killed by {signame}"
    return returncode, (None if returncode == 0 else f"rank {rank} exited with code {returncode}")
