"""`exec_`: run a task or a shell command on an UP cluster as a new job (no setup).

Kept apart from `launch` so `launcher exec` never imports the optimizer or the
catalog: its whole round trip is one state-DB read and one agent `submit --follow`
on the head node (submission and log streaming in one agent process).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from launcher.api.cluster_common import (
    LaunchResult,
    LineCallback,
    TaskDoesNotFitError,
    autodown_guard,
    finished,
    fit_problem,
    job_spec_for,
    noop,
    require_up,
    require_user_owned,
)
from launcher.state.db import StateDB, acquire_cluster_lock

if TYPE_CHECKING:
    from launcher.runtime.jobspec import JobSpec
    from launcher.task.model import Task

# How long exec waits for another command (a launch's setup, a stop) holding the cluster.
EXEC_LOCK_WAIT_S = 30.0


def exec_(
    cluster_name: str,
    task_or_command: Task | str,
    *,
    detach_run: bool = False,
    on_line: LineCallback | None = None,
    on_event: LineCallback | None = None,
) -> LaunchResult:
    """Submit a job to an UP cluster and, unless `detach_run`, follow it to the end.

    A Task: its workdir and file_mounts are synced to every node first (setup is
    NOT run, like `sky exec`), then its `run` runs on `task.num_nodes` nodes. A
    string: a shell command run on the head node only, in its home directory.
    Blocking. Raises ClusterNotFoundError, ClusterNotReadyError (not UP),
    TaskDoesNotFitError, ClusterBusyError (held by another command for too long).
    """
    from launcher.runtime import execution

    if isinstance(task_or_command, str):
        from launcher.errors import UsageError
        from launcher.task.model import script_size_problem

        problem = script_size_problem(task_or_command, "the command")
        if problem:
            raise UsageError(problem)

    emit = on_event or noop
    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        require_user_owned(rec)
        require_up(rec)
        cluster = db.cluster_info(cluster_name)
    task: Task | None = None
    if isinstance(task_or_command, str):
        spec = _command_spec(task_or_command, cluster_name)
    else:
        task = task_or_command
        problem = fit_problem(rec, task)
        if problem:
            raise TaskDoesNotFitError(f"Cluster {cluster_name!r} cannot run this task: {problem}.")
        spec = job_spec_for(task, cluster, rec)
    result = LaunchResult(
        cluster_name=cluster_name, cloud=rec.cloud, region=rec.region, zone=rec.zone,
        num_nodes=rec.num_nodes, hourly_cost=rec.hourly_cost, reused=True,
    )
    # The lock covers file sync + submission only (never the job's run): it is released
    # as soon as the agent has queued the job.
    lock = acquire_cluster_lock(cluster_name, wait=EXEC_LOCK_WAIT_S, purpose="exec")
    submitted: list[int] = []

    def on_submitted(job_id: int) -> None:
        submitted.append(job_id)
        lock.release()
        emit(f"Job {job_id} submitted to {cluster_name}")

    try:
        with autodown_guard(cluster_name):
            if task is not None and (task.workdir or task.file_mounts or task.storage_mounts):
                runners = execution.open_runners(cluster)
                try:
                    execution.sync_task_files(runners, task, on_event=emit, cloud=cluster.cloud)
                finally:
                    execution.close_runners(runners)
            client = execution.agent_client(cluster)
            if detach_run:
                on_submitted(client.submit(spec))
                return replace(result, job_id=submitted[0])
            # One agent process for submit + log follow: the fastest round trip.
            record = client.submit_and_follow(spec, on_line or noop, on_submitted)
    finally:
        if not submitted:
            lock.release()
    return finished(replace(result, job_id=record.id), record)


def _command_spec(command: str, cluster_name: str) -> JobSpec:
    from launcher.errors import LauncherError
    from launcher.runtime.jobspec import JobSpec

    if not command.strip():
        raise LauncherError(f"exec {cluster_name}: the command is empty.")
    return JobSpec(run=command, name="command", num_nodes=1)
