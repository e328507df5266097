"""`NebiusCloud`: the `nebius` cloud on the Nebius AI Cloud API (Cloud, SupportsOrphans,
SupportsResourceScan).

provision (blocking, all or nothing): the region's project (`nebius.projects[<region>]`
when that map is set: a region without one is a QuotaError, blocking the region; else
`project_id` / NEBIUS_PROJECT_ID / the CLI profile's) -> record the cluster (records.py:
project, region) -> for a multi-node InfiniBand placement a GPU cluster on the region's fabric
(`nebius.fabrics[<region>]`; none configured: InvalidRequestError naming the key) -> the
subnet (`nebius.subnet_id`, else the project's first) -> per rank boot disk + instance
(provision.py) -> the node waiter (default: the SSH waiter shared with AWS: SSH up, host
keys pinned, cluster key installed). Any failure (or Ctrl-C) deletes everything labelled
with the cluster (teardown.py), waits, and raises the typed error.

query: the instances labelled with the cluster -> NodeState. Nebius stops a preemptible
instance when it is preempted (`on_preemption: STOP`); launcher never stops a spot
cluster, so a STOPPED/STOPPING preemptible instance is PREEMPTED (an on-demand one
STOPPED); a recorded instance that is gone or DELETING is TERMINATED.
terminate (idempotent, blocking): delete by label in the recorded project (no record:
the configured project), wait, drop the record. list_tagged_resources: instances, boot
disks and GPU clusters labelled `launcher-cluster`, by cluster (list_tagged_clusters:
the instances, or the leftovers where none is left).

Tests inject `session` (settings pointing at a local fake) and `node_waiter`; the
product uses the real ones. Constructing it imports no SDK.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any

from launcher.clouds.base import (
    INSTANCE,
    AuthError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
    QuotaError,
    TaggedResource,
)
from launcher.clouds.nebius import records, shapes
from launcher.config.nebius import NebiusSettings

_KIND_NAMES = {"instances": INSTANCE, "disks": "disk", "gpu_clusters": "GPU cluster"}

CLOUD = "nebius"
NodeWaiter = Any  # Callable[[ClusterInfo, float], ClusterInfo] (aws/nodes.py)
CHECK_TTL_S = 60.0


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds: each create operation, the SSH wait, each deletion; operation polling."""

    create: float = 1800.0
    ssh: float = 900.0
    teardown: float = 1800.0
    poll: float = 2.0


def _settings() -> NebiusSettings:
    from launcher.config.settings import load_config

    return load_config().nebius


