"""The checkpoint store on the nodes: restore, periodic save, save on notice and at exit.
STDLIB ONLY (shipped with the agent).

A job spec with `checkpoint_store` (an s3://, gs:// or Azure Blob prefix, e.g. s3://bkt/run/<task-id>) and
`checkpoint_dir` (the node directory, LAUNCHER_CHECKPOINT_DIR) makes every rank's
bash program (agent.rank_script) do, on its own node:

1. before the run: restore the whole prefix into the directory
   (`bucket_sync.py restore`); a failed restore fails the rank (exit 1) rather than
   start from scratch and later overwrite newer objects;
2. while the run runs: a saver loop uploads the directory every
   `checkpoint_save_seconds` (default 300), each save committed by a manifest
   (checkpoint_sync.py: a restore reads exactly one committed save per rank); the rank's
   bash program stops it when the run ends, and it stops by itself as soon as that
   program is gone (even SIGKILLed: see `rank_hooks`);
3. after the run ended (success, failure, or SIGTERM from an interruption notice,
   i.e. after the job wrote its last checkpoint): a final upload, before the rank
   is reported ended (unless the SIGKILL at the end of the grace comes first).

And the daemon, on an interruption notice, uploads every rank's directory at once
(`save_on_notice`), so what is on disk survives even a job that ignores SIGTERM.
The transfers are `python3 ~/.launcher-storage/bucket_sync.py` on each node, put
there by the client with the endpoint settings and credentials (storage_nodes.py).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

TYPE_CHECKING = False
if TYPE_CHECKING:
    from launcher.runtime import agent as core
else:
    try:
        from . import agent as core
    except ImportError:  # on the node: a sibling of agent.py
        import agent as core

DEFAULT_SAVE_SECONDS = 300.0
NODE_SCRIPT = '"$HOME"/.launcher-storage/bucket_sync.py'
SCRIPT_IN_HOME = os.path.join(".launcher-storage", "bucket_sync.py")
SYNCED_SCHEMES = ("s3://", "gs://", "az://")  # as storage_nodes.SCHEMES (no launcher import)
BLOB_HOST = ".blob.core.windows.net/"  # https://ACCOUNT.blob.core.windows.net/CONTAINER/...


def _active(spec: core.JobSpec) -> bool:
    store = getattr(spec, "checkpoint_store", None)
    if not (store and spec.checkpoint_dir):
        return False
    text = str(store)
    return text.startswith(SYNCED_SCHEMES) or (text.startswith("https://")
                                               and BLOB_HOST in text)


def _words(spec: core.JobSpec) -> tuple[str, str]:
    return shlex.quote(str(spec.checkpoint_store)), shlex.quote(str(spec.checkpoint_dir))


def rank_hooks(spec: core.JobSpec) -> tuple[list[str], list[str], list[str]]:
    """(before, during, after) shell lines for agent.rank_script: `before` runs after
    the exports and before the run starts, `during` right after the run started (in
    job-control mode, so the saver gets its own process group), `after` once the run
    and its leftovers are gone. All empty when the spec has no synced store.

    The saver is a bash coprocess that waits for its interval with `read -t` on its stdin,
    a pipe whose only writer is the rank's bash program (bash keeps a coprocess's pipe out
    of every other child). When that program exits, however it dies (SIGKILL included,
    where no trap runs), the pipe closes, `read` returns at once, and the loop ends: no
    subshell or timer outlives the rank. `after` also kills the saver's group, so a save
    in flight does not race the final one."""
    if not _active(spec):
        return [], [], []
    store, cdir = _words(spec)
    interval = getattr(spec, "checkpoint_save_seconds", None) or DEFAULT_SAVE_SECONDS
    # `read -t` takes neither 1e+06 nor 0 (which would poll and end the loop)
    wait_s = f"{max(float(interval), 0.001):.3f}".rstrip("0").rstrip(".")
    sync = f"python3 {NODE_SCRIPT}"
    before = [
        f"__launcher_cs={store}; __launcher_cd={cdir}",
        f"if [ -f {NODE_SCRIPT} ]; then",
        f'  {sync} restore "$__launcher_cs" "$__launcher_cd" 2>&1 || {{'
        ' echo "launcher: could not restore the checkpoint from $__launcher_cs; the run is'
        ' not started (it would start from scratch and overwrite newer saves)";'
        ' echo "LAUNCHER_EXIT=1" >&2; exit 1; }',
        "else",
        '  echo "launcher: warning: bucket_sync.py is not installed on this node; the checkpoint'
        ' is neither restored nor saved"; __launcher_cs=',
        "fi",
    ]
    during = [
        'if [ -n "$__launcher_cs" ]; then',
        # read: >128 = the interval passed; 1 = EOF, the rank's program is gone
        "  exec {__launcher_o}>&1",
        f"  coproc __launcher_saver {{ while read -r -t {wait_s} __launcher_x; [ $? -gt 128 ]; do"
        f' {sync} save "$__launcher_cd" "$__launcher_cs" </dev/null 2>&1; done; }}'
        ' >&"$__launcher_o" 2>&1',
        # out of the job table: no "[2]+ Terminated coproc ..." notice on the .ctl channel
        '  __launcher_sv=$!; disown "$__launcher_sv"',
        "fi",
    ]
    after = [
        'if [ -n "$__launcher_cs" ]; then',
        '  kill -TERM -- "-$__launcher_sv" 2>/dev/null',
        f'  {sync} save "$__launcher_cd" "$__launcher_cs" 2>&1 ||'
        ' echo "launcher: the checkpoint save at exit failed"',
        "fi",
    ]
    return before, during, after


def save_on_notice(paths: core.Paths, conn: core.sqlite3.Connection, job_id: int,
                   ranks: list[int], base_env: dict[str, str]
                   ) -> list[subprocess.Popen[bytes]]:
    """Start an upload of the checkpoint directory on every rank of job `job_id` now
    (in the background; the caller reaps the processes). Output goes to each rank's
    log. Returns the started processes ([] when the job has no synced store)."""
    row = conn.execute("SELECT spec_json FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return []
    spec = core.parse_job_spec(json.loads(row[0]))
    if not _active(spec):
        return []
    workers = {w.rank: w for w in core.load_nodes(paths).workers}
    store, cdir = str(spec.checkpoint_store), str(spec.checkpoint_dir)
    started = []
    for rank in ranks:
        worker = workers.get(rank)
        if worker is None:
            continue
        log = open(os.path.join(paths.job_dir(job_id), f"rank-{rank}.log"), "ab")  # noqa: SIM115
        try:
            if worker.kind == "local":
                home = os.path.expanduser(worker.home or "~")
                argv = ["python3", os.path.join(home, SCRIPT_IN_HOME), "save", cdir, store]
                env = dict(base_env, HOME=home, LAUNCHER_NODE_RANK=str(rank))  # the writer
                cwd = home
            else:
                remote = (f"LAUNCHER_NODE_RANK={int(rank)} python3 {NODE_SCRIPT} save "
                          f"{shlex.quote(cdir)} {shlex.quote(store)}")
                argv = core.ssh_argv(worker, paths.known_hosts, remote, connect_timeout=5)
                env, cwd = base_env, paths.home
            started.append(subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=cwd, start_new_session=True))
        except OSError:
            continue
        finally:
            log.close()
    return started
