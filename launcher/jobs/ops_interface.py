"""The seam between the managed-jobs controller and the cluster runtime: its interface.

`ClusterOps` is what the controller calls (launcher/jobs/cluster_ops.py has the real
adapter, tests an in-memory fake), with the values it passes and returns and the typed
errors that decide what the controller does next. Every method is blocking (the
controller calls them from worker threads) and must be safe to call from several
threads at once for *different* clusters.

Errors the controller acts on:
- `NoCapacityError`     nothing could be provisioned in any tier (after failover)
- `SetupFailedError`    the task's setup failed on a node (maybe because it was preempted:
                         the controller asks `cloud_view` before calling it a setup failure)
- `UnhealthyNodeError`  a node failed the health gate before setup (docs/health.md): the
                         controller treats it like a lost node (new attempt, new nodes)
- `LaunchAbortedError`  `before_run` said stop (the job was cancelled meanwhile)
- `PermanentLaunchError` retrying cannot help (invalid request, bad task)
- `TransientOpsError`   a node or the cloud API could not be reached just now
- `RateLimitedOpsError` the cloud's API throttled the launch (a TransientOpsError): the
                         controller backs off launches on that cloud
Anything else from `provision_and_start` is treated like a transient failure.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from launcher.clouds.base import NodeState
from launcher.errors import LauncherError
from launcher.jobs.recovery import PlacementTier

if TYPE_CHECKING:
    from launcher.task.model import Task


class NoCapacityError(LauncherError):
    """No placement in any tier could be provisioned (or none fits the task)."""


class SetupFailedError(LauncherError):
    """The task's setup failed; `rank` is the failing node when known."""

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank


