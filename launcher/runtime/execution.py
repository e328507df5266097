"""Client-side orchestration of a cluster's runtime: sync, setup, agent install, env.

Everything here works on any cloud through the runner contract
(`launcher.runtime.runner`): local nodes and SSH nodes alike. All functions
block until done; work on several nodes runs in parallel threads.

- `sync_task_files`: the task's workdir to `~/sky_workdir` (the path SkyPilot
  uses, so scripts written for it keep working) and its `file_mounts` of local
  paths, on every node at once; S3 mounts are copied by the nodes from S3.
- `run_setup`: the task's `setup` on every node at once (node_setup: SkyPilot's script
  semantics, one setup per node at a time), each node's output in
  `$LAUNCHER_HOME/logs/<cluster>/<launch>/setup-node-<rank>.log`. The first
  node to fail stops the others (their setup's process group is killed) and
  `SetupFailedError` names it with its last output lines; Ctrl-C stops it everywhere.
- `install_agent`: the head-node agent, with how it reaches every worker.
- `node_env`: the `LAUNCHER_*` / `SKYPILOT_*` environment of a node's setup.
- `check_no_setup_running`: refuse to touch a cluster whose nodes still run a setup.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.clouds.base import ClusterInfo
from launcher.errors import FileMountError as FileMountError  # also execution.FileMountError
from launcher.errors import LauncherError
from launcher.runtime.fanout import parallel as parallel  # also execution.parallel
from launcher.runtime.node_runner import runner_for
from launcher.runtime.node_setup import SETUP_DIR as SETUP_DIR
from launcher.runtime.runner import CommandRunner
from launcher.runtime.upload_manifest import REMOTE_WORKDIR

if TYPE_CHECKING:
    from launcher.runtime.agent_client import AgentClient
    from launcher.runtime.jobspec import WorkerAccess
    from launcher.task.model import Task

SETUP_TAIL_LINES = 20

LineCallback = Callable[[str], None]


class SetupFailedError(LauncherError):
    """`setup` failed on a node. `rank`, `returncode`, `tail` (last lines), `log_path`."""

    exit_code = 1

    def __init__(self, cluster: str, rank: int, returncode: int, tail: list[str], log_path: Path) -> None:
        shown = "\n".join(f"    {line}" for line in tail) or "    (no output)"
        super().__init__(
            f"Setup failed on node {rank} of cluster {cluster!r} (exit code {returncode}). "
            f"Last lines:\n{shown}\nFull log: {log_path}. The cluster is kept: fix the task and "
            f"relaunch with `launcher launch -c {cluster} ...`, or `launcher down {cluster}`."
        )
        self.cluster = cluster
        self.rank = rank
        self.returncode = returncode
        self.tail = tail
        self.log_path = log_path


# ------------------------------------------------------------------ helpers


def open_runners(cluster: ClusterInfo) -> list[CommandRunner]:
    """One runner per node, rank order. Does not connect."""
    return [runner_for(cluster, node) for node in cluster.nodes]


def close_runners(runners: Sequence[CommandRunner]) -> None:
    for r in runners:
        with contextlib.suppress(Exception):  # closing must never mask the real outcome
            r.close()


def cluster_info_json(cluster: ClusterInfo) -> str:
    """`LAUNCHER_CLUSTER_INFO`: {"cluster_name", "cloud", "region", "zone", "num_nodes"}."""
    return json.dumps(
        {
            "cluster_name": cluster.cluster_name,
            "cloud": cluster.cloud,
            "region": cluster.region,
            "zone": cluster.zone,
            "num_nodes": len(cluster.nodes),
        }
    )


def node_env(
    cluster: ClusterInfo,
    rank: int,
    *,
    num_nodes: int | None = None,
    gpus_per_node: float = 0,
    task_id: str | None = None,
    checkpoint_dir: str | None = None,
    cuda_visible_devices: str | None = None,
) -> dict[str, str]:
    """The variables of node `rank` during setup: LAUNCHER_* names and their SKYPILOT_*
    twins, as SkyPilot sets them for setup (docs/environment.md).

    Setup runs on every node of the cluster, so `SETUP_NODE_RANK` / `SETUP_NODE_IPS` /
    `NUM_NODES` count the cluster's nodes (`num_nodes` overrides the count), and
    `SETUP_NUM_GPUS_PER_NODE` is the accelerators per node. `NODE_RANK`, `NODE_IPS` and
    `NUM_GPUS_PER_NODE` are set too, with the same values (older SkyPilot task files read
    them in setup). SKYPILOT_*_GPUS_PER_NODE round a fraction up, as SkyPilot does.
    `TASK_ID` only when given (a managed job's, stable across its recoveries). The agent
    builds the run's set (agent_ranks.rank_env).
    """
    from launcher.runtime.agent_ranks import skypilot_gpus

    n = num_nodes or len(cluster.nodes)
    ips = "\n".join(node.internal_ip for node in cluster.nodes[:n])
    gpus = f"{gpus_per_node:g}"
    values = {
        "SETUP_NODE_RANK": str(rank),
        "SETUP_NODE_IPS": ips,
        "SETUP_NUM_GPUS_PER_NODE": gpus,
        "NODE_RANK": str(rank),
        "NODE_IPS": ips,
        "NUM_NODES": str(n),
        "NUM_GPUS_PER_NODE": gpus,
        "CLUSTER_INFO": cluster_info_json(cluster),
    }
    if task_id:
        values["TASK_ID"] = task_id
    env = {f"LAUNCHER_{k}": v for k, v in values.items()}
    env.update({f"SKYPILOT_{k}": skypilot_gpus(gpus_per_node) if k.endswith("GPUS_PER_NODE")
                else v for k, v in values.items()})
    if checkpoint_dir:
        env["LAUNCHER_CHECKPOINT_DIR"] = checkpoint_dir
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return env


def gpu_devices(cluster: ClusterInfo) -> dict[int, str]:
    """rank -> CUDA_VISIBLE_DEVICES for clouds that split one machine's GPUs (local)."""
    if cluster.cloud != "local":
        return {}
    from launcher.clouds.local import LocalCloud

    return {r: ",".join(str(g) for g in ids) for r, ids in LocalCloud().gpu_ids(cluster.cluster_name).items()}


# ------------------------------------------------------------------ file sync


def resolve_file_mounts(task: Task) -> list[tuple[str, str]]:
    """(remote path, absolute local path) for every local file mount of `task`. No I/O but stat.

    Bucket mounts (s3:// URIs and storage mounts) are checked too
    (`storage_nodes.plan_bucket_copies`): FileMountError, naming the field, for what a
    launch cannot do yet (MOUNT modes, stores other than s3) or that has no AWS
    credentials to copy with; also for a local path that does not exist. `launch` calls it before provisioning anything.
    """
    from launcher.runtime.storage_nodes import plan_bucket_copies, require_credentials
    from launcher.runtime.upload_manifest import local_roots

    require_credentials(task, plan_bucket_copies(task))
    return [(r.remote, r.source) for r in local_roots(task) if r.field == "file_mounts"]


def sync_task_files(
    runners: Sequence[CommandRunner], task: Task, *, on_event: LineCallback | None = None,
    cloud: str | None = None, checkpoint_store: str | None = None,
) -> None:
    """Copy the task's workdir and local file_mounts to every node, then let every node
    copy the task's S3 mounts from S3 itself (and install the node-side bucket tool when
    the task or its `checkpoint_store` uses S3; see storage_nodes). Blocking, parallel.

    `cloud` decides the nodes' S3 credentials (an AWS instance role, else the client's).
    Raises FileMountError (see resolve_file_mounts), storage_nodes.StorageError; runner
    errors (NodeUnreachableError...) propagate.
    """
    from launcher.runtime.storage_nodes import sync_storage
    from launcher.runtime.upload_manifest import local_roots

    resolve_file_mounts(task)  # bucket checks and missing paths, before any copy
    roots = local_roots(task)
    if roots:
        if on_event:
            mounts = [r for r in roots if r.field == "file_mounts"]
            what = [f"workdir {task.workdir}"] if task.workdir else []
            what += [f"{len(mounts)} file mount(s)"] if mounts else []
            on_event(f"Syncing {' and '.join(what)} to {len(runners)} node(s)")

        def sync_one(runner: CommandRunner) -> None:
            for root in roots:
                if root.is_dir:
                    runner.sync_dir(root.source, root.remote,
                                    respect_gitignore=root.respect_gitignore)
                else:
                    runner.put_file(root.source, root.remote)

        parallel(sync_one, list(runners))
    sync_storage(runners, task, cloud=cloud, checkpoint_store=checkpoint_store, on_event=on_event)


# ------------------------------------------------------------------ setup


@dataclass
class _NodeOutcome:
    rank: int
    returncode: int
    tail: list[str]
    log_path: Path
    error: BaseException | None = None


def setup_log_dir(cluster_name: str) -> Path:
    """A fresh directory for one launch's setup logs of `cluster_name`."""
    from launcher.config.settings import launcher_home

    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = launcher_home() / "logs" / cluster_name
    path = base / f"{stamp}-setup"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-setup-{n}"
    path.mkdir(parents=True)
    return path


_SETSID_NOISE = re.compile(r"^setsid: child \d+ did not exit normally")


def run_setup(
    cluster: ClusterInfo,
    runners: Sequence[CommandRunner],
    script: str,
    *,
    envs: Sequence[Mapping[str, str]],
    log_dir: Path,
    on_line: LineCallback | None = None,
    timeout: float | None = None,
) -> None:
    """Run `script` on every node at once, as SkyPilot runs setup (node_setup: an
    interactive bash after ~/.bashrc and conda, PYTHONUNBUFFERED=1, in the synced workdir
    when there is one), node `i` with the variables `envs[i]`. Blocking.

    Each node's output goes to `log_dir/setup-node-<rank>.log` and, with a "(setup N) "
    prefix, to `on_line`. Returns when all succeeded. As soon as one node fails, the
    others' setup is stopped (their whole process group) and SetupFailedError names the
    first failing node with its last lines; runner errors are reported the same way.
    A node that another setup still holds (an earlier launch's, e.g. after its client was
    killed) refuses to start a second one: SetupBusyError, naming it. Interrupted
    (Ctrl-C: KeyboardInterrupt in the calling thread), it stops the setup on every node
    before re-raising, so nothing keeps running there.
    """
    import secrets

    from launcher.runtime.node_setup import (
        BUSY_EXIT,
        SetupBusyError,
        parse_busy,
        setup_command,
    )
    from launcher.runtime.runner import export_prefix

    multi = len(runners) > 1
    results: queue.Queue[_NodeOutcome] = queue.Queue()
    lock = threading.Lock()
    token = secrets.token_hex(8)
    workdir = f'"$HOME"/{REMOTE_WORKDIR[2:]}'

    def work(i: int) -> None:
        runner = runners[i]
        rank = runner.node.rank
        path = log_dir / f"setup-node-{rank}.log"
        tail: deque[str] = deque(maxlen=SETUP_TAIL_LINES)
        busy: list[str] = []
        with open(path, "w", buffering=1) as log:

            def line(text: str) -> None:
                if _SETSID_NOISE.match(text):  # `setsid -w` on a node whose setup we killed
                    return
                if parse_busy(text) is not None:
                    busy.append(text)
                    return
                log.write(text + "\n")
                tail.append(text)
                if on_line is not None:
                    with lock:
                        on_line(f"(setup {rank}) {text}" if multi else f"(setup) {text}")

            try:
                runner.put_text(script + "\n", f"~/{SETUP_DIR}/{token}.sh", mode=0o600)
                command = setup_command(token, list(envs[i]), workdir)
                res = runner.run(command, stdin=export_prefix(envs[i]), timeout=timeout,
                                 on_output=line)
                running = parse_busy(busy[-1]) if busy else None
                if res.returncode == BUSY_EXIT and running is not None:
                    where = runner.node.external_ip or runner.node.internal_ip
                    err = SetupBusyError(cluster.cluster_name, rank, where, running)
                    log.write(f"[launcher] {err}\n")
                    results.put(_NodeOutcome(rank, res.returncode, list(tail), path, err))
                    return
                results.put(_NodeOutcome(rank, res.returncode, list(tail), path))
            except BaseException as exc:
                log.write(f"[launcher] {type(exc).__name__}: {exc}\n")
                results.put(_NodeOutcome(rank, -1, [*tail, str(exc)], path, exc))

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(runners))]
    try:
        for t in threads:
            t.start()
        for _ in runners:
            outcome = results.get()
            if outcome.returncode == 0 and outcome.error is None:
                continue
            others = [r for r in runners if r.node.rank != outcome.rank]
            abort_setup(others, token)
            if isinstance(outcome.error, SetupBusyError):
                raise outcome.error
            raise SetupFailedError(cluster.cluster_name, outcome.rank, outcome.returncode,
                                   outcome.tail, outcome.log_path)
    except (KeyboardInterrupt, SystemExit):
        abort_setup(runners, token)  # Ctrl-C: nothing may keep running on the nodes
        raise


