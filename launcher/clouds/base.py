"""The interface every cloud implements, and the typed errors that drive failover.

Failover rules (the launch loop in the API applies them):
- `CapacityError`      -> block the zone, try the next placement
- `QuotaError`         -> block the region
- `AuthError`          -> block the cloud
- `InvalidRequestError`-> stop and tell the user (retrying elsewhere won't help)
The provisioning loop raises `ProvisionFailedError` carrying every attempt.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from launcher.clouds.status import CredentialStatus
from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.task.volumes import VolumeMount

__all__ = ["CredentialStatus"]  # re-exported: defined in launcher.clouds.status


class CloudError(LauncherError):
    """A typed provisioning failure. `cloud`, `region`, `zone` say where it happened."""

    def __init__(
        self,
        message: str,
        *,
        cloud: str = "",
        region: str | None = None,
        zone: str | None = None,
    ) -> None:
        super().__init__(message)
        self.cloud = cloud
        self.region = region
        self.zone = zone


class CapacityError(CloudError):
    """No capacity for the request in this zone (or region) right now."""


class QuotaError(CloudError):
    """The account's quota in this region does not allow the request."""


class AuthError(CloudError):
    """Credentials missing, expired or not allowed to do this."""


class CloudQuotaError(QuotaError, AuthError):
    """A quota that spans every region of the cloud (GCP's `GPUS_ALL_REGIONS`): another
    region cannot help, so failover blocks the whole cloud (it is an AuthError for the
    blocking rules, and a QuotaError for anyone asking what it is)."""


class RateLimitedError(CloudError):
    """The cloud's API refused the call for too many requests (after the SDK's own
    retries). Nothing about capacity or the request: wait and ask again. `retry_after_s`
    is the cloud's hint when it gives one. The managed-jobs controller backs off launches
    on that cloud (docs/managed-jobs.md)."""

    def __init__(self, message: str, *, cloud: str = "", region: str | None = None,
                 zone: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, cloud=cloud, region=region, zone=zone)
        self.retry_after_s = retry_after_s


class InvalidRequestError(CloudError):
    """The request itself is wrong (bad image, bad instance type): do not fail over."""

    exit_code = 2


@dataclass(frozen=True)
class FailoverAttempt:
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    error_type: str  # "CapacityError", ...
    message: str


class ProvisionFailedError(LauncherError):
    """Every placement was tried and failed; `attempts` is the whole history."""

    exit_code = 3

    def __init__(self, message: str, attempts: list[FailoverAttempt]) -> None:
        lines = [message]
        for a in attempts:
            where = "/".join(p for p in (a.cloud, a.region, a.zone) if p)
            lines.append(f"  - {where} {a.instance_type}: {a.error_type}: {a.message}")
        super().__init__("\n".join(lines))
        self.attempts = attempts


class NodeState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class ProvisionRequest:
    cluster_name: str
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    accelerator: str | None = None
    accelerator_count: float = 0
    fabric: str | None = None  # the fabric the placement was chosen for
    # what the task's `network.fabric` asked ("rdma", "best", "infiniband"...; None: nothing),
    # for clouds that must request the fabric per node (Kubernetes extended resources)
    fabric_asked: str | None = None
    disk_size_gb: int | None = None
    image_id: str | None = None
    ports: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    ssh_public_key: str | None = None  # authorized on every node
    # Stable for one (cluster, attempt): recorded in the state DB before the cloud
    # call, so a retried or resumed call cannot create a second gang (EC2 ClientToken,
    # GCP requestId, ...). None: the cloud derives nothing and creates afresh.
    idempotency_token: str | None = None
    # The task's `config:` overrides that apply here (launcher.task.config_section), section ->
    # key -> value, e.g. {"aws": {"use_internal_ips": True}, "docker": {"run_options":
    # ("--shm-size=16g",)}}: a provisioner applies its section over config.yaml's
    # (`task_config.apply_overrides(load_config().aws, req.settings.get("aws", {}))`).
    settings: dict[str, dict[str, object]] = field(default_factory=dict)
    # the task's `volumes:` (launched on Kubernetes only, as PersistentVolumeClaims)
    volumes: tuple[VolumeMount, ...] = ()


@dataclass(frozen=True)
class NodeInfo:
    rank: int
    node_id: str  # the cloud's instance id (local: "<cluster>-<rank>")
    internal_ip: str
    external_ip: str | None = None
    ssh_user: str | None = None  # None: not reached over SSH (local cloud)
    ssh_port: int = 22
    ssh_host_key: str | None = None  # "ssh-ed25519 AAAA..." pinned at provision time
    local_root: str | None = None  # local cloud: the node's home directory on this machine


@dataclass(frozen=True)
class ClusterInfo:
    cluster_name: str
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    use_spot: bool
    nodes: tuple[NodeInfo, ...]
    ssh_key_path: str | None = None  # private key the client uses to reach the nodes

    @property
    def head(self) -> NodeInfo:
        return self.nodes[0]


