"""Cluster lifecycle and job-queue verbs: status, queue, logs, cancel, stop, start,
down, autostop. (`launch` and `exec_` live in launcher/api/launch.py.)

Every function is blocking and raises LauncherError subclasses only:
ClusterNotFoundError for an unknown name, ClusterBusyError when another command
holds the cluster's lock for longer than the wait, ClusterNotReadyError when the
cluster is not UP for a verb that needs its agent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from launcher.api.cluster_common import (
    CloudFn,
    ClusterNotReadyError,
    autodown_guard,
    default_cloud,
    job_exit_code,
    reconcile_autodowned,
    require_up,
    terminate_everywhere,
)
from launcher.clouds.base import NodeState
from launcher.errors import ClusterNotFoundError, LauncherError
from launcher.state.db import (
    ClusterRecord,
    ClusterStatus,
    StateDB,
    acquire_cluster_lock,
    cluster_lock,
    launch_process_gone,
)

if TYPE_CHECKING:
    from launcher.provisioning.orphans import Orphan
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
    # why `status` is not the stored one (DEGRADED: what a refresh saw, and when)
    status_reason: str | None = None
    status_seen_at: float | None = None
    # what it was launched as (not in to_json: the pinned shape)
    instance_type: str = ""
    use_spot: bool = False
    accelerator: str | None = None
    accelerator_count: float = 0.0

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
            instance_type=rec.instance_type,
            use_spot=rec.use_spot,
            accelerator=rec.accelerator,
            accelerator_count=rec.accelerator_count,
        )

    def to_json(self) -> dict[str, object]:
        """{name, cloud, region, zone, num_nodes, status, hourly_cost, autostop,
        status_reason, status_seen_at}; autostop is null or {"idle_minutes": int, "down":
        bool}; status_reason / status_seen_at (epoch seconds) say what the `status
        --refresh` that found a DEGRADED cluster saw, and when; for an INIT cluster whose
        launching process is gone, status_reason says so (status_seen_at null); both
        null otherwise. Never carries keys or secrets."""
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
            "status_reason": self.status_reason,
            "status_seen_at": self.status_seen_at,
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


def status(refresh: bool = False, *, cloud_fn: CloudFn = default_cloud,
           notes: list[str] | None = None, orphans: list[Orphan] | None = None,
           orphan_clouds: Sequence[str] | None = None) -> list[ClusterStatusView]:
    """Every cluster in the state DB. With `refresh`, ask each cloud for its view first
    and reconcile: nodes gone -> the cluster is removed (it was taken down, e.g. by
    autostop); any node PREEMPTED -> PREEMPTED; all STOPPED -> STOPPED; all
    RUNNING -> UP; some node UNKNOWN (unreachable, not confirmed lost) -> DEGRADED
    in the view (the DB keeps UP; the next refresh re-checks). A cluster being
    launched (lock held) is left alone.

    Always (refresh or not): an INIT cluster whose launching process (pid and host in
    its row) is gone gets a `status_reason` and a line in `notes` saying so, with what to
    do (`launch -c NAME`, `down`; for a managed job's, start the controller). An UP cluster with autostop --down on a cloud whose
    nodes cannot take themselves down (ssh) is asked whether its agent autodowned it;
    if so its nodes are released and it is removed. One line per such event (and per
    DEGRADED cluster) is appended to `notes`.

    With `refresh`, every cloud in `orphan_clouds` (default: the enabled ones) that can
    list its tagged instances (SupportsOrphans) is asked for instances no cluster here
    owns; each is appended to `orphans` and named in `notes` with the command that
    removes it (`launcher down --orphan NAME --cloud CLOUD`)."""
    from launcher.api import health_store

    out_notes = notes if notes is not None else []
    with StateDB() as db:
        for rec in db.list_clusters():
            if _agent_downs_itself(rec) and (refresh or _autodown_may_be_due(rec)):
                line = _check_autodowned(rec, cloud_fn)
                if line:
                    out_notes.append(line)
                    continue
            if refresh:
                checked, why = _refresh_one(db, rec, cloud_fn, out_notes)
                if why:
                    health_store.record(db, rec, DEGRADED, why, time.time())
                    out_notes.append(f"{rec.name}: DEGRADED: {why}")
                elif checked:
                    health_store.clear(db, rec.name)
        records = db.list_clusters()
        health = health_store.load(db, records)
    views = []
    for r in records:
        v = ClusterStatusView.of(r)
        h = health.get(r.name)
        if h is not None and r.status is ClusterStatus.UP:
            v = replace(v, status=h.status, status_reason=h.reason, status_seen_at=h.seen_at)
        gone = _launch_gone(r)
        if gone is not None:
            reason, hint = gone
            v = replace(v, status_reason=reason)
            out_notes.append(f"{r.name}: INIT, but {reason}; {hint}")
        views.append(v)
    if refresh:
        _scan_orphans(cloud_fn, out_notes, orphans, orphan_clouds)
    return views


def _launch_gone(rec: ClusterRecord) -> tuple[str, str] | None:
    """(why, what to do) for an INIT cluster whose launching process (recorded in the
    cluster's row) is known to be gone; None otherwise."""
    if rec.status is not ClusterStatus.INIT or not launch_process_gone(rec.launch_pid,
                                                                       rec.launch_host):
        return None
    who = f"pid {rec.launch_pid} on {rec.launch_host}"
    if rec.owner and rec.owner.startswith("managed-job:"):
        job = rec.owner.split(":", 1)[1]
        return (f"the managed-jobs controller that was bringing it up ({who}) is gone",
                f"`launcher jobs controller start` resumes managed job {job} (it rebuilds "
                "the half-built cluster)")
    return (f"the launch that was bringing it up ({who}) is gone",
            f"`launcher launch -c {rec.name} TASK` finishes it (reusing its nodes when they "
            f"all answer, else provisioning it again), or `launcher down {rec.name}` "
            "removes it")


def _scan_orphans(cloud_fn: CloudFn, notes: list[str], out: list[Orphan] | None,
                  clouds: Sequence[str] | None) -> None:
    from launcher.provisioning.orphans import enabled_cloud_names, find_orphans

    scan = find_orphans(enabled_cloud_names() if clouds is None else clouds, cloud_fn=cloud_fn)
    for o in scan.orphans:
        notes.append(
            f"Orphan on {o.cloud}: {o.summary()} tagged for cluster {o.cluster!r}, which "
            f"no cluster here owns; remove with `{o.command}`")
    for cloud, why in sorted(scan.errors.items()):
        notes.append(f"Could not list {cloud} resources for orphans: {why}")
    if out is not None:
        out.extend(scan.orphans)


def down_orphan(cluster_name: str, cloud: str, *, cloud_fn: CloudFn = default_cloud) -> None:
    """Terminate the instances tagged `cluster_name` on `cloud` that no cluster in the
    state DB owns (listed by `status --refresh`). Idempotent. Raises LauncherError for a
    name the state DB knows (use `down`) or an unknown cloud."""
    from launcher.provisioning.teardown import terminate_orphan

    terminate_orphan(cloud, cluster_name, cloud_fn=cloud_fn)


# Clouds whose machines are never preempted: a node that does not answer makes the cluster
# DEGRADED (docs/ssh-pools.md), not PREEMPTED.
NEVER_PREEMPTED = frozenset({"ssh"})

# Found by `status --refresh` when some node of an UP cluster does not answer but is not
# confirmed lost either (NodeState.UNKNOWN, e.g. an ssh host cut off the network). Stored
# with the time it was seen (health_store.py) and shown by every `status` until a refresh
# finds the cluster healthy; the cluster's own status stays UP.
DEGRADED = "DEGRADED"


def _agent_downs_itself(rec: ClusterRecord) -> bool:
    """Autostop --down is enforced by the agent itself (no client-side action)."""
    return (rec.status is ClusterStatus.UP and rec.autostop_down
            and rec.autostop_minutes is not None and rec.cloud != "local")


def _autodown_may_be_due(rec: ClusterRecord) -> bool:
    """Could the agent have autodowned the cluster yet? It idles at least the autostop
    minutes after the cluster came UP; before that a plain `status` asks no node."""
    minutes = rec.autostop_minutes or 0.0
    return time.time() - rec.status_changed_at >= minutes * 60


def _check_autodowned(rec: ClusterRecord, cloud_fn: CloudFn) -> str | None:
    from launcher.runtime.agent_client import ClusterAutodownedError
    from launcher.runtime.execution import agent_client

    client = None
    try:
        with StateDB() as db:
            client = agent_client(db.cluster_info(rec.name))
        client.status()
    except ClusterAutodownedError as exc:
        return reconcile_autodowned(rec.name, exc.at, exc.idle_minutes, cloud_fn)
    except LauncherError:
        return None  # unreachable etc.: `status --refresh` reports it
    finally:
        if client is not None:
            client.head.close()
    return None


def _refresh_one(db: StateDB, rec: ClusterRecord, cloud_fn: CloudFn,
                 notes: list[str]) -> tuple[bool, str | None]:
    """Reconcile one cluster with its cloud's view: (checked, why it is degraded if it is).
    `checked` is False when the cluster was left alone (busy, or no such cloud here)."""
    try:
        lock = acquire_cluster_lock(rec.name, purpose="status --refresh")
    except LauncherError:
        return False, None  # another command is working on it: its view is fresher than ours
    try:
        try:
            view = cloud_fn(rec.cloud).query(rec.name)
        except KeyError:
            return False, None
        why = _reconcile(db, rec, view, cloud_fn, notes)
        if why is None and view and set(view.values()) == {NodeState.RUNNING}:
            why = _watch_degraded(db, rec)
        now = db.get_cluster(rec.name)  # (after any status change the view caused)
        if now is not None and view:
            from launcher.state import node_state

            node_state.record_view(db, now, view, time.time(),
                                   f"{rec.cloud} (status --refresh)")
        return True, why
    finally:
        lock.release()


HEALTH_PREFIX = "health: "  # a DEGRADED reason that comes from the agent's health watch


def _watch_degraded(db: StateDB, rec: ClusterRecord) -> str | None:
    """'health: node 1: Xid 79' when the agent's health watch failed a node of the UP
    NVIDIA-GPU cluster `rec` (docs/health.md; kept by the agent until `launcher health`
    finds every node passing); None when healthy, without NVIDIA GPUs, or when the agent
    cannot be asked."""
    from launcher.provisioning.health_gate import is_nvidia

    if rec.status is not ClusterStatus.UP or not is_nvidia(rec.accelerator):
        return None  # the watch's findings are about GPUs: CPU clusters cost no extra call
    from launcher.runtime.execution import agent_client
    from launcher.runtime.jobspec import HealthFinding

    cluster = db.cluster_info(rec.name)
    if not cluster.nodes:
        return None
    client = None
    try:
        client = agent_client(cluster)
        degraded = client.health().get("degraded")
        finding = HealthFinding.from_json(degraded) if isinstance(degraded, dict) else None
    except (LauncherError, ValueError):
        return None  # an older agent, or unreachable: the cloud's view stands
    finally:
        if client is not None:
            client.head.close()
    if finding is None:
        return None
    why = HEALTH_PREFIX + finding.headline()
    db.add_event(rec.name, "degraded", f"{why} ({finding.summary})")
    return why


def _reconcile(db: StateDB, rec: ClusterRecord, view: dict[str, NodeState],
               cloud_fn: CloudFn, notes: list[str]) -> str | None:
    """Apply the cloud's `view` of one cluster to the state DB; why it is degraded, if it is.
    A cluster with no node left is torn down on its cloud(s) before its record is
    forgotten; when that teardown fails the record stays and a line goes to `notes`."""
    states = set(view.values())
    if not view or (rec.cloud not in NEVER_PREEMPTED and states <= {NodeState.TERMINATED}):
        # No node left (or none was ever made: a launch killed before its instances).
        # What else the cluster holds (a security group, a placement group, addresses)
        # goes first: a record is forgotten only once its cloud teardown has run.
        try:
            terminate_everywhere(db, rec, cloud_fn)  # idempotent: release what may remain
        except LauncherError as exc:
            notes.append(f"{rec.name}: no node is left on {rec.cloud}, but its teardown "
                         f"failed, so it is kept (`launcher down {rec.name}` retries): {exc}")
            return None
        db.delete_cluster(rec.name, reason="gone from the cloud (refresh)")
        notes.append(f"{rec.name}: no node is left on {rec.cloud} ({rec.status.value} "
                     f"before); what remained of it there was removed and it is forgotten")
    elif rec.cloud in NEVER_PREEMPTED and states & {NodeState.TERMINATED, NodeState.UNKNOWN}:
        # Before the "all gone" case: a pool host that does not answer is still held by
        # this cluster, and only `down` gives it back (forgetting the row would leak it).
        if rec.status is not ClusterStatus.UP:
            return None
        bad = sorted(f"{k} {'lost' if v is NodeState.TERMINATED else 'not answering'}"
                     for k, v in view.items() if v is not NodeState.RUNNING)
        why = "node(s) " + ", ".join(bad)
        db.add_event(rec.name, "degraded", why)
        return why
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
    elif NodeState.UNKNOWN in states and rec.status is ClusterStatus.UP:
        unknown = sorted(k for k, v in view.items() if v is NodeState.UNKNOWN)
        why = f"node(s) {', '.join(unknown)} not answering (unreachable, not confirmed lost)"
        db.add_event(rec.name, "degraded", why)
        return why
    return None


def _describe(view: dict[str, NodeState]) -> str:
    return ", ".join(f"{k} {v.value}" for k, v in sorted(view.items()) if v is not NodeState.RUNNING)


# ------------------------------------------------------------------ job queue


def _client(name: str, *, read_only: bool = False) -> tuple[AgentClient, ClusterRecord]:
    """The agent client of an UP cluster. `read_only` (queue, logs) also allows a
    PREEMPTED cluster, whose head may still answer (job history stays readable)."""
    from launcher.runtime.execution import agent_client

    with StateDB() as db:
        rec = db.require_cluster(name)
        if not (read_only and rec.status is ClusterStatus.PREEMPTED and _head_alive(db, rec)):
            require_up(rec)
        info = db.cluster_info(name)
    if not info.nodes:  # e.g. a DB row written by hand, or a launch killed mid-record
        raise ClusterNotReadyError(
            f"Cluster {name!r} is {rec.status.value} but has no nodes recorded, so there is "
            f"no head agent to ask: run `launcher status --refresh {name}`, or take it down "
            f"with `launcher down {name}`.")
    return agent_client(info), rec


def _head_alive(db: StateDB, rec: ClusterRecord) -> bool:
    """Does the cloud still report the cluster's head node (rank 0) RUNNING?"""
    head = [n for n in db.get_nodes(rec.name) if n.rank == 0]
    try:
        view = default_cloud(rec.cloud).query(rec.name)
    except (KeyError, LauncherError):
        return False
    return bool(head) and view.get(head[0].node_id) is NodeState.RUNNING


@contextmanager
def _read_only(rec: ClusterRecord) -> Iterator[None]:
    """Reading a PREEMPTED cluster's agent: if its head does not answer, say it is
    PREEMPTED (require_up's error) rather than why the connection failed."""
    try:
        yield
    except LauncherError:
        if rec.status is ClusterStatus.PREEMPTED:
            require_up(rec)
        raise


def queue(cluster_name: str) -> list[JobRecord]:
    """The cluster's jobs, oldest first (from its agent). Works on a PREEMPTED
    cluster too while its head node still answers."""
    client, rec = _client(cluster_name, read_only=True)
    with autodown_guard(cluster_name), _read_only(rec):
        return client.queue()


def logs(
    cluster_name: str,
    job_id: int | None = None,
    *,
    follow: bool = True,
    on_line: LineCallback | None = None,
    stop: threading.Event | None = None,
    poll_s: float = 0.3,
) -> JobRecord:
    """Stream a job's output (rank-prefixed lines) to `on_line`; `job_id` None = the
    latest job. With `follow`, blocks until the job ends. Returns its record.
    On a PREEMPTED cluster whose head still answers: what is there, never following.

    With `stop` (the API server, whose follower may vanish): followed by incremental
    reads every `poll_s` instead of one long stream, returning (the record now) within
    `poll_s` of `stop` being set, leaving no thread or command behind."""
    client, rec = _client(cluster_name, read_only=True)
    if rec.status is ClusterStatus.PREEMPTED:
        follow = False
    with autodown_guard(cluster_name), _read_only(rec):
        if job_id is None:
            jobs = client.queue()
            if not jobs:
                raise LauncherError(f"Cluster {cluster_name!r} has no jobs yet.")
            job_id = max(j.id for j in jobs)
        if stop is None or not follow:
            return client.follow_logs(job_id, on_line or (lambda _l: None), follow=follow)
        return _poll_logs(client, job_id, on_line or (lambda _l: None), stop, poll_s)


def _poll_logs(client: AgentClient, job_id: int, on_line: LineCallback, stop: threading.Event,
               poll_s: float) -> JobRecord:
    """Follow by `logs_since` until the job has ended (then one last read) or `stop`."""
    offsets: dict[int, int] = {}
    while True:
        rec = client.job(job_id)  # read before the output: an end seen here is all there
        offsets = client.logs_since(job_id, offsets, on_line)
        if rec.status.is_terminal or stop.wait(poll_s):
            return rec


def cancel(cluster_name: str, job_ids: Sequence[int] | None = None) -> CancelResult:
    """Cancel the given jobs (None = every pending or running job); returns once they
    have ended. Idempotent. Raises JobNotFoundError naming unknown ids."""
    client, _ = _client(cluster_name)
    with autodown_guard(cluster_name):
        return client.cancel(list(job_ids) if job_ids is not None else None)


def exit_code_of(record: JobRecord) -> int:
    return job_exit_code(record)


# ------------------------------------------------------------------ lifecycle


def stop(cluster_name: str, *, cloud_fn: CloudFn = default_cloud) -> None:
    """Stop the cluster's nodes (disks kept; billing of compute ends). Idempotent.
    Raises StopNotSupportedError on clouds that cannot stop."""
    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        require_can_stop(rec.cloud, cluster_name, "stop", cloud_fn)
        cloud = cloud_fn(rec.cloud)
        assert hasattr(cloud, "stop")
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


def require_can_stop(cloud_name: str, cluster_name: str, verb: str,
                     cloud_fn: CloudFn = default_cloud) -> None:
    """Raise StopNotSupportedError (with what to do instead) if `cloud_name` cannot stop."""
    try:
        cloud = cloud_fn(cloud_name)
    except KeyError:
        return
    if hasattr(cloud, "stop"):
        return
    if verb == "stop":
        raise StopNotSupportedError(
            f"The {cloud_name} cloud cannot stop clusters; use `launcher down {cluster_name}`.")
    raise StopNotSupportedError(
        f"The {cloud_name} cloud cannot stop clusters, so autostop can only take {cluster_name} "
        "down: add --down to -i (e.g. `-i 30 --down`).")


def start(cluster_name: str, *, cloud_fn: CloudFn = default_cloud) -> None:
    """Start a STOPPED cluster again and restart its agent (the job queue survives).
    A cluster that is UP is left as is."""
    from launcher.runtime.execution import install_agent
    from launcher.runtime.node_runner import runner_for

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
    from launcher.provisioning.teardown import down_cluster

    down_cluster(cluster_name, cloud_fn=cloud_fn, wait=LOCK_WAIT_S)


def autostop(
    cluster_name: str, idle_minutes: float | None, *, down: bool = False
) -> None:
    """Set (or with `idle_minutes=None`, cancel) autostop. The head-node agent enforces
    it: after `idle_minutes` with no pending or running job, the cluster is stopped
    (or taken down with `down=True`). Raises StopNotSupportedError for a stop (no
    `down`) on a cloud that cannot stop (ssh pools)."""
    if idle_minutes is not None and idle_minutes < 0:
        raise LauncherError("autostop: idle minutes must be >= 0.")
    client, rec = _client(cluster_name)
    if idle_minutes is not None and not down:
        require_can_stop(rec.cloud, cluster_name, "autostop")
    with autodown_guard(cluster_name):
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


def unknown_clusters(names: Sequence[str]) -> list[tuple[str, ClusterNotFoundError]]:
    """(name, the error `down`/`stop`/... would raise) for each of `names` the state DB
    does not know, in order: checked before asking to confirm anything about them."""
    out: list[tuple[str, ClusterNotFoundError]] = []
    with StateDB() as db:
        for name in names:
            try:
                db.require_cluster(name)
            except ClusterNotFoundError as exc:
                out.append((name, exc))
    return out


@dataclass(frozen=True)
class NodeView:
    """A cluster node as recorded when it was provisioned (no secrets, no host paths),
    with its state as its cloud last reported it and its last health finding
    (launcher/state/node_state.py). `state`: up, preempted, unreachable, stopped,
    terminated, pending, or the cluster's status (provisioning, ...) when nothing newer
    was reported (`state_source` "cluster status", `state_seen_at` None). `health`: ok,
    warn, fail, or None when never checked. `*_source`: who reported it (`status
    --refresh`, the health gate, ...)."""

    rank: int
    node_id: str
    internal_ip: str
    external_ip: str | None
    ssh_user: str | None
    ssh_port: int
    state: str = "up"
    state_detail: str = ""
    state_seen_at: float | None = None
    state_source: str = "cluster status"
    health: str | None = None
    health_detail: str | None = None
    health_seen_at: float | None = None
    health_source: str | None = None  # who checked: the health gate, `launcher health`


def cluster_nodes(cluster_name: str) -> list[NodeView]:
    """The cluster's nodes by rank, from the state DB: what was recorded at provisioning
    and what was last reported about each (no cloud call; `status --refresh` asks the
    cloud and records its answer). Raises ClusterNotFoundError."""
    from launcher.state import node_state

    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        reports = node_state.load(db, rec)
        out = []
        for n in db.get_nodes(cluster_name):
            got = reports.get(n.node_id, {})
            st = got.get("state") or node_state.of_cluster(rec)
            h = got.get("health")
            out.append(NodeView(
                n.rank, n.node_id, n.internal_ip, n.external_ip, n.ssh_user, n.ssh_port,
                state=st.value, state_detail=st.detail, state_seen_at=st.seen_at,
                state_source=st.source, health=h.value if h else None,
                health_detail=h.detail if h else None, health_seen_at=h.seen_at if h else None,
                health_source=h.source if h else None))
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
            rec = db.get_cluster(cluster_name)
            if rec is not None:
                from launcher.state import node_state

                node_state.record_view(db, rec, LocalCloud().query(cluster_name), time.time(),
                                       "local (local preempt)")
    return ranks
