"""`launch` and `exec_`: bring a cluster up (or reuse it), set it up, run a job on it.

The launch flow (blocking; `on_event` gets progress lines, `on_line` job output):
1. Name: the given one (validated) or a fresh `launcher-<4 hex>`.
2. Take the cluster's lock (a second launch of the same name fails at once with
   ClusterBusyError) - held until the job is submitted, not while logs stream.
3. An existing UP cluster that fits the task is reused (sync + setup + run, like
   `sky launch -c`); a STOPPED one is started; one left INIT after provisioning (a
   dead launch, a failed agent install) is reused when the task fits it and all its
   recorded nodes are RUNNING and answer (launcher.provisioning.resume); otherwise
   an INIT or PREEMPTED one is terminated and provisioned afresh. Otherwise: plan and
   provision with failover (launcher.provisioning.failover), recording the cluster
   before any cloud call.
4. Agent install (in parallel with the file sync), sync workdir + file_mounts,
   setup on all nodes (fail fast), then the run is submitted as a job and
   its output streamed with rank prefixes until it ends (unless detach_run).

Failure policy:
- during provisioning: every partial attempt is terminated; if the launch
  created the cluster and no placement worked, its row is removed.
- after provisioning (sync, setup, agent): the cluster is kept UP so it can be
  inspected or relaunched (SkyPilot does the same) - unless the launch created
  it with `down=True`, in which case it is taken down before the error is raised.
- Ctrl-C while provisioning terminates what was being created; Ctrl-C while
  following the job leaves the job running (`launcher logs` re-attaches).
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import replace
from typing import TYPE_CHECKING

from launcher.api.cluster_common import (
    CloudFn,
    ClusterNotReadyError,
    LaunchResult,
    LineCallback,
    TaskDoesNotFitError,
    default_cloud,
    finished,
    fit_problem,
    job_spec_for,
    noop,
    require_user_owned,
    terminate_everywhere,
)
from launcher.clouds.base import ClusterInfo, FailoverAttempt, NodeState
from launcher.errors import ClusterNotFoundError, LauncherError
from launcher.provisioning.failover import (
    Backoff,
    ConfirmCallback,
    EventCallback,
    LaunchAbortedError,
    PlanFn,
    default_plan,
    provision_with_failover,
)
from launcher.provisioning.prepare import prepare_cluster
from launcher.state.db import (
    ClusterRecord,
    ClusterStatus,
    StateDB,
    acquire_cluster_lock,
    validate_cluster_name,
)

if TYPE_CHECKING:
    from launcher.task.model import Task

__all__ = [
    "Backoff",
    "ClusterNotReadyError",
    "LaunchAbortedError",
    "LaunchResult",
    "TaskDoesNotFitError",
    "generate_cluster_name",
    "job_spec_for",
    "launch",
    "prepare_cluster",
]


# `launch --down` while following the job: the agent's fallback autostop, should the
# client die before it can take the cluster down itself.
CLIENT_DOWN_SAFETY_MINUTES = 1.0


def generate_cluster_name(db: StateDB) -> str:
    """`launcher-<4 hex>`, not used by any existing cluster."""
    while True:
        name = f"launcher-{secrets.token_hex(2)}"
        if db.get_cluster(name) is None:
            return name


# ----------------------------------------------------------------- launch


def launch(
    task: Task,
    cluster_name: str | None = None,
    *,
    detach_run: bool = False,
    idle_minutes: float | None = None,
    down: bool = False,
    yes: bool = True,
    confirm: ConfirmCallback | None = None,
    on_line: LineCallback | None = None,
    on_event: EventCallback | None = None,
    on_setup_line: LineCallback | None = None,
    plan_fn: PlanFn = default_plan,
    cloud_fn: CloudFn = default_cloud,
    retry_until_up: bool = False,
    backoff: Backoff = Backoff(),
) -> LaunchResult:
    """Launch `task` on a new or existing cluster and run it. Blocking.

    `idle_minutes`/`down` set autostop after the job is submitted (`down=True`
    alone = take the cluster down as soon as it is idle, i.e. after the job).
    The task's own `autostop` is used when neither is given. `confirm` (unless
    `yes`) is asked before provisioning a paid placement. `retry_until_up`: when every
    placement fails for capacity or quota, keep retrying the whole plan after a capped
    exponential `backoff` (each round announced through `on_event`; Ctrl-C stops and
    leaves nothing). Raises LauncherError
    subclasses: ClusterBusyError, NoPlacementError, ProvisionFailedError,
    LaunchAbortedError, SetupFailedError, TaskDoesNotFitError...
    """
    from launcher.runtime.execution import resolve_file_mounts

    emit = on_event or noop
    task.check_values()  # an env/secret without a value fails before provisioning
    task.check_local_paths()  # bad paths fail before anything is provisioned
    resolve_file_mounts(task)
    if idle_minutes is None and not down and task.autostop is not None:
        idle_minutes, down = task.autostop.idle_minutes, task.autostop.down
    if idle_minutes is not None and not down:
        _require_stoppable(task, cluster_name, cloud_fn)
    with StateDB() as db:
        name = validate_cluster_name(cluster_name) if cluster_name else generate_cluster_name(db)
        lock = acquire_cluster_lock(name, purpose="launch")
        try:
            cluster, attempts, created, reused = _get_cluster(
                db, name, task, plan_fn=plan_fn, cloud_fn=cloud_fn,
                confirm=None if yes else confirm, emit=emit,
                retry_until_up=retry_until_up, backoff=backoff,
            )
            if idle_minutes is not None and not down:  # e.g. ssh pools: autostop must --down
                from launcher.api.clusters import require_can_stop

                try:
                    require_can_stop(cluster.cloud, name, "autostop", cloud_fn)
                except LauncherError:
                    if created:  # the optimizer picked a cloud that cannot stop: leave nothing
                        emit(f"Taking {name} down: {cluster.cloud} clusters cannot stop")
                        _down_locked(db, name, cloud_fn)
                    raise
            try:
                client = prepare_cluster(db, cluster, task, on_event=emit, on_setup_line=on_setup_line)
            except BaseException:
                if created and down:
                    emit(f"Taking {name} down (launched with --down)")
                    _down_locked(db, name, cloud_fn)
                raise
            rec = db.require_cluster(name)
            result = LaunchResult(
                cluster_name=name, cloud=cluster.cloud, region=cluster.region, zone=cluster.zone,
                num_nodes=len(cluster.nodes), hourly_cost=rec.hourly_cost, created=created,
                reused=reused, attempts=attempts,
            )
            if task.run:
                job_id = client.submit(job_spec_for(task, cluster, rec))
                db.add_event(name, "job-submitted", f"job {job_id}")
                emit(f"Job {job_id} submitted to {name}")
                result = replace(result, job_id=job_id)
            # `--down` with no idle time: down as soon as the job ends. While we follow
            # the job, we do it ourselves after its last line (an agent-side down could
            # race our log stream); the agent gets a short safety net in case we die.
            client_downs = down and not idle_minutes and result.job_id is not None and not detach_run
            if idle_minutes is not None or down:
                minutes = CLIENT_DOWN_SAFETY_MINUTES if client_downs else (idle_minutes or 0)
                client.set_autostop(minutes, down)
                db.set_autostop(name, minutes, down)
        finally:
            lock.release()
    if result.job_id is None or detach_run:
        return result
    done = finished(result, client.follow_logs(result.job_id, on_line or noop, follow=True))
    if client_downs:
        from launcher.api.clusters import down as down_cluster

        emit(f"Taking {name} down (--down)")
        with contextlib.suppress(ClusterNotFoundError):  # the safety net was faster
            down_cluster(name, cloud_fn=cloud_fn)
    return done


def _require_stoppable(task: Task, cluster_name: str | None, cloud_fn: CloudFn) -> None:
    """`-i N` without --down: refuse before provisioning when every candidate cloud of the
    task cannot stop (ssh pools). Raises StopNotSupportedError."""
    from launcher.api.clusters import require_can_stop

    clouds = {c.cloud for c in task.candidates()}
    if len(clouds) == 1 and None not in clouds:
        require_can_stop(str(next(iter(clouds))), cluster_name or "CLUSTER", "autostop", cloud_fn)


def _get_cluster(
    db: StateDB,
    name: str,
    task: Task,
    *,
    plan_fn: PlanFn,
    cloud_fn: CloudFn,
    confirm: ConfirmCallback | None,
    emit: EventCallback,
    retry_until_up: bool = False,
    backoff: Backoff = Backoff(),
) -> tuple[ClusterInfo, list[FailoverAttempt], bool, bool]:
    """(cluster, failover attempts, created, reused) with the lock held."""
    rec = db.get_cluster(name)
    if rec is not None:
        require_user_owned(rec)
    if rec is not None and rec.status is ClusterStatus.INIT:
        reused = _resume_init(db, rec, task, cloud_fn, emit)
        if reused is not None:
            return reused, [], False, True
    if rec is not None and rec.status in (ClusterStatus.UP, ClusterStatus.STOPPED):
        problem = fit_problem(rec, task)
        if problem:
            raise TaskDoesNotFitError(
                f"Cluster {name!r} ({rec.resources} on {rec.cloud}/{rec.region}) cannot run this "
                f"task: {problem}. Use another cluster name, or `launcher down {name}` first."
            )
        cloud = cloud_fn(rec.cloud)
        view = cloud.query(name)
        states = set(view.values())
        if rec.status is ClusterStatus.UP and states == {NodeState.RUNNING}:
            emit(f"Reusing cluster {name} ({rec.resources})")
            return db.cluster_info(name), [], False, True
        if states and states <= {NodeState.RUNNING, NodeState.STOPPED} and hasattr(cloud, "start"):
            emit(f"Starting stopped cluster {name}")
            info: ClusterInfo = cloud.start(name)
            db.set_nodes(name, info.nodes)
            db.open_usage(db.require_cluster(name))
            return info, [], False, False
        emit(f"Cluster {name} is gone or damaged in the cloud ({_states(view)}): relaunching")
    if rec is not None:
        terminate_everywhere(db, rec, cloud_fn)
        db.delete_cluster(name, reason="relaunch")
    try:
        got = provision_with_failover(
            task, name, db, plan_fn=plan_fn, cloud_fn=cloud_fn, confirm=confirm, on_event=emit,
            retry_until_up=retry_until_up, backoff=backoff,
        )
    except BaseException:
        # Nothing was provisioned (every attempt was terminated): forget the name -
        # unless a terminate failed, then the INIT row stays so `down` can retry.
        left = db.get_cluster(name)
        if left is not None:
            with contextlib.suppress(Exception):
                terminate_everywhere(db, left, cloud_fn)
                db.delete_cluster(name, reason="launch failed")
        raise
    return got.cluster, got.attempts, True, False


def _resume_init(db: StateDB, rec: ClusterRecord, task: Task, cloud_fn: CloudFn,
                 emit: EventCallback) -> ClusterInfo | None:
    """A cluster left INIT (its launch died, or its agent install failed; this launch
    holds its lock, so nobody else is bringing it up): its gang when every node is still
    there and answers (launcher.provisioning.resume) and the task fits it, else None
    (the caller terminates it and provisions afresh), saying why either way."""
    from launcher.provisioning.resume import check_init_gang

    problem = fit_problem(rec, task)
    if problem:
        emit(f"Cluster {rec.name} was left INIT and cannot run this task ({problem}): "
             "provisioning it again")
        return None
    try:
        cloud = cloud_fn(rec.cloud)
    except KeyError:
        return None
    check = check_init_gang(db, rec, cloud)
    if check.info is None:
        emit(f"Cluster {rec.name} was left INIT by a launch that did not finish, and its "
             f"nodes cannot be reused ({check.why}): provisioning it again")
        return None
    db.claim_launch(rec.name)
    db.add_event(rec.name, "resumed", f"INIT gang of {len(check.info.nodes)} node(s) reused")
    emit(f"Resuming cluster {rec.name} ({rec.resources}), left INIT by a launch that did "
         f"not finish: its {len(check.info.nodes)} node(s) answer, reusing them")
    return check.info


def _states(view: dict[str, NodeState]) -> str:
    if not view:
        return "no nodes"
    return ", ".join(f"{k}: {v.value}" for k, v in sorted(view.items()))


def _down_locked(db: StateDB, name: str, cloud_fn: CloudFn) -> None:
    rec = db.get_cluster(name)
    if rec is None:
        return
    terminate_everywhere(db, rec, cloud_fn)
    db.delete_cluster(name, reason="down")