def abort_setup(runners: Sequence[CommandRunner], token: str) -> None:
    """Stop setup `token` on these nodes (node_setup.abort_command), in parallel. Best
    effort: an unreachable node is skipped. Blocking, at most a few seconds."""
    from launcher.runtime.node_setup import abort_command

    def abort(runner: CommandRunner) -> None:
        with contextlib.suppress(Exception):  # best effort: the node may be unreachable
            runner.run(abort_command(token), timeout=15)

    if runners:
        parallel(abort, list(runners))


def check_no_setup_running(cluster: ClusterInfo, runners: Sequence[CommandRunner]) -> None:
    """Raise SetupBusyError when a setup (of an earlier launch) still runs on a node, so
    nothing is synced or started under it. Nodes that cannot be reached are skipped (the
    sync reports them). Parallel, one short command per node."""
    from launcher.runtime.node_setup import SetupBusyError, parse_busy, probe_command

    def probe(runner: CommandRunner) -> SetupBusyError | None:
        try:
            res = runner.run(probe_command(), timeout=30)
        except LauncherError:
            return None
        for text in res.stdout.splitlines():
            running = parse_busy(text)
            if running is not None:
                where = runner.node.external_ip or runner.node.internal_ip
                return SetupBusyError(cluster.cluster_name, runner.node.rank, where, running)
        return None

    for err in parallel(probe, list(runners)):
        if err is not None:
            raise err