class UnhealthyNodeError(LauncherError):
    """A node failed the health gate; `rank` and `finding` name it and what it showed."""

    def __init__(self, message: str, rank: int, finding: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.finding = finding


class LaunchAbortedError(LauncherError):
    """`before_run` returned False: the launch stopped before the job was submitted."""


class PermanentLaunchError(LauncherError):
    """The launch can never succeed as asked (invalid request); do not retry."""


class TransientOpsError(LauncherError):
    """A node or the cloud could not be reached just now. Never proof of a preemption."""


class RateLimitedOpsError(TransientOpsError):
    """The cloud `cloud` throttled the call (launcher.clouds.base.RateLimitedError);
    `retry_after_s`: its hint, when it gave one."""

    def __init__(self, message: str, cloud: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.cloud = cloud
        self.retry_after_s = retry_after_s


class RunState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


@dataclass(frozen=True)
class Notice:
    """A spot interruption notice relayed by the head-node agent."""

    node_id: str
    received_at: float  # epoch seconds
    grace_s: float


@dataclass(frozen=True)
class HealthAlarm:
    """The agent's health watch found node `node_id` (rank `rank`) failing while the job
    ran and stopped the job (docs/health.md): the controller excludes and replaces it."""

    node_id: str
    rank: int
    finding: str  # "Xid 79 (GPU has fallen off the bus)"
    detected_at: float  # epoch seconds
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRun:
    """The cluster agent's record of the job run by one attempt."""

    status: RunState
    exit_code: int | None = None
    failed_rank: int | None = None
    reason: str | None = None
    notice: Notice | None = None  # an interruption notice the agent relayed to this job
    ended_at: float | None = None  # when the agent recorded the run's end (epoch seconds)
    health: HealthAlarm | None = None  # a node the health watch failed (and stopped the job)


@dataclass(frozen=True)
class Placed:
    """Where an attempt's cluster was provisioned (before setup): what it costs from now."""

    cloud: str
    region: str | None
    zone: str | None
    instance_type: str | None
    num_nodes: int
    use_spot: bool
    node_price: float  # $/h of one node


@dataclass(frozen=True)
class LaunchRequest:
    """Everything one attempt's launch needs. `tiers` are tried in order."""

    job_id: int
    attempt: int
    cluster_name: str
    task: Task
    tiers: tuple[PlacementTier, ...]
    task_id: str  # LAUNCHER_TASK_ID, stable across attempts
    job_name: str
    env_extra: Mapping[str, str] = field(default_factory=dict)
    # Called (in the worker thread) after provisioning and setup, right before the
    # job is submitted: blocks while a preempted predecessor drains; False = abort.
    before_run: Callable[[], bool] | None = None
    # Receives setup/provisioning output lines (kept in the attempt's log).
    on_output: Callable[[str], None] | None = None
    # Called (in the worker thread) as soon as the cluster is provisioned, before setup,
    # so an attempt that ends during setup is still billed and blocked where it ran.
    on_provisioned: Callable[[Placed], None] | None = None
    # DEADLINE jobs: "spot" or "on_demand" forces every placement to that market (the
    # policy's choice); None keeps the task's own `use_spot`.
    market: str | None = None


@dataclass(frozen=True)
class AttemptLaunch:
    """Where an attempt landed and the cluster job id of its run."""

    cluster_name: str
    cloud: str
    region: str | None
    zone: str | None
    instance_type: str | None
    num_nodes: int
    use_spot: bool
    node_price: float  # $/h of one node, at launch
    cluster_job_id: int
    node_ids: tuple[str, ...]  # rank order
    checkpoint_dir: str | None


class ClusterOps(Protocol):
    def provision_and_start(self, req: LaunchRequest) -> AttemptLaunch:
        """Provision `req.cluster_name` (trying tiers/placements in order with failover),
        run setup, call `before_run`, submit the job. Blocking. On any error the
        caller tears the cluster down (this method need not)."""
        ...

    def adopt(self, cluster_name: str) -> AttemptLaunch | None:
        """If the cluster exists, is up and already runs (or ran) our job, describe it;
        else None. Used after a controller restart. Never provisions."""
        ...

    def job_status(self, cluster_name: str, cluster_job_id: int) -> JobRun:
        """The agent's record. Raises TransientOpsError when the head is unreachable."""
        ...

    def cloud_view(self, cluster_name: str) -> Mapping[str, NodeState]:
        """The cloud's own view: node_id -> state (a missing node = TERMINATED).
        Raises TransientOpsError when the cloud API cannot be reached."""
        ...

    def cloud_views(self, cloud: str | None, region: str | None,
                    cluster_names: Sequence[str]) -> dict[str, Mapping[str, NodeState]]:
        """`cloud_view` of many clusters on `cloud` in `region` with one cloud query
        (launcher.clouds.base.query_many); None: clusters whose cloud the caller does not
        know (asked one by one). Raises TransientOpsError when the query failed (for the
        whole batch)."""
        ...

    def notices(self, cluster_name: str) -> list[Notice]:
        """Interruption notices received for the cluster's nodes (cheap; may be [])."""
        ...

    def records_survive_loss(self, cluster_name: str) -> bool:
        """True when the head node's job record and logs stay readable after the cloud
        reports the node lost (the local cloud: its disk outlives it). False: they went
        with the node, and the controller does not try to reach it (a dead address
        answers nothing for seconds). Cheap; never raises."""
        ...

    def final_loss(self, cluster_name: str) -> str | None:
        """Why the cluster's nodes ended for good at a limit the task set (a Slurm
        allocation killed at the task's time_limit): the job then fails with this reason
        instead of being recovered. None: a loss to recover from, or the cloud does not
        say. Never raises."""
        ...

    def lost_since(self, cluster_name: str) -> float | None:
        """When the cloud recorded the cluster's nodes going away (epoch seconds), if it
        records that; None otherwise (the controller then uses the last time it heard
        from the job, or the detection time). Never later than the loss itself: a run
        the agent recorded ended before this time ended by itself. Cheap; never raises."""
        ...

    def fetch_logs(
        self,
        cluster_name: str,
        cluster_job_id: int,
        on_line: Callable[[str], None],
        follow: bool = False,
    ) -> None:
        """Stream the job's log lines (rank-prefixed). With follow, until the job ends.
        Raises TransientOpsError when the logs cannot be read, or when the stream was
        cut before its end (what `on_line` got is then partial)."""
        ...

    def fetch_log_since(
        self,
        cluster_name: str,
        cluster_job_id: int,
        offsets: Mapping[int, int],
        on_line: Callable[[str], None],
    ) -> dict[int, int]:
        """Incremental sync of the running job's log: the complete lines (rank-prefixed)
        past each rank's byte offset (a rank not listed: 0); returns the next offsets.
        One short call. Raises TransientOpsError when the head cannot be read (then no
        line was delivered: ask again from the same offsets)."""
        ...

    def cancel_job(self, cluster_name: str, cluster_job_id: int) -> None:
        """Best effort; idempotent."""
        ...

    def teardown(self, cluster_name: str) -> None:
        """Terminate every node of the cluster and forget it. Idempotent: a cluster
        that does not exist is fine."""
        ...

    def abort_launch(self, cluster_name: str) -> None:
        """Terminate the cluster's nodes now, while `provision_and_start` may still be
        working on it in another thread (which then fails). Used to cancel promptly;
        `teardown` still follows. Idempotent."""
        ...

    def can_replace_nodes(self, cluster_name: str) -> bool:
        """Whether `replace_nodes` can replace lost nodes of this cluster in place (it may
        still fail, e.g. no spare host). False: it always answers None, and the controller
        relaunches the whole cluster without announcing a replacement. Cheap; never raises."""
        ...

    def exclude_nodes(self, cluster_name: str, node_ids: tuple[str, ...], reason: str) -> str:
        """Nodes that failed the health watch: make sure no later attempt gets them back
        (an SSH pool quarantines the hosts until `launcher ssh release`; the local cloud
        reclaims the nodes; elsewhere the instances go with the cluster and are never
        reused). Returns what was done, for the job's events. Never raises."""
        ...

    def replace_nodes(
        self, cluster_name: str, lost_node_ids: tuple[str, ...], req: LaunchRequest
    ) -> AttemptLaunch | None:
        """Replace only the lost nodes of a multi-node cluster (same zone / placement
        group), re-run setup on them, call `req.before_run` (False: raise
        LaunchAbortedError) and restart the gang job. None = this cloud cannot (the
        controller then relaunches the whole cluster). Like a launch, it may be aborted
        by `abort_launch` from another thread (the job was cancelled)."""
        ...


def lost_nodes(view: Mapping[str, NodeState], expected: tuple[str, ...]) -> tuple[str, ...]:
    """Nodes the cloud says are gone (PREEMPTED/TERMINATED, or missing from its view)."""
    gone = (NodeState.PREEMPTED, NodeState.TERMINATED)
    out = [n for n in expected if n not in view or view[n] in gone]
    out += [n for n, s in view.items() if s in gone and n not in expected]
    return tuple(out)
