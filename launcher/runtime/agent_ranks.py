"""How the head runs one rank: its environment, its bash program, ssh, its control channel.
STDLIB ONLY (shipped with the agent; imports nothing from launcher).

Split out of agent.py, which re-exports every name here (`agent.rank_script` etc.):

- `rank_env(spec, nodes, job_id, rank, submitted_at)`: the variables a rank exports.
- `rank_script(env, workdir, run, job_id, rank, hooks)`: the bash program a rank runs
  (fed to `bash -s`, locally or over ssh); `stale_kill_lines`/`stale_kill_command`:
  the node-side cleanup of rank process groups whose job ended.
- `task_shell(keep, cd)`: how a task's script (run, and setup: see
  launcher.runtime.node_setup) is started, with SkyPilot's semantics (`task_prelude`).
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


def skypilot_gpus(x: float) -> str:
    """SKYPILOT_NUM_GPUS_PER_NODE's value: SkyPilot rounds a fraction up (`A100:0.5` -> 1),
    so a script passing it to `torchrun --nproc_per_node` works; LAUNCHER_* keeps `0.5`."""
    import math

    return str(math.ceil(float(x) - 1e-9))


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
    out += [("SKYPILOT_" + k, skypilot_gpus(spec.gpus_per_node) if k == "NUM_GPUS_PER_NODE"
             else v) for k, v in shared]
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


# SkyPilot runs a task's setup and run in `bash -i` after a prelude (its
# log_lib.make_task_bash_script); task files written for it rely on that. The same here.
TASK_PRELUDE_DOC = """\
- `source ~/.bashrc` (an interactive shell, so the usual `case $- in *i*` guard of a
  stock ~/.bashrc lets the rest of it run: conda init blocks, exports setup appended);
- conda's profile script when conda is installed (so `conda activate` works), its
  variables exported;
- `PYTHONUNBUFFERED=1`;
- then the task's own variables again (user envs, secrets, LAUNCHER_*/SKYPILOT_*), so
  ~/.bashrc cannot override them, and `cd` into the workdir."""


def task_prelude(keep: list[str], cd: str) -> str:
    """The bash lines run before a task's script (see TASK_PRELUDE_DOC), in a brace group
    whose stderr goes to stdout. `keep`: names of the variables to restore after
    ~/.bashrc (names only: values never appear in a command line); `cd`: the shell
    words of the directory to enter (missing: stay in $HOME)."""
    names = " ".join(n for n in keep if n.replace("_", "a").isalnum() and not n[:1].isdigit())
    lines = ["{"]
    if names:
        lines.append(f"__launcher_keep=$(declare -p {names} 2>/dev/null)")
    lines += [
        '[ -f "$HOME/.bashrc" ] && source "$HOME/.bashrc"',
        "set -a",
        '. "$(conda info --base 2>/dev/null)/etc/profile.d/conda.sh" >/dev/null 2>&1',
        "set +a",
        "set +o history; unset HISTFILE",
        "export PYTHONUNBUFFERED=1",
    ]
    if names:
        lines.append('eval "$__launcher_keep"; unset __launcher_keep')
    lines += [f'cd {cd} 2>/dev/null || cd "$HOME"', "} 2>&1", ""]
    return "\n".join(lines)


def task_shell(keep: list[str], cd: str) -> str:
    """A command that runs the task script in the file given as its argument after
    task_prelude, in an interactive bash, as SkyPilot does: append the file's path.

    The script runs in a subshell, read from the file (no argument-size limit), which is
    then deleted, and parsed as it runs, like `bash -c` (`$0` is `launcher-task`, no
    positional parameters). So an `exit` prints no "exit", and SIGTERM ends it (an
    interactive shell ignores SIGTERM; the subshell does not). The shell's own job-control warnings (no terminal) and its
    stderr go to /dev/null, the prelude's and the script's to stdout. The exit status is
    the script's (128+N for a signal).
    """
    import shlex

    body = ('__launcher_s=$(< "$1") && rm -f -- "$1" && set -- && eval "$__launcher_s"')
    text = task_prelude(keep, cd) + f"( {body} ) 2>&1\n"
    return f"bash --norc -i -c {shlex.quote(text)} launcher-task 2>/dev/null"


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
        'rm -f "$__f" "${__f%.pgid}.run"; done',
    ]


def stale_kill_command() -> str:
    """Remote command form of stale_kill_lines() (every recorded group: no job is running)."""
    return "; ".join(stale_kill_lines())


def rank_script(env: list[tuple[str, str]], workdir: str | None, run: str,
                job_id: int = 0, rank: int = 0,
                hooks: tuple[list[str], list[str], list[str]] = ([], [], [])) -> str:
    """The bash program one rank runs (fed to `bash -s` on stdin, locally or over ssh).

    Its stdout is the rank's log; the user's run gets stdout+stderr merged there
    and runs in its own process group, started by task_shell (SkyPilot's semantics:
    ~/.bashrc, conda, PYTHONUNBUFFERED, the variables of `env` restored after them) from
    a copy in RANKS_DIR (`job-J-rank-R.run`, deleted once read). The wrapper's stderr (the .ctl file)
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
    runf = f'"$__launcher_d"/job-{int(job_id)}-rank-{int(rank)}.run'
    lines += [
        f"cd {wd} || {{ echo \"launcher: cannot enter workdir {workdir or '~'}\";"
        ' echo "LAUNCHER_EXIT=1" >&2; exit 1; }',
        f"printf '%s\\n' {shlex.quote(run)} > {runf} || {{ echo \"launcher: cannot write "
        f"{RANKS_DIR}\"; echo \"LAUNCHER_EXIT=1\" >&2; exit 1; }}",
        "set -m",
        f"{task_shell([k for k, _ in env], wd)} {runf} </dev/null &",
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
        f"rm -f {rec} {runf}",
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
    """The ssh command line the head uses to reach `worker` (host keys pinned, no prompts);
    for a kind "srun" worker, the Slurm job step on its node instead."""
    if worker.kind == "srun":
        return ["srun", "--overlap", "--jobid=" + str(worker.slurm_job), "-w", str(worker.host),
                "-N1", "-n1", "--quiet", "bash", "-c", remote_command]
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
    means the connection was lost, as does any failure of an srun step; a negative returncode means the wrapper (the
    node's processes) was killed by that signal.
    """
    if ctl.exit_code is not None:
        code = ctl.exit_code
        return code, (None if code == 0 else f"rank {rank} exited with code {code}")
    if worker.kind == "ssh" and returncode in (255, None):
        why = f": {ctl.other[-1]}" if ctl.other else ""
        return 255, f"rank {rank}: lost connection to {worker.host}{why}"
    if worker.kind == "srun" and returncode != 0:
        # no exit code from the wrapper: srun itself failed (node or allocation lost)
        why = f": {ctl.other[-1]}" if ctl.other else ""
        return 255, f"rank {rank}: lost the Slurm step on {worker.host}{why}"
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
