"""Cluster preparation: the runtime brought up on freshly provisioned (or replaced)
nodes - agent install in parallel with the file sync, the health gate, then setup on
every node - and
the agent JobSpec that runs a task on them. Shared by `launch` and the managed-jobs
controller. Blocking; raises runner errors and SetupFailedError (from
launcher.runtime.execution)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from launcher.errors import LauncherError
from launcher.state.db import ClusterRecord, ClusterStatus, StateDB

if TYPE_CHECKING:
    from launcher.clouds.base import ClusterInfo
    from launcher.runtime.agent_client import AgentClient
    from launcher.runtime.jobspec import JobSpec
    from launcher.task.model import Task

EventCallback = Callable[[str], None]
LineCallback = Callable[[str], None]


def _noop(_: str) -> None:
    return None


def _mark_up(db: StateDB, cluster: ClusterInfo) -> None:
    db.set_nodes(cluster.cluster_name, cluster.nodes)
    db.set_status(cluster.cluster_name, ClusterStatus.UP)


def prepare_cluster(
    db: StateDB,
    cluster: ClusterInfo,
    task: Task | None,
    *,
    run_setup_script: bool = True,
    on_event: EventCallback = _noop,
    on_setup_line: LineCallback | None = None,
    task_id: str | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_store: str | None = None,
) -> AgentClient:
    """Install the agent (in parallel with the file sync), sync files, gate every node's
    health (`resources.health`, launcher.provisioning.health_gate), run setup.

    Refuses (SetupBusyError, before anything is synced) while a setup of an earlier
    launch still runs on a node. Ctrl-C during setup stops it on every node.

    The sync includes the task's S3 mounts, copied by the nodes from S3 before setup;
    an s3:// `checkpoint_store` (a managed job's) installs the node-side bucket tool
    and the nodes' credentials too (launcher.runtime.storage_nodes). Blocking. Marks the cluster UP as soon as the agent is running (so a setup
    failure leaves a usable cluster). Raises HealthGateError (a node failed the gate and
    `on_failure` is `stop`: setup is not run), SetupFailedError, runner errors.
    """
    from launcher.runtime import execution

    runners = execution.open_runners(cluster)
    agent_result: list[AgentClient] = []
    agent_error: list[BaseException] = []

    def install() -> None:
        try:
            agent_result.append(execution.install_agent(cluster, runners[0]))
        except BaseException as exc:  # re-raised below
            agent_error.append(exc)

    installer = threading.Thread(target=install, daemon=True)
    installer.start()
    try:
        sync_error: BaseException | None = None
        if task is not None:
            # an earlier launch's setup still running (its client was killed): touch nothing
            execution.check_no_setup_running(cluster, runners)
            try:
                execution.sync_task_files(runners, task, on_event=on_event, cloud=cluster.cloud,
                                          checkpoint_store=checkpoint_store)
            except BaseException as exc:  # raised once the agent is in (the cluster stays usable)
                sync_error = exc
        installer.join()
        if agent_error:
            raise agent_error[0]
        _mark_up(db, cluster)
        if sync_error is not None:
            raise sync_error
        if task is not None:  # the health gate (resources.health), before setup
            from launcher.provisioning.health_gate import gate

            gate(db, cluster, runners, task, on_event)
        setup_script = task.node_setup() if task is not None else None  # git workdir + setup
        if task is not None and setup_script and run_setup_script:
            on_event(f"Running setup on {len(runners)} node(s)")
            gpus = execution.gpu_devices(cluster)
            envs = [
                {
                    **task.envs,
                    **task.secrets,
                    **execution.node_env(
                        cluster,
                        node.rank,
                        gpus_per_node=_gpus_per_node(task, db, cluster.cluster_name),
                        cuda_visible_devices=gpus.get(node.rank),
                        task_id=task_id,
                        checkpoint_dir=checkpoint_dir,
                    ),
                }
                for node in cluster.nodes
            ]
            try:
                execution.run_setup(
                    cluster,
                    runners,
                    setup_script,
                    envs=envs,
                    log_dir=execution.setup_log_dir(cluster.cluster_name),
                    on_line=on_setup_line,
                )
            except KeyboardInterrupt:
                on_event(f"Interrupted: setup stopped on all {len(runners)} node(s)")
                raise
            db.add_event(cluster.cluster_name, "setup-done", f"{len(runners)} node(s)")
    finally:
        installer.join()
        execution.close_runners(runners)
    return agent_result[0]


def _gpus_per_node(task: Task, db: StateDB, cluster_name: str) -> float:
    rec = db.get_cluster(cluster_name)
    return rec.accelerator_count if rec else 0.0


def job_spec_for(
    task: Task,
    cluster: ClusterInfo,
    rec: ClusterRecord,
    *,
    task_id: str | None = None,
    checkpoint_dir: str | None = None,
    extra_envs: dict[str, str] | None = None,
    checkpoint_store: str | None = None,
    checkpoint_save_seconds: float | None = None,
) -> JobSpec:
    """The agent JobSpec that runs `task.run` on `task.num_nodes` nodes of the cluster.

    Secrets travel in `envs` and are listed in `secret_names`, which the agent never shows.
    `checkpoint_store` (an s3:// prefix) is synced with `checkpoint_dir` on every node.
    """
    from launcher.runtime.execution import REMOTE_WORKDIR, cluster_info_json
    from launcher.runtime.jobspec import JobSpec

    if not task.run:
        raise LauncherError("The task has no `run` to submit.")
    return JobSpec(
        run=task.run,
        name=task.name,
        envs={**task.envs, **(extra_envs or {}), **task.secrets},
        secret_names=tuple(sorted(task.secrets)),
        num_nodes=task.num_nodes,
        gpus_per_node=rec.accelerator_count,
        workdir=REMOTE_WORKDIR if task.workdir or task.git_workdir else None,
        task_id=task_id,
        checkpoint_dir=checkpoint_dir,
        cluster_info_json=cluster_info_json(cluster),
        checkpoint_store=checkpoint_store,
        checkpoint_save_seconds=checkpoint_save_seconds,
        health=watch_config(task, cluster.cloud,
                            managed="LAUNCHER_MANAGED_JOB_ID" in (extra_envs or {})),
    )


HISTORY_ENV = "LAUNCHER_HEALTH_HISTORY_S"  # the metrics' grain (default 60 s)


def watch_config(task: Task, cloud: str, *, managed: bool) -> dict[str, object] | None:
    """The agent's health watch settings for `task` on `cloud` (agent_spec.parse_health),
    None when the watch is off (`health.watch_seconds: 0`, `health: off`, or unset on the
    local cloud, whose GPUs are simulated). A managed job stops on a
    failing finding (the controller replaces the node) unless `on_failure: warn`; a plain
    cluster's job only with `on_failure: stop`."""
    import os

    from launcher.provisioning.health_gate import effective_health

    spec = effective_health(task)
    period = spec.watch_period(cloud)
    if period <= 0:
        return None
    stop = spec.on_failure != "warn" if managed else spec.watch_stops
    try:
        history = float(os.environ.get(HISTORY_ENV) or 60.0)
    except ValueError:
        history = 60.0
    return {"watch_seconds": period, "hang_minutes": spec.hang_minutes,
            "straggler_pct": spec.straggler_pct, "history_seconds": max(0.1, history),
            "stop": stop}
