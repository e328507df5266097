"""Cluster lifecycle and job-queue verbs: status, queue, logs, cancel, stop, start,
down, autostop. (`launch` and `exec_` live in launcher/api/launch.py.)

Every function is blocking and raises LauncherError subclasses only:
ClusterNotFoundError for an unknown name, ClusterBusyError when another command
holds the cluster's lock for longer than the wait, ClusterNotReadyError when the
cluster is not UP for a verb that needs its agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.api.cluster_common import (
    CloudFn,
    ClusterNotReadyError,
    default_cloud,
    job_exit_code,
    require_up,
    terminate_everywhere,
)
from launcher.clouds.base import NodeState
from launcher.errors import LauncherError
from launcher.state import (
    ClusterRecord,
    ClusterStatus,
    StateDB,
    acquire_cluster_lock,
    cluster_lock,
)

if TYPE_CHECKING:
    from launcher.runtime.agent_client import AgentClient, CancelResult
    from launcher.runtime.jobspec import JobRecord

LineCallback = Callable[[str], None]
LOCK_WAIT_S = 10.0


class StopNotSupportedError(LauncherError):
    exit_code = 2


@dataclass(frozen=True)
class ClusterStatusView:
    """One row of `launcher status`. `to_json()` is the pinned `status --json` shape."""

    name: str
    cloud: str
    region: str
    zone: str | None
    num_nodes: int
    status: str
    hourly_cost: float
    autostop_minutes: float | None
    autostop_down: bool
    resources: str
    launched_at: float
    owner: str | None

    @staticmethod
    def of(rec: ClusterRecord) -> ClusterStatusView:
        return ClusterStatusView(
            name=rec.name,
            cloud=rec.cloud,
            region=rec.region,
            zone=rec.zone,
            num_nodes=rec.num_nodes,
            status=rec.status.value,
            hourly_cost=rec.hourly_cost,
            autostop_minutes=rec.autostop_minutes,
            autostop_down=rec.autostop_down,
            resources=rec.resources,
            launched_at=rec.launched_at,
            owner=rec.owner,
        )

    def to_json(self) -> dict[str, object]:
        """{name, cloud, region, zone, num_nodes, status, hourly_cost, autostop}; autostop
        is null or {"idle_minutes": int, "down": bool}. Never carries keys or secrets."""
        return {
            "name": self.name,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "num_nodes": self.num_nodes,
            "status": self.status,
            "hourly_cost": self.hourly_cost,
            "autostop": None
            if self.autostop_minutes is None
            else {"idle_minutes": _num(self.autostop_minutes), "down": self.autostop_down},
        }


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def job_json(record: JobRecord) -> dict[str, object]:
    """The pinned `queue --json` shape of one job (times: epoch seconds or null)."""
    return {
        "id": record.id,
        "name": record.name,
        "status": record.status.value,
        "submitted_at": record.submitted_at,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "exit_code": record.exit_code,
    }


# ------------------------------------------------------------------ status


def status(refresh: bool = False, *, cloud_fn: CloudFn = default_cloud) -> list[ClusterStatusView]:
    """Every cluster in the state DB. With `refresh`, ask each cloud for its view first
    and reconcile: nodes gone -> the cluster is removed (it was taken down, e.g. by
    autostop); any node PREEMPTED -> PREEMPTED; all STOPPED -> STOPPED; all
    RUNNING -> UP (a cluster being launched, lock held, is left alone)."""
    with StateDB() as db:
        if refresh:
            for rec in db.list_clusters():
                _refresh_one(db, rec, cloud_fn)
        return [ClusterStatusView.of(r) for r in db.list_clusters()]


def _refresh_one(db: StateDB, rec: ClusterRecord, cloud_fn: CloudFn) -> None:
    try:
        lock = acquire_cluster_lock(rec.name, purpose="status --refresh")
    except LauncherError:
        return  # another command is working on it: its view is fresher than ours
    try:
        try:
            view = cloud_fn(rec.cloud).query(rec.name)
        except KeyError:
            return
        states = set(view.values())
        if not view or states <= {NodeState.TERMINATED}:
            db.delete_cluster(rec.name, reason="gone from the cloud (refresh)")
        elif NodeState.PREEMPTED in states or NodeState.TERMINATED in states:
            if rec.status is not ClusterStatus.PREEMPTED:
                db.set_status(rec.name, ClusterStatus.PREEMPTED, _describe(view))
                db.close_usage(rec.name, "preempted")
        elif states == {NodeState.STOPPED}:
            if rec.status is not ClusterStatus.STOPPED:
                db.set_status(rec.name, ClusterStatus.STOPPED, "stopped (refresh)")
                db.close_usage(rec.name, "stopped")
        elif states == {NodeState.RUNNING} and rec.status is ClusterStatus.STOPPED:
            db.set_status(rec.name, ClusterStatus.UP, "running (refresh)")
    finally:
        lock.release()


def _describe(view: dict[str, NodeState]) -> str:
    return ", ".join(f"{k} {v.value}" for k, v in sorted(view.items()) if v is not NodeState.RUNNING)


# ------------------------------------------------------------------ job queue


def _client(name: str) -> tuple[AgentClient, ClusterRecord]:
    from launcher.runtime.execution import agent_client

    with StateDB() as db:
        rec = db.require_cluster(name)
        require_up(rec)
        return agent_client(db.cluster_info(name)), rec


def queue(cluster_name: str) -> list[JobRecord]:
    """The cluster's jobs, oldest first (from its agent)."""
    client, _ = _client(cluster_name)
    return client.queue()