class NebiusCloud:
    """See the module docstring."""

    name = CLOUD

    def __init__(self, *, session: Any = None, node_waiter: NodeWaiter = None,
                 settings: NebiusSettings | None = None,
                 timeouts: Timeouts = Timeouts()) -> None:
        self._session = session
        self._node_waiter = node_waiter
        self._settings = settings
        self._timeouts = timeouts
        self._checked: tuple[float, CredentialStatus] | None = None
        self._cached: tuple[str, Any] | None = None
        self._lock = threading.Lock()

    # ---- plumbing ----

    def settings(self) -> NebiusSettings:
        if self._session is not None:
            return self._session.settings
        return self._settings or _settings()

    def session(self, settings: NebiusSettings | None = None) -> Any:
        """The injected session, else one per distinct settings (reused)."""
        if self._session is not None:
            return self._session
        from launcher.clouds.nebius.session import Session

        settings = settings or self.settings()
        with self._lock:
            if self._cached is None or self._cached[0] != repr(settings):
                if self._cached is not None:
                    self._cached[1].close()
                self._cached = (repr(settings), Session(settings))
            return self._cached[1]

    def _project(self, session: Any) -> str:
        project = session.project()
        if not project:
            raise AuthError("no Nebius project: set nebius.project_id or NEBIUS_PROJECT_ID",
                            cloud=CLOUD)
        return str(project)

    def _waiter(self) -> NodeWaiter:
        if self._node_waiter is None:
            from launcher.clouds.aws.nodes import wait_for_ssh

            return wait_for_ssh
        return self._node_waiter

    # ---- Cloud ----

    def check(self) -> CredentialStatus:
        """Identity source and project, or why not; no SDK import and no network when no
        credentials are configured. A positive answer is reused for CHECK_TTL_S."""
        from launcher.clouds.nebius.session import check_credentials, local_credentials_source

        settings = self.settings()
        if local_credentials_source(settings) is None:
            return check_credentials(None, settings)
        now = time.monotonic()
        if self._checked is not None and now - self._checked[0] < CHECK_TTL_S:
            return self._checked[1]
        status = check_credentials(self.session(settings), settings)
        if status.enabled:
            self._checked = (now, status)
        return status

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create the gang (see the module docstring). Raises CapacityError, QuotaError,
        AuthError, InvalidRequestError or CloudError; nothing is left on failure."""
        from launcher.clouds.nebius.provision import (
            GangPlan,
            create_gang,
            create_gpu_cluster,
            default_subnet,
        )
        from launcher.runtime.keys import ensure_user_key
        from launcher.task.config_section import apply_overrides

        if req.num_nodes < 1:
            raise InvalidRequestError("num_nodes must be >= 1.", cloud=CLOUD, region=req.region)
        settings = apply_overrides(self.settings(), req.settings.get("nebius") or {})
        platform, preset = shapes.platform_preset(req.instance_type)
        ib_gang = req.fabric == "infiniband" and req.num_nodes > 1
        fabric = settings.fabrics.get(req.region)
        if ib_gang and not fabric:
            raise InvalidRequestError(
                f"no InfiniBand fabric known for Nebius region {req.region}: set "
                f"nebius.fabrics.{req.region} (the fabric your project may use, e.g. from "
                "the console's GPU cluster page) in config.yaml", cloud=CLOUD,
                region=req.region)
        session = self.session(settings)
        if settings.projects and req.region not in settings.projects:
            raise QuotaError(f"no Nebius project configured for region {req.region} "
                             f"(nebius.projects has {', '.join(sorted(settings.projects))})",
                             cloud=CLOUD, region=req.region)
        project = settings.project_for(req.region) or self._project(session)
        user_key = ensure_user_key()
        public_key = req.ssh_public_key or user_key.public_key()
        gpu = shapes.is_gpu_platform(platform)
        cluster, t = req.cluster_name, self._timeouts
        records.write(cluster, {"project": project, "region": req.region,
                                "spot": req.use_spot, "instance_type": req.instance_type,
                                "num_nodes": req.num_nodes})  # before anything exists
        try:
            plan = GangPlan(
                cluster=cluster, project=project, region=req.region, platform=platform,
                preset=preset, num_nodes=req.num_nodes, preemptible=req.use_spot,
                image_family=req.image_id or (settings.image_family if gpu
                                              else settings.cpu_image_family),
                disk_size_gb=int(req.disk_size_gb or settings.disk_size_gb),
                subnet_id=default_subnet(session, project, req.region),
                public_ip=not settings.use_internal_ips,
                user_data=shapes.user_data(settings.ssh_user, public_key))
            if ib_gang and fabric:
                plan = dataclasses.replace(plan, gpu_cluster_id=create_gpu_cluster(
                    session, plan, fabric, t.create, t.poll))
            created = create_gang(session, plan, t.create, t.poll)
            records.update(cluster, instance_ids=[c.instance_id for c in created])
            nodes = tuple(NodeInfo(rank=c.rank, node_id=c.instance_id,
                                   internal_ip=c.private_ip,
                                   external_ip=None if settings.use_internal_ips
                                   else c.public_ip, ssh_user=settings.ssh_user)
                          for c in created)
            info = ClusterInfo(cluster_name=cluster, cloud=CLOUD, region=req.region,
                               zone=None, instance_type=req.instance_type,
                               use_spot=req.use_spot, nodes=nodes,
                               ssh_key_path=user_key.private_path)
            return self._waiter()(info, time.monotonic() + t.ssh)
        except BaseException:
            with contextlib.suppress(Exception):
                self._delete(session, project, cluster)
                records.drop(cluster)
            raise

    def _delete(self, session: Any, project: str, cluster: str) -> None:
        from launcher.clouds.nebius.teardown import delete_cluster

        delete_cluster(session, project, cluster, self._timeouts.teardown,
                       self._timeouts.poll)

    def query(self, cluster: str) -> dict[str, NodeState]:
        """Instance id -> Nebius's view (see the module docstring). Raises CloudError."""
        from launcher.clouds.nebius.teardown import list_labeled

        record = records.read(cluster) or {}
        session = self.session()
        project = str(record.get("project") or self._project(session))
        spot = bool(record.get("spot"))
        out: dict[str, NodeState] = {}
        for inst in list_labeled(session, project, "instances", cluster):
            out[str(inst.metadata.id)] = node_state(inst, spot)
        for iid in record.get("instance_ids") or []:
            out.setdefault(str(iid), NodeState.TERMINATED)
        return out

    def terminate(self, cluster: str) -> None:
        """Delete every resource labelled with `cluster` and wait; idempotent. Raises
        CloudError (the record is kept then, so a retry finds the same project)."""
        record = records.read(cluster)
        session = self.session()
        project = str((record or {}).get("project") or self._project(session))
        self._delete(session, project, cluster)
        records.drop(cluster)

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster label -> ids of its instances (none left: its disks / GPU cluster, so
        leftovers show too), over the configured and every recorded project."""
        out: dict[str, list[str]] = {}
        for name, res in self.list_tagged_resources().items():
            instances = [r.id for r in res if r.kind == INSTANCE]
            out[name] = sorted(set(instances or [r.id for r in res]))
        return out

    def list_tagged_resources(self) -> dict[str, list[TaggedResource]]:
        """cluster label -> its labelled instances, boot disks and GPU clusters, over the
        configured and every recorded project (SupportsResourceScan)."""
        from launcher.clouds.nebius.teardown import KINDS, list_labeled

        session = self.session()
        projects = {str(r["project"]) for r in records.recorded().values() if r.get("project")}
        projects.update(session.settings.projects.values())
        if session.project():
            projects.add(str(session.project()))
        out: dict[str, set[TaggedResource]] = {}
        for project in sorted(projects):
            for kind in KINDS:
                for item in list_labeled(session, project, kind, None):
                    name = str(dict(item.metadata.labels)[shapes.CLUSTER_LABEL])
                    out.setdefault(name, set()).add(
                        TaggedResource(_KIND_NAMES[kind], str(item.metadata.id)))
        return {k: sorted(v, key=lambda r: (r.kind, r.id)) for k, v in out.items()}


def node_state(inst: Any, spot: bool) -> NodeState:
    """NodeState of an Instance message (see the module docstring)."""
    state = getattr(getattr(inst.status, "state", None), "name", "UNSPECIFIED")
    preemptible = spot or bool(inst.spec.check_presence("preemptible"))
    if state == "RUNNING":
        return NodeState.RUNNING
    if state in ("CREATING", "STARTING", "UPDATING", "UNSPECIFIED"):
        return NodeState.PENDING
    if state in ("STOPPED", "STOPPING"):
        return NodeState.PREEMPTED if preemptible else NodeState.STOPPED
    if state == "DELETING":
        return NodeState.TERMINATED
    return NodeState.UNKNOWN
