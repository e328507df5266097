"""The one seam between the managed-jobs controller and the cluster runtime.

The controller never imports the cluster API, the agent client or a cloud: it
talks to a `ClusterOps` (its interface, values and typed errors are in
ops_interface.py). `RealClusterOps` (below) adapts the provisioning layer
(launcher.provisioning: failover, preparation, teardown - the same path `launch`
takes) and the runtime, imported lazily, only when a method runs; it never imports
launcher.api. Tests use an in-memory fake. Every method is blocking (the
controller calls them from worker threads) and must be safe to call from
several threads at once for *different* clusters.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from launcher.clouds.base import NodeState
from launcher.errors import LauncherError
from launcher.jobs.checkpoint_store import checkpoint_store_for
from launcher.jobs.ops_interface import (
    AttemptLaunch,
    HealthAlarm,
    JobRun,
    LaunchAbortedError,
    LaunchRequest,
    NoCapacityError,
    Notice,
    PermanentLaunchError,
    Placed,
    RateLimitedOpsError,
    RunState,
    SetupFailedError,
    TransientOpsError,
    UnhealthyNodeError,
)
from launcher.jobs.recovery import PlacementTier

if TYPE_CHECKING:
    from launcher.provisioning.failover import PlanFn
    from launcher.task.model import Task

log = logging.getLogger("launcher.jobs.cluster_ops")


# Clouds whose lost nodes RealClusterOps.replace_nodes replaces in place.
_REPLACES_IN_PLACE = ("local", "ssh")


# --------------------------------------------------------------------------------------
# The real adapter: the cluster runtime of issue 3 (state DB, provisioning with failover,
# runtime bring-up, head-node agent). Everything below imports lazily.


def checkpoint_dir_for(cloud: str, region: str | None, job_id: int, task: Task | None
                       ) -> str | None:
    """LAUNCHER_CHECKPOINT_DIR of managed job `job_id` on `cloud`.

    local: $LAUNCHER_HOME/checkpoints/<job-id> (this machine: survives every cluster).
    ssh: the pool's `checkpoint_dir`/<job-id> when the pool declares one.
    other clouds: the task's `checkpoint.path` on the nodes (a bucket mounted
    there is the clouds issue's job); None when the task declares none.
    """
    from launcher.jobs import paths

    if cloud == "local":
        return str(paths.local_checkpoint_dir(job_id))
    if cloud == "ssh":
        try:
            from launcher.config.settings import load_config

            pool = load_config().ssh_node_pools.get(region or "")
            base = pool.checkpoint_dir if pool is not None else None
            if base:
                return f"{str(base).rstrip('/')}/{job_id}"
        except Exception:  # a broken config is reported by the launch itself
            pass
    if task is not None and task.checkpoint is not None:
        return task.checkpoint.path
    return None


def _require_stores(task: Task) -> None:
    """Before anything is provisioned: the task's checkpoint store has credentials here
    (PermanentLaunchError otherwise: they were there at submission, someone removed
    them) and its bucket exists (created when missing; a failure is transient)."""
    from launcher.jobs.checkpoint_store import require_store_access, stores_to_check
    from launcher.runtime.storage_nodes import StoreCredentialsError, ensure_store_bucket

    try:
        require_store_access(task, probe=False)
    except StoreCredentialsError as exc:
        raise PermanentLaunchError(str(exc)) from None
    for store, _ in stores_to_check(task):
        ensure_store_bucket(store)


class RealClusterOps:
    """`ClusterOps` over launcher.provisioning / launcher.state / the head-node agent.

    Thread-safe: every call opens its own StateDB connection; agent clients (and
    so SSH connections) are cached per cluster behind a lock.
    """

    def __init__(self) -> None:
        import threading

        from launcher.jobs.node_credentials import NodeCredentials

        self._lock = threading.Lock()
        self._clients: dict[str, object] = {}
        self._clouds: dict[str, str] = {}
        self._nodes: dict[str, tuple[str, ...]] = {}
        self._credentials = NodeCredentials()  # short-lived store credentials, renewed

    # -- helpers

    def _client(self, cluster_name: str) -> object:
        """A cached AgentClient for the cluster (raises TransientOpsError if unknown)."""
        with self._lock:
            client = self._clients.get(cluster_name)
        if client is not None:
            return client
        from launcher.runtime.execution import agent_client
        from launcher.state.db import StateDB

        with StateDB() as db:
            if db.get_cluster(cluster_name) is None:
                raise TransientOpsError(f"cluster {cluster_name} is not in the state DB")
            info = db.cluster_info(cluster_name)
        client = agent_client(info)
        with self._lock:
            self._clients[cluster_name] = client
            self._clouds[cluster_name] = info.cloud
            self._nodes[cluster_name] = tuple(n.node_id for n in info.nodes)
        return client

    def _forget(self, cluster_name: str) -> None:
        self._credentials.forget(cluster_name)
        with self._lock:
            client = self._clients.pop(cluster_name, None)
            self._clouds.pop(cluster_name, None)
            self._nodes.pop(cluster_name, None)
        close = getattr(getattr(client, "head", None), "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    def _cloud_name(self, cluster_name: str) -> str | None:
        with self._lock:
            name = self._clouds.get(cluster_name)
        if name is not None:
            return name
        from launcher.state.db import StateDB

        with StateDB() as db:
            rec = db.get_cluster(cluster_name)
        if rec is None:
            return None
        with self._lock:
            self._clouds[cluster_name] = rec.cloud
        return rec.cloud

    # -- ClusterOps

    def provision_and_start(self, req: LaunchRequest) -> AttemptLaunch:
        from launcher.clouds.base import ProvisionFailedError
        from launcher.errors import NoPlacementError
        from launcher.provisioning.failover import Provisioned, provision_with_failover
        from launcher.provisioning.health_gate import HealthGateError
        from launcher.provisioning.prepare import job_spec_for, prepare_cluster
        from launcher.runtime import execution
        from launcher.state.db import StateDB, acquire_cluster_lock

        task = req.task
        if req.market is not None:
            task = task.with_overrides(resources={"use_spot": req.market == "spot"},
                                       source="deadline policy")
        emit = req.on_output or (lambda _m: None)
        owner = f"managed-job:{req.job_id}"
        _require_stores(task)
        with StateDB() as db:
            lock = acquire_cluster_lock(req.cluster_name, wait=30.0, purpose=owner)
            try:
                prov: Provisioned | None = None
                failures: list[str] = []
                for tier in req.tiers:
                    try:
                        prov = provision_with_failover(
                            task, req.cluster_name, db, blocked=tier.blocked,
                            only_region=tier.only_region, on_event=emit, owner=owner,
                            plan_fn=_plan_fn(tier),
                        )
                        break
                    except ProvisionFailedError as exc:
                        if exc.attempts and exc.attempts[-1].error_type == "InvalidRequestError":
                            raise PermanentLaunchError(str(exc)) from None
                        _raise_if_throttled(exc)
                        failures.append(f"{tier.label or 'placement'}: {exc}")
                    except NoPlacementError as exc:
                        failures.append(f"{tier.label or 'placement'}: {exc}")
                    db.delete_cluster(req.cluster_name, reason="managed job: no placement")
                if prov is None:
                    raise NoCapacityError(
                        "No placement could be provisioned for the managed job. "
                        + " | ".join(failures)
                    )
                cluster = prov.cluster
                if req.on_provisioned is not None:
                    req.on_provisioned(Placed(
                        cluster.cloud, cluster.region, cluster.zone, cluster.instance_type,
                        len(cluster.nodes), cluster.use_spot, prov.placement.node_price))
                store, interval = checkpoint_store_for(cluster.cloud, task, req.task_id, emit)
                try:
                    client = prepare_cluster(db, cluster, task, on_event=emit, on_setup_line=emit,
                                             checkpoint_store=store, task_id=req.task_id)
                except execution.SetupFailedError as exc:
                    raise SetupFailedError(str(exc), rank=getattr(exc, "rank", None)) from None
                except HealthGateError as exc:
                    raise UnhealthyNodeError(str(exc), exc.rank, exc.finding) from None
                except execution.FileMountError as exc:  # e.g. a MOUNT-mode bucket: never runs
                    raise PermanentLaunchError(str(exc)) from None
                rec = db.require_cluster(req.cluster_name)
                ckpt = checkpoint_dir_for(cluster.cloud, cluster.region, req.job_id, task)
                if ckpt and cluster.cloud == "local":
                    import os

                    os.makedirs(ckpt, exist_ok=True)
                if req.before_run is not None and not req.before_run():
                    raise LaunchAbortedError("the managed job was cancelled during its launch")
                spec = job_spec_for(task, cluster, rec, task_id=req.task_id, checkpoint_dir=ckpt,
                                    extra_envs=dict(req.env_extra), checkpoint_store=store,
                                    checkpoint_save_seconds=interval)
                job_id = int(client.submit(spec))
                self._credentials.track(req.cluster_name, store)
                db.add_event(req.cluster_name, "job-submitted", f"managed job {req.job_id}")
            finally:
                lock.release()
        with self._lock:
            self._clients[req.cluster_name] = client
            self._clouds[req.cluster_name] = cluster.cloud
            self._nodes[req.cluster_name] = tuple(n.node_id for n in cluster.nodes)
        p = prov.placement
        return AttemptLaunch(
            cluster_name=req.cluster_name, cloud=cluster.cloud, region=cluster.region,
            zone=cluster.zone, instance_type=cluster.instance_type, num_nodes=len(cluster.nodes),
            use_spot=cluster.use_spot, node_price=p.node_price, cluster_job_id=job_id,
            node_ids=tuple(n.node_id for n in cluster.nodes), checkpoint_dir=ckpt,
        )

    def adopt(self, cluster_name: str) -> AttemptLaunch | None:
        from launcher.provisioning.cloud_access import default_cloud
        from launcher.state.db import ClusterStatus, StateDB

        with StateDB() as db:
            rec = db.get_cluster(cluster_name)
            if rec is None or rec.status is not ClusterStatus.UP:
                return None
            info = db.cluster_info(cluster_name)
        try:
            view = default_cloud(rec.cloud).query(cluster_name)
            if not view or set(view.values()) != {NodeState.RUNNING}:
                return None
            jobs = self._client(cluster_name).queue()  # type: ignore[attr-defined]
        except Exception:
            return None
        if not jobs:
            return None
        job = max(jobs, key=lambda j: j.id)
        job_id = int(owner_job_id(rec.owner) or 0)
        self._credentials.track(cluster_name, _store_of_job(rec.cloud, job_id),
                                shipped_now=False)  # what its nodes hold is unknown here
        return AttemptLaunch(
            cluster_name=cluster_name, cloud=rec.cloud, region=rec.region, zone=rec.zone,
            instance_type=rec.instance_type, num_nodes=rec.num_nodes, use_spot=rec.use_spot,
            node_price=rec.hourly_cost / max(1, rec.num_nodes), cluster_job_id=int(job.id),
            node_ids=tuple(n.node_id for n in info.nodes),
            checkpoint_dir=checkpoint_dir_for(rec.cloud, rec.region, job_id, None),
        )

    def job_status(self, cluster_name: str, cluster_job_id: int) -> JobRun:
        self._credentials.poll(cluster_name)  # renews the nodes' store token when due
        client = self._client(cluster_name)
        try:
            rec = client.job(cluster_job_id)  # type: ignore[attr-defined]
        except LauncherError as exc:
            # Unreachable head, or an agent call killed with its node: only the cloud's
            # view can say whether that was a preemption.
            raise TransientOpsError(f"{cluster_name}: {exc}") from None
        notice = None
        if rec.notice is not None:
            nodes = self._nodes.get(cluster_name, ())
            rank = int(rec.notice.rank)
            node_id = nodes[rank] if rank < len(nodes) else f"{cluster_name}-{rank}"
            notice = Notice(node_id, float(rec.notice.received_at),
                            float(rec.notice.grace_seconds))
        alarm = None
        h = rec.health
        if h is not None and h.stop and h.rank is not None and h.severity == "fail":
            nodes = self._nodes.get(cluster_name, ())
            node_id = nodes[h.rank] if h.rank < len(nodes) else f"{cluster_name}-{h.rank}"
            alarm = HealthAlarm(node_id, h.rank, h.summary, h.detected_at, h.evidence)
        return JobRun(
            status=RunState(rec.status.value), exit_code=rec.exit_code,
            failed_rank=rec.failed_rank, reason=rec.reason, notice=notice,
            ended_at=rec.ended_at, health=alarm,
        )

    def cloud_view(self, cluster_name: str) -> Mapping[str, NodeState]:
        from launcher.provisioning.cloud_access import default_cloud

        cloud = self._cloud_name(cluster_name)
        if cloud is None:
            return {}
        try:
            return default_cloud(cloud).query(cluster_name)
        except Exception as exc:
            raise TransientOpsError(f"{cloud} query of {cluster_name} failed: {exc}") from None

    def cloud_views(self, cloud: str | None, region: str | None,
                    cluster_names: Sequence[str]) -> dict[str, Mapping[str, NodeState]]:
        from launcher.clouds.base import query_many
        from launcher.provisioning.cloud_access import default_cloud

        if cloud is None:
            return {n: self.cloud_view(n) for n in cluster_names}
        try:
            return dict(query_many(default_cloud(cloud), cluster_names, region))
        except Exception as exc:
            where = f"{cloud}/{region}" if region else cloud
            raise TransientOpsError(f"{where} query of {len(cluster_names)} cluster(s) "
                                    f"failed: {exc}") from None

    def final_loss(self, cluster_name: str) -> str | None:
        """The cloud's `final_loss(cluster)` where it has one (Slurm), else None."""
        from launcher.provisioning.cloud_access import default_cloud

        cloud = self._cloud_name(cluster_name)
        if cloud is None:
            return None
        try:
            fn = getattr(default_cloud(cloud), "final_loss", None)
            why = fn(cluster_name) if fn is not None else None
        except Exception as exc:
            log.info("%s: final_loss of %s unreadable: %r", cloud, cluster_name, exc)
            return None
        return why if isinstance(why, str) else None

    def notices(self, cluster_name: str) -> list[Notice]:
        """Local cloud: the notice files the local cloud drops for the agent (read
        directly: same machine). Elsewhere notices come with the agent's job record."""
        if self._cloud_name(cluster_name) != "local":
            return []
        import json

        from launcher.clouds.local import AGENT_DIR, LocalCloud

        out: list[Notice] = []
        agent_dir = LocalCloud().node_dir(cluster_name, 0) / AGENT_DIR
        try:
            names = [p for p in agent_dir.iterdir() if p.name.startswith("notice-rank-")
                     and p.name.endswith(".json")]
        except OSError:
            return []
        for p in names:
            try:
                d = json.loads(p.read_text())
                grace = float(d.get("grace_seconds", d.get("notice_seconds", 0.0)))
                received = float(d.get("deadline", 0.0)) - grace
                rank = int(d.get("rank", 0))
            except (OSError, ValueError, TypeError):
                continue
            out.append(Notice(f"{cluster_name}-{rank}", received, grace))
        return out

    def records_survive_loss(self, cluster_name: str) -> bool:
        """Only the local cloud's node directories outlive its nodes."""
        try:
            return self._cloud_name(cluster_name) == "local"
        except Exception:
            return False

    def lost_since(self, cluster_name: str) -> float | None:
        """Local cloud: when the first of its PREEMPTED nodes was marked (the cloud writes
        the time into the node's marker before it kills the node's processes, so anything
        the kill caused comes later); else when `machines.json` last changed. Other
        clouds: None for now."""
        if self._cloud_name(cluster_name) != "local":
            return None
        from launcher.clouds.local import MACHINES_FILE, LocalCloud
        from launcher.runtime.local_runner import PREEMPTED_MARKER

        cloud = LocalCloud()
        try:
            view = cloud.query(cluster_name)
            if NodeState.PREEMPTED not in set(view.values()):
                return None
            marks = []
            for rank in range(len(view)):
                marker = cloud.node_dir(cluster_name, rank) / PREEMPTED_MARKER
                with contextlib.suppress(OSError, ValueError):
                    text = marker.read_text().strip()  # the time the cloud marked it
                    marks.append(float(text) if text else marker.stat().st_mtime)
            if marks:
                return min(marks)
            return (cloud.node_dir(cluster_name, 0).parent / MACHINES_FILE).stat().st_mtime
        except Exception:
            return None

    def fetch_logs(self, cluster_name: str, cluster_job_id: int,
                   on_line: Callable[[str], None], follow: bool = False) -> None:
        client = self._client(cluster_name)
        try:
            client.follow_logs(cluster_job_id, on_line, follow=follow,  # type: ignore[attr-defined]
                               complete=True)
        except LauncherError as exc:
            raise TransientOpsError(f"{cluster_name}: {exc}") from None

    def fetch_log_since(self, cluster_name: str, cluster_job_id: int,
                        offsets: Mapping[int, int],
                        on_line: Callable[[str], None]) -> dict[int, int]:
        client = self._client(cluster_name)
        try:
            return dict(client.logs_since(cluster_job_id, offsets,  # type: ignore[attr-defined]
                                          on_line))
        except LauncherError as exc:
            raise TransientOpsError(f"{cluster_name}: {exc}") from None

    def cancel_job(self, cluster_name: str, cluster_job_id: int) -> None:
        try:
            self._client(cluster_name).cancel([cluster_job_id])  # type: ignore[attr-defined]
        except Exception as exc:
            raise TransientOpsError(f"{cluster_name}: cancel failed: {exc}") from None

    def teardown(self, cluster_name: str) -> None:
        from launcher.errors import ClusterNotFoundError
        from launcher.provisioning.teardown import down_cluster

        cloud = self._cloud_name(cluster_name)
        self._forget(cluster_name)
        with contextlib.suppress(ClusterNotFoundError):
            down_cluster(cluster_name)
        if cloud in (None, "local"):
            # A launch killed before its state row was written can only have touched
            # the local cloud's directory (the row precedes every cloud call).
            from launcher.clouds.local import LocalCloud

            LocalCloud().terminate(cluster_name)

    def abort_launch(self, cluster_name: str) -> None:
        from launcher.provisioning.cloud_access import default_cloud

        cloud = self._cloud_name(cluster_name)
        with contextlib.suppress(KeyError):
            default_cloud(cloud or "local").terminate(cluster_name)

    def exclude_nodes(self, cluster_name: str, node_ids: tuple[str, ...], reason: str) -> str:
        try:
            cloud = self._cloud_name(cluster_name)
            if cloud == "ssh":
                from launcher.clouds.ssh import SSHCloud

                hosts = SSHCloud().exclude_hosts(cluster_name, node_ids, reason)
                return (f"host(s) {', '.join(hosts)} quarantined in the pool until `launcher "
                        "ssh release`" if hosts else "no pool host to quarantine")
            if cloud == "local":
                from launcher.clouds.local import LocalCloud

                ranks = [i for i, n in enumerate(self._nodes.get(cluster_name, ()))
                         if n in node_ids]
                for rank in ranks:
                    LocalCloud().preempt(cluster_name, rank)
                return f"local node(s) {', '.join(map(str, ranks))} reclaimed"
        except Exception as exc:  # best effort: the relaunch still gets fresh nodes
            return f"could not exclude them: {exc}"
        return "their instance(s) go with the cluster and are never reused"

    def can_replace_nodes(self, cluster_name: str) -> bool:
        """The local cloud and SSH pools replace nodes in place (see `replace_nodes`)."""
        try:
            return self._cloud_name(cluster_name) in _REPLACES_IN_PLACE
        except Exception:
            return False

    def replace_nodes(self, cluster_name: str, lost_node_ids: tuple[str, ...],
                      req: LaunchRequest) -> AttemptLaunch | None:
        """Local cloud: re-provisioning the same cluster replaces exactly its PREEMPTED
        nodes (fresh, empty) and keeps the others. SSH pools: the lost hosts are
        swapped for spare hosts of the same pool (and quarantined); the survivors keep
        their addresses and ranks (`SSHCloud.replace_nodes`); no spare host -> None.
        Then the runtime is brought up again (agent, sync, setup) and the gang job
        resubmitted (after `req.before_run`; False = LaunchAbortedError). Other clouds:
        None until their provisioners can replace single nodes in place."""
        cloud = self._cloud_name(cluster_name)
        if cloud not in _REPLACES_IN_PLACE:
            return None
        from launcher.clouds.base import CapacityError, ProvisionRequest
        from launcher.clouds.local import LocalCloud
        from launcher.provisioning.health_gate import HealthGateError
        from launcher.provisioning.prepare import job_spec_for, prepare_cluster
        from launcher.runtime import execution
        from launcher.state.db import StateDB, acquire_cluster_lock

        self._forget(cluster_name)
        with StateDB() as db:
            lock = acquire_cluster_lock(cluster_name, wait=30.0, purpose="replace nodes")
            try:
                rec = db.require_cluster(cluster_name)
                if cloud == "ssh":
                    from launcher.clouds.ssh import SSHCloud

                    try:
                        info = SSHCloud().replace_nodes(cluster_name, lost_node_ids)
                    except CapacityError as exc:
                        emit = req.on_output or (lambda _m: None)
                        emit(f"no spare host to replace {', '.join(lost_node_ids)}: {exc}")
                        return None
                else:
                    info = LocalCloud().provision(ProvisionRequest(
                        cluster_name=cluster_name, cloud=rec.cloud, region=rec.region,
                        zone=rec.zone, instance_type=rec.instance_type, num_nodes=rec.num_nodes,
                        use_spot=rec.use_spot, accelerator=rec.accelerator,
                        accelerator_count=rec.accelerator_count,
                    ))
                db.set_nodes(cluster_name, info.nodes)
                store, interval = checkpoint_store_for(info.cloud, req.task, req.task_id,
                                                       req.on_output)
                try:
                    client = prepare_cluster(db, info, req.task, on_event=req.on_output or
                                             (lambda _m: None), on_setup_line=req.on_output,
                                             checkpoint_store=store, task_id=req.task_id)
                except execution.SetupFailedError as exc:
                    raise SetupFailedError(str(exc), rank=getattr(exc, "rank", None)) from None
                except HealthGateError as exc:
                    raise UnhealthyNodeError(str(exc), exc.rank, exc.finding) from None
                except execution.FileMountError as exc:  # e.g. a MOUNT-mode bucket: never runs
                    raise PermanentLaunchError(str(exc)) from None
                rec = db.require_cluster(cluster_name)
                ckpt = checkpoint_dir_for(info.cloud, info.region, req.job_id, req.task)
                if req.before_run is not None and not req.before_run():
                    raise LaunchAbortedError(
                        "the managed job was cancelled during its node replacement")
                spec = job_spec_for(req.task, info, rec, task_id=req.task_id, checkpoint_dir=ckpt,
                                    extra_envs=dict(req.env_extra), checkpoint_store=store,
                                    checkpoint_save_seconds=interval)
                job_id = int(client.submit(spec))
                self._credentials.track(cluster_name, store)
            finally:
                lock.release()
        with self._lock:
            self._clients[cluster_name] = client
            self._clouds[cluster_name] = info.cloud
            self._nodes[cluster_name] = tuple(n.node_id for n in info.nodes)
        return AttemptLaunch(
            cluster_name=cluster_name, cloud=info.cloud, region=info.region, zone=info.zone,
            instance_type=info.instance_type, num_nodes=len(info.nodes), use_spot=info.use_spot,
            node_price=rec.hourly_cost / max(1, rec.num_nodes), cluster_job_id=job_id,
            node_ids=tuple(n.node_id for n in info.nodes), checkpoint_dir=ckpt,
        )