def logs(
    cluster_name: str,
    job_id: int | None = None,
    *,
    follow: bool = True,
    on_line: LineCallback | None = None,
) -> JobRecord:
    """Stream a job's output (rank-prefixed lines) to `on_line`; `job_id` None = the
    latest job. With `follow`, blocks until the job ends. Returns its record."""
    client, _ = _client(cluster_name)
    if job_id is None:
        jobs = client.queue()
        if not jobs:
            raise LauncherError(f"Cluster {cluster_name!r} has no jobs yet.")
        job_id = max(j.id for j in jobs)
    return client.follow_logs(job_id, on_line or (lambda _l: None), follow=follow)


def cancel(cluster_name: str, job_ids: Sequence[int] | None = None) -> CancelResult:
    """Cancel the given jobs (None = every pending or running job); returns once they
    have ended. Idempotent. Raises JobNotFoundError naming unknown ids."""
    client, _ = _client(cluster_name)
    return client.cancel(list(job_ids) if job_ids is not None else None)


def exit_code_of(record: JobRecord) -> int:
    return job_exit_code(record)


# ------------------------------------------------------------------ lifecycle


def stop(cluster_name: str, *, cloud_fn: CloudFn = default_cloud) -> None:
    """Stop the cluster's nodes (disks kept; billing of compute ends). Idempotent.
    Raises StopNotSupportedError on clouds that cannot stop."""
    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        cloud = cloud_fn(rec.cloud)
        if not hasattr(cloud, "stop"):
            raise StopNotSupportedError(
                f"The {rec.cloud} cloud cannot stop clusters; use `launcher down {cluster_name}`."
            )
        with cluster_lock(cluster_name, wait=LOCK_WAIT_S, purpose="stop"):
            if rec.status is ClusterStatus.STOPPED:
                return
            if rec.status is ClusterStatus.PREEMPTED:
                raise ClusterNotReadyError(
                    f"Cluster {cluster_name!r} was preempted; it cannot be stopped, only relaunched "
                    f"or taken down (`launcher down {cluster_name}`)."
                )
            cloud.stop(cluster_name)
            db.set_status(cluster_name, ClusterStatus.STOPPED, "stopped by user")
            db.close_usage(cluster_name, "stopped")


