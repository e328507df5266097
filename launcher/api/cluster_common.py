"""Pieces shared by the cluster verbs (launch, exec, status, down...). Kept light:
nothing here imports the optimizer, the catalog or a cloud at module level, so
`launcher exec` and `launcher queue` start fast."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.clouds.base import FailoverAttempt
from launcher.errors import LauncherError
from launcher.provisioning.cloud_access import CloudFn, default_cloud
from launcher.provisioning.prepare import job_spec_for
from launcher.provisioning.teardown import terminate_everywhere
from launcher.state.db import ClusterRecord, ClusterStatus, StateDB

if TYPE_CHECKING:
    from launcher.runtime.jobspec import JobRecord
    from launcher.task.model import Task

__all__ = [
    "CloudFn",
    "ClusterAutodownedGoneError",
    "ClusterNotReadyError",
    "LaunchResult",
    "TaskDoesNotFitError",
    "autodown_guard",
    "default_cloud",
    "finished",
    "fit_problem",
    "job_exit_code",
    "job_spec_for",
    "noop",
    "reconcile_autodowned",
    "require_up",
    "require_user_owned",
    "terminate_everywhere",
]

LineCallback = Callable[[str], None]


def noop(_: str) -> None:
    return None


class ClusterNotReadyError(LauncherError):
    """The cluster exists but cannot take jobs now (STOPPED, INIT, PREEMPTED)."""

    exit_code = 4


class TaskDoesNotFitError(LauncherError):
    """An existing cluster cannot run the task (fewer nodes, other GPUs, other cloud)."""

    exit_code = 2


@dataclass(frozen=True)
class LaunchResult:
    """What `launch` / `exec_` did. `exit_code` is None when the run was detached or
    the task has no `run`; `job_id` None when nothing was submitted."""

    cluster_name: str
    cloud: str
    region: str
    zone: str | None
    num_nodes: int
    hourly_cost: float
    created: bool = False  # a new cluster was provisioned by this call
    reused: bool = False  # an existing cluster was reused as is (UP, or a healthy INIT gang)
    job_id: int | None = None
    exit_code: int | None = None
    job_status: str | None = None
    failed_rank: int | None = None
    reason: str | None = None
    attempts: list[FailoverAttempt] = field(default_factory=list)


def require_up(rec: ClusterRecord) -> None:
    """Raise ClusterNotReadyError (with what to do) unless the cluster is UP."""
    if rec.status is ClusterStatus.UP:
        return
    hint = {
        ClusterStatus.STOPPED: f"start it with `launcher start {rec.name}`",
        ClusterStatus.INIT: (
            "it is being launched, or its launch failed: relaunch with "
            f"`launcher launch -c {rec.name} TASK` or `launcher down {rec.name}`"
        ),
        ClusterStatus.PREEMPTED: (
            f"relaunch it with `launcher launch -c {rec.name} TASK` or `launcher down {rec.name}`"
        ),
    }[rec.status]
    raise ClusterNotReadyError(f"Cluster {rec.name!r} is {rec.status.value}: {hint}.")


def require_user_owned(rec: ClusterRecord) -> None:
    """Refuse to launch or exec on a cluster a managed job owns (its controller does)."""
    if rec.owner is not None:
        raise ClusterNotReadyError(
            f"Cluster {rec.name!r} belongs to {rec.owner}; it is managed by the jobs "
            "controller (see `launcher jobs queue`). Use another cluster name."
        )


def fit_problem(rec: ClusterRecord, task: Task) -> str | None:
    """Why the existing cluster cannot run `task` (None = it can)."""
    if task.num_nodes > rec.num_nodes:
        return f"the task needs {task.num_nodes} nodes, the cluster has {rec.num_nodes}"
    reasons: list[str] = []
    for c in task.candidates():
        if c.cloud and c.cloud != rec.cloud:
            reasons.append(f"cloud {c.cloud}")
        elif c.region and c.region != rec.region:
            reasons.append(f"region {c.region}")
        elif c.zone and c.zone != rec.zone:
            reasons.append(f"zone {c.zone}")
        elif c.instance_type and c.instance_type != rec.instance_type:
            reasons.append(f"instance type {c.instance_type}")
        elif c.accelerator and (
            _catalog_spelling(rec.accelerator or "").lower()
            != _catalog_spelling(c.accelerator).lower()
            or rec.accelerator_count < c.accelerator_count
        ):
            reasons.append(f"{_catalog_spelling(c.accelerator)}:{c.accelerator_count:g}")
        elif c.use_spot != rec.use_spot:
            reasons.append("spot" if c.use_spot else "on-demand")
        else:
            return None
    return "it asks for " + " or ".join(dict.fromkeys(reasons))


def _catalog_spelling(name: str) -> str:
    """An accelerator name as the catalog spells it (`h100` -> `H100`, SkyPilot's
    aliases too), so messages echo the canonical name; unknown names as given."""
    if not name:
        return name
    from launcher.catalog import query
    from launcher.catalog.aliases import user_aliases
    from launcher.task.fields import canonical_accelerator_name

    return canonical_accelerator_name(name, query.accelerator_names(), user_aliases()) or name


def job_exit_code(record: JobRecord) -> int:
    """The exit code a CLI following the job exits with: 0 for SUCCEEDED, the failing
    rank's code for FAILED, 1 when there is none (e.g. CANCELLED before it started)."""
    if record.status.value == "SUCCEEDED":
        return 0
    if record.exit_code is not None and record.exit_code != 0:
        return record.exit_code
    return 1


def finished(result: LaunchResult, record: JobRecord) -> LaunchResult:
    """`result` completed with the job's final record."""
    from dataclasses import replace

    return replace(
        result,
        exit_code=job_exit_code(record),
        job_status=record.status.value,
        failed_rank=record.failed_rank,
        reason=record.reason,
    )


class ClusterAutodownedGoneError(LauncherError):
    """The cluster was taken down by its own autostop; it has just been forgotten."""

    exit_code = 4


def reconcile_autodowned(name: str, at: float | None, idle_minutes: float | None,
                         cloud_fn: CloudFn = default_cloud) -> str:
    """The agent of `name` took its cluster down (autostop --down on a cloud whose nodes
    cannot do it themselves): release its nodes (cloud terminate: for ssh pools, free
    the hosts) and remove it from the state DB with reason "autodowned". Idempotent.
    Returns one human line saying what happened (for `status` and errors)."""
    when = time.strftime("%H:%M:%S", time.localtime(at)) if at else "earlier"
    idle = f" after {idle_minutes:g} idle minute(s)" if idle_minutes is not None else ""
    line = f"Cluster {name!r} was autodowned at {when}{idle}; its nodes were released."
    with StateDB() as db:
        rec = db.get_cluster(name)
        if rec is None:
            return line
        terminate_everywhere(db, rec, cloud_fn)
        db.delete_cluster(name, reason=f"autodowned at {when}{idle}")
    return line


@contextlib.contextmanager
def autodown_guard(name: str, cloud_fn: CloudFn = default_cloud) -> Iterator[None]:
    """Run an agent call for cluster `name`; if its agent says the cluster was autodowned,
    reconcile (reconcile_autodowned) and raise ClusterAutodownedGoneError instead."""
    from launcher.runtime.agent_client import ClusterAutodownedError

    try:
        yield
    except ClusterAutodownedError as exc:
        line = reconcile_autodowned(name, exc.at, exc.idle_minutes, cloud_fn)
        raise ClusterAutodownedGoneError(line) from None