# ------------------------------------------------------------------ agent


def worker_access(cluster: ClusterInfo, internal_key_path: str | None = None) -> list[WorkerAccess]:
    """How the head's agent reaches every node (rank order).

    Local-cloud nodes are "local" with their own home; the head itself is
    "local" with the agent's own home; other nodes are "ssh" with the
    cluster-internal key at `internal_key_path` on the head (default: where
    the clouds put it, `keys.head_internal_key_path`).
    """
    from launcher.runtime.jobspec import WorkerAccess

    devices = gpu_devices(cluster)
    if internal_key_path is None and any(n.ssh_user is not None for n in cluster.nodes):
        from launcher.runtime.keys import head_internal_key_path

        internal_key_path = head_internal_key_path(cluster.cluster_name)
    out: list[WorkerAccess] = []
    for node in cluster.nodes:
        cvd = devices.get(node.rank)
        if cluster.cloud == "slurm":  # every rank a job step of the allocation, on its node
            job, _, host = node.node_id.partition(":")
            out.append(WorkerAccess(rank=node.rank, ip=node.internal_ip, kind="srun", host=host,
                                    slurm_job=job, cuda_visible_devices=cvd))
        elif node.ssh_user is None:
            out.append(WorkerAccess(rank=node.rank, ip=node.internal_ip, kind="local",
                                    home=node.local_root, cuda_visible_devices=cvd))
        elif node.rank == cluster.head.rank:
            out.append(WorkerAccess(rank=node.rank, ip=node.internal_ip, kind="local",
                                    cuda_visible_devices=cvd))
        else:
            out.append(WorkerAccess(rank=node.rank, ip=node.internal_ip, kind="ssh",
                                    host=node.internal_ip, port=node.ssh_port, user=node.ssh_user,
                                    key_path=internal_key_path, cuda_visible_devices=cvd))
    return out


def agent_client(cluster: ClusterInfo, head: CommandRunner | None = None) -> AgentClient:
    from launcher.runtime.agent_client import AgentClient

    return AgentClient(head or runner_for(cluster, cluster.head), cluster)


def install_agent(cluster: ClusterInfo, head: CommandRunner, internal_key_path: str | None = None) -> AgentClient:
    """Install (idempotently) and start the head-node agent. Blocking."""
    client = agent_client(cluster, head)
    client.install(worker_access(cluster, internal_key_path))
    return client