def start(cluster_name: str, *, cloud_fn: CloudFn = default_cloud) -> None:
    """Start a STOPPED cluster again and restart its agent (the job queue survives).
    A cluster that is UP is left as is."""
    from launcher.runtime.execution import install_agent
    from launcher.runtime.runner import runner_for

    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        if rec.status is ClusterStatus.UP:
            return
        if rec.status is not ClusterStatus.STOPPED:
            require_up(rec)
        cloud = cloud_fn(rec.cloud)
        if not hasattr(cloud, "start"):
            raise StopNotSupportedError(f"The {rec.cloud} cloud cannot start clusters.")
        with cluster_lock(cluster_name, wait=LOCK_WAIT_S, purpose="start"):
            info = cloud.start(cluster_name)
            db.set_nodes(cluster_name, info.nodes)
            client = install_agent(info, runner_for(info, info.head))
            if rec.autostop_minutes is not None:
                client.set_autostop(rec.autostop_minutes, rec.autostop_down)
            db.set_status(cluster_name, ClusterStatus.UP, "started by user")
            db.open_usage(db.require_cluster(cluster_name))


def down(cluster_name: str, *, cloud_fn: CloudFn = default_cloud) -> None:
    """Terminate every node of the cluster (on every cloud a launch attempt touched)
    and forget it. Raises ClusterNotFoundError for an unknown name; waits up to
    LOCK_WAIT_S for a command holding the cluster (e.g. a launch) to finish."""
    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        with cluster_lock(cluster_name, wait=LOCK_WAIT_S, purpose="down"):
            rec = db.get_cluster(cluster_name) or rec
            terminate_everywhere(db, rec, cloud_fn)
            db.delete_cluster(cluster_name, reason="down")


def autostop(
    cluster_name: str, idle_minutes: float | None, *, down: bool = False
) -> None:
    """Set (or with `idle_minutes=None`, cancel) autostop. The head-node agent enforces
    it: after `idle_minutes` with no pending or running job, the cluster is stopped
    (or taken down with `down=True`; clouds that cannot stop are always taken down)."""
    if idle_minutes is not None and idle_minutes < 0:
        raise LauncherError("autostop: idle minutes must be >= 0.")
    client, rec = _client(cluster_name)
    client.set_autostop(idle_minutes, down)
    with StateDB() as db:
        db.set_autostop(cluster_name, idle_minutes, down if idle_minutes is not None else False)


def down_many(
    names: Sequence[str], *, cloud_fn: CloudFn = default_cloud
) -> list[tuple[str, LauncherError | None]]:
    """`down` each name (one failure does not stop the others); (name, error) in order."""
    out: list[tuple[str, LauncherError | None]] = []
    for name in names:
        try:
            down(name, cloud_fn=cloud_fn)
            out.append((name, None))
        except LauncherError as exc:
            out.append((name, exc))
    return out


def cluster_names() -> list[str]:
    with StateDB() as db:
        return [c.name for c in db.list_clusters()]


# ------------------------------------------------------------------ local cloud


def local_preempt(cluster_name: str, node: int | None = None, notice_seconds: float = 0) -> list[int]:
    """Preempt node `node` (None = all) of a local cluster like a provider reclaiming spot
    capacity (see LocalCloud.preempt), and mark the cluster PREEMPTED in the state DB.
    Blocking for the notice. Returns the preempted ranks."""
    from launcher.clouds.local import LocalCloud

    if notice_seconds < 0:
        raise LauncherError("--notice must be >= 0 seconds.")
    with StateDB() as db:
        rec = db.get_cluster(cluster_name)
        if rec is not None and rec.cloud != "local":
            raise LauncherError(
                f"Cluster {cluster_name!r} runs on {rec.cloud}, not on the local cloud."
            )
    ranks = LocalCloud().preempt(cluster_name, node, notice_seconds)
    with StateDB() as db:
        if db.get_cluster(cluster_name) is not None:
            db.set_status(cluster_name, ClusterStatus.PREEMPTED, f"node(s) {ranks} preempted")
            db.close_usage(cluster_name, "preempted")
    return ranks