@runtime_checkable
class Cloud(Protocol):
    name: str

    def check(self) -> CredentialStatus:
        """Are credentials usable? Never raises."""
        ...

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create all `req.num_nodes` nodes or none (gang). Blocking.

        Raises a `CloudError` subclass; on failure nothing is left running.
        Every instance is tagged with the cluster name before anything else
        can fail, so `terminate(cluster)` always finds it.
        """
        ...

    def query(self, cluster: str) -> dict[str, NodeState]:
        """The cloud's own view of each node of the cluster (node_id -> state)."""
        ...

    def terminate(self, cluster: str) -> None:
        """Delete every node tagged with the cluster. Idempotent."""
        ...


@runtime_checkable
class SupportsBatchQuery(Protocol):
    """Optional capability: the cloud's view of many clusters in one call, for a caller
    that watches many (the managed-jobs controller polls once per cloud and region per
    tick, not once per job)."""

    def query_many(self, clusters: Sequence[str], region: str | None = None
                   ) -> dict[str, dict[str, NodeState]]:
        """cluster -> its `query` answer, for every cluster asked ({} for one the cloud
        does not know). `region`: where the clusters run, when the caller knows (all of
        them in it); None: wherever each was recorded. One API call (or one per page)
        where the cloud lists many instances at once. Raises CloudError (the whole
        batch failed: e.g. RateLimitedError, AuthError)."""
        ...


def query_many(cloud: Cloud, clusters: Sequence[str], region: str | None = None
               ) -> dict[str, dict[str, NodeState]]:
    """`cloud.query_many` where the cloud implements it; else one `query` per cluster
    (the same answers, one call each). Raises what the cloud raises."""
    if isinstance(cloud, SupportsBatchQuery):
        return cloud.query_many(clusters, region)
    return {c: cloud.query(c) for c in clusters}


@runtime_checkable
class SupportsOrphans(Protocol):
    """Optional capability: list what the cloud runs under launcher's tags, so
    `status --refresh` can show instances no cluster in the state DB owns (a client
    killed between the cloud call and the DB write, a DB restored from a backup...)."""

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster name (the launcher tag) -> ids of its live (pending, running or
        stopped) instances, over every region the cloud may have used. Blocking;
        raises CloudError (e.g. AuthError) when the cloud cannot be listed."""
        ...


@dataclass(frozen=True)
class TaggedResource:
    """One resource a cloud holds under launcher's cluster tag. `kind` is what a
    person reads ("instance", "security group", "placement group", "Elastic IP",
    "volume", "network interface", "resource group", "disk", ...); `id` is the
    cloud's own id (or name, where the cloud names things, like placement groups)."""

    kind: str
    id: str


INSTANCE = "instance"


@runtime_checkable
class SupportsResourceScan(Protocol):
    """Optional capability beside SupportsOrphans: list EVERY kind of resource the cloud
    holds under launcher's tags, not only instances, so a cluster killed after its
    security group or placement group was made but before any instance existed is
    still found (and `launcher down --orphan` removes it)."""

    def list_tagged_resources(self) -> dict[str, list[TaggedResource]]:
        """cluster name -> its live tagged resources of every kind (instances:
        pending, running or stopped), over every region the cloud may have used.
        Blocking; raises CloudError when the cloud cannot be listed."""
        ...


@dataclass(frozen=True)
class Leftover:
    """A resource launcher created once for many clusters and `down` never deletes (an
    AWS key pair, a shared security group, a GCP firewall rule, an SSH key registered on
    an account). `region` None: account- or project-wide. `in_use_by`: why it must stay
    (something still uses it), None when it may be deleted."""

    cloud: str
    kind: str  # "key pair", "security group", "firewall rule", "SSH key", ...
    name: str
    id: str  # what the cloud deletes it by
    region: str | None = None
    in_use_by: str | None = None


@runtime_checkable
class SupportsCleanup(Protocol):
    """Optional capability: list and delete the shared leftovers (`launcher clouds
    cleanup`). Only resources launcher itself created (its names and tags) are listed."""

    def list_leftovers(self, region: str | None = None) -> list[Leftover]:
        """Every leftover in `region` (None: every region launcher may have used, and
        account-wide ones), each with `in_use_by` set when the cloud shows it still in use
        (an instance of any state but terminated uses it). Blocking; raises CloudError."""
        ...

    def delete_leftover(self, item: Leftover) -> None:
        """Delete one listed leftover (and forget it in launcher's caches). A leftover
        already gone is fine. Raises CloudError (e.g. still in use after all)."""
        ...


class SupportsStop(Protocol):
    def stop(self, cluster: str) -> None: ...
    def start(self, cluster: str) -> ClusterInfo: ...