def _raise_if_throttled(exc: Exception) -> None:
    """RateLimitedOpsError when every placement the failover tried was refused for too
    many requests (the cloud throttles its API, capacity is unknown): the controller then
    backs off launches on that cloud instead of counting a capacity miss."""
    attempts = getattr(exc, "attempts", None) or []
    if attempts and all(a.error_type == "RateLimitedError" for a in attempts):
        raise RateLimitedOpsError(str(exc), attempts[-1].cloud) from None


def _plan_fn(tier: PlacementTier) -> PlanFn:
    """The failover loop's planner for `tier`: with the tier's observed interruption
    rates (recent preemptions), so spot placements rank by expected cost given them."""
    from launcher.provisioning.failover import default_plan
    from launcher.provisioning.planning import plan

    if not tier.observed:
        return default_plan
    observed = tier.observed_rates()
    return lambda task, blocked: plan(task, blocked=blocked, observed=observed)


def _store_of_job(cloud: str, job_id: int) -> str | None:
    """The checkpoint store prefix the nodes of managed job `job_id` on `cloud` sync with
    (from the submitted task), or None (none, or the job cannot be read)."""
    import json

    from launcher.jobs.store import JobStore
    from launcher.task.model import Task

    try:
        store = JobStore()
        try:
            job = store.job(job_id)
        finally:
            store.close()
        task = Task.from_dict(json.loads(job.task_yaml), source=f"managed job {job_id}")
        return checkpoint_store_for(cloud, task, job.task_id)[0]
    except Exception:  # an unreadable job: its credentials are renewed at its next launch
        return None


def owner_job_id(owner: str | None) -> int | None:
    """The managed job id of a cluster owned by the controller ("managed-job:<id>")."""
    if owner and owner.startswith("managed-job:"):
        try:
            return int(owner.split(":", 1)[1])
        except ValueError:
            return None
    return None
