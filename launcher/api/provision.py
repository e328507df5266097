"""Provisioning with failover: plan, try the best enabled placement, block and re-plan.

`provision_with_failover` is shared by `launch` and the managed-jobs controller.
Rules (see launcher/clouds/base.py):
- `CapacityError`       -> block the zone (the region when the placement has no zone)
- `QuotaError`          -> block the region
- `AuthError`           -> block the cloud
- `InvalidRequestError` -> stop: retrying elsewhere will not help
- any other `CloudError`-> block the zone, like a capacity error
After every failed attempt the cloud's `terminate(cluster)` is called, so a
partially created gang never outlives the attempt. The cluster's row in the
state DB is written (INIT, with the placement about to be tried) BEFORE the
cloud is called, and every cloud tried is an event, so `down` can always find
what a killed launch left behind.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from launcher.api.cluster_common import CloudFn, default_cloud
from launcher.clouds.base import (
    AuthError,
    CloudError,
    ClusterInfo,
    FailoverAttempt,
    InvalidRequestError,
    ProvisionFailedError,
    ProvisionRequest,
    QuotaError,
)
from launcher.errors import LauncherError, NoPlacementError
from launcher.optimizer import Blocked, Placement
from launcher.state import PlacementRecord, StateDB

if TYPE_CHECKING:
    from launcher.clouds.base import Cloud
    from launcher.task import Task

EventCallback = Callable[[str], None]
# Clouds that reach nodes without the user's launcher key: local (no SSH at all) and
# ssh pools (each pool names its own identity file).
_OWN_ACCESS_CLOUDS = ("local", "ssh")
# Asked before provisioning a paid placement; False aborts the launch.
ConfirmCallback = Callable[[Placement], bool]


class LaunchAbortedError(LauncherError):
    """The user declined the placement (or confirmation was needed and impossible)."""

    exit_code = 1


class PlanLike(Protocol):
    """What the failover loop needs of `launcher.api.planning.Plan`."""

    placements: list[Placement]
    enabled: list[bool]


PlanFn = Callable[["Task", Blocked], PlanLike]


@dataclass(frozen=True)
class Provisioned:
    """A provisioned cluster and how it got there."""

    cluster: ClusterInfo
    placement: Placement
    attempts: list[FailoverAttempt] = field(default_factory=list)
    blocked: Blocked = Blocked()


def default_plan(task: Task, blocked: Blocked) -> PlanLike:
    from launcher.api.planning import plan

    result: PlanLike = plan(task, blocked=blocked)
    return result


def placement_record(p: Placement) -> PlacementRecord:
    acc = f"{p.accelerator}:{p.accelerator_count:g}" if p.accelerator else "cpu"
    return PlacementRecord(
        cloud=p.cloud,
        region=p.region,
        zone=p.zone,
        instance_type=p.instance_type,
        num_nodes=p.num_nodes,
        use_spot=p.use_spot,
        accelerator=p.accelerator,
        accelerator_count=p.accelerator_count,
        hourly_cost=p.hourly_cost,
        resources=f"{p.num_nodes}x {p.instance_type} ({acc}{', spot' if p.use_spot else ''})",
    )


def provision_request(cluster_name: str, p: Placement, ssh_public_key: str | None) -> ProvisionRequest:
    c = p.candidate
    return ProvisionRequest(
        cluster_name=cluster_name,
        cloud=p.cloud,
        region=p.region,
        zone=p.zone,
        instance_type=p.instance_type,
        num_nodes=p.num_nodes,
        use_spot=p.use_spot,
        accelerator=p.accelerator,
        accelerator_count=p.accelerator_count,
        fabric=p.fabric,
        disk_size_gb=c.disk_size_gb,
        image_id=c.image_id,
        ports=tuple(c.ports),
        labels=dict(c.labels),
        ssh_public_key=ssh_public_key,
    )


def _block(blocked: Blocked, p: Placement, err: CloudError) -> Blocked:
    if isinstance(err, AuthError):
        return blocked.with_cloud(p.cloud)
    if isinstance(err, QuotaError):
        return blocked.with_region(p.cloud, p.region)
    # CapacityError and unknown CloudErrors: the narrowest scope we know
    if p.zone:
        return blocked.with_zone(p.cloud, p.region, p.zone)
    return blocked.with_region(p.cloud, p.region)


def _first_enabled(plan: PlanLike, only_region: tuple[str, str] | None) -> Placement | None:
    for placement, enabled in zip(plan.placements, plan.enabled, strict=False):
        if not enabled:
            continue
        if only_region and (placement.cloud, placement.region) != only_region:
            continue
        return placement
    return None


def _nothing_enabled_message(plan: PlanLike) -> str:
    clouds = sorted({p.cloud for p in plan.placements})
    return (
        "No enabled cloud can run this task. Placements exist on "
        f"{', '.join(clouds)}, but none of those clouds is enabled on this machine "
        "(no credentials, or no provisioner for it in this version). "
        "`launcher launch TASK --dryrun` shows every placement and whether it is enabled."
    )


def provision_with_failover(
    task: Task,
    cluster_name: str,
    db: StateDB,
    *,
    blocked: Blocked = Blocked(),
    only_region: tuple[str, str] | None = None,
    plan_fn: PlanFn = default_plan,
    cloud_fn: CloudFn = default_cloud,
    confirm: ConfirmCallback | None = None,
    on_event: EventCallback | None = None,
    ssh_public_key: str | None = None,
    owner: str | None = None,
) -> Provisioned:
    """Provision `cluster_name` for `task` on the best enabled placement, failing over.

    Blocking. Creates the cluster's INIT row if it does not exist (else updates
    its placement) before each attempt. On success the row holds the placement
    and the nodes; status is left INIT (the caller marks it UP once the runtime is
    ready). On failure the row is left for the caller to delete (it knows
    whether the launch created it); every partial attempt has been terminated.

    `confirm` is asked before the first paid placement, and again only if a
    failover moves to a more expensive one. Raises NoPlacementError (nothing
    fits before any attempt), ProvisionFailedError (with every attempt),
    LaunchAbortedError (declined).
    """
    emit = on_event or (lambda _msg: None)
    attempts: list[FailoverAttempt] = []
    confirmed_cost = 0.0
    while True:
        try:
            plan = plan_fn(task, blocked)
        except NoPlacementError as exc:
            if not attempts:
                raise
            raise ProvisionFailedError(
                f"Could not provision cluster {cluster_name!r}: every placement failed "
                f"({exc}).",
                attempts,
            ) from None
        placement = _first_enabled(plan, only_region)
        if placement is None:
            if attempts:
                raise ProvisionFailedError(
                    f"Could not provision cluster {cluster_name!r}: every enabled placement failed.",
                    attempts,
                )
            if only_region:
                raise NoPlacementError(
                    f"No enabled placement in {only_region[0]}/{only_region[1]} fits the task."
                )
            raise NoPlacementError(_nothing_enabled_message(plan))
        if placement.hourly_cost > confirmed_cost and confirm is not None:
            if not confirm(placement):
                raise LaunchAbortedError("Launch aborted: the placement was not confirmed.")
            confirmed_cost = placement.hourly_cost
        record = placement_record(placement)
        if db.get_cluster(cluster_name) is None:
            db.create_cluster(cluster_name, record, task_name=task.name, owner=owner)
        else:
            db.set_placement(cluster_name, record)
        emit(f"Provisioning {cluster_name}: {record.resources} on {_where(placement)}"
             f" (${placement.hourly_cost:.2f}/h)")
        if placement.candidate.image_id and placement.cloud in _OWN_ACCESS_CLOUDS:
            # these nodes are existing machines: no image (or docker container) is applied
            emit(f"Note: resources.image_id {placement.candidate.image_id!r} is ignored on the"
                 f" {placement.cloud} cloud; the task runs directly on its nodes.")
        cloud = cloud_fn(placement.cloud)
        public_key = ssh_public_key
        if public_key is None and placement.cloud not in _OWN_ACCESS_CLOUDS:
            from launcher.runtime.keys import ensure_user_key

            public_key = ensure_user_key().public_key()
        req = provision_request(cluster_name, placement, public_key)
        # billed from the provision call on (the cloud bills booting nodes too)
        provision_started = time.time()
        try:
            info = cloud.provision(req)
        except CloudError as err:
            attempts.append(
                FailoverAttempt(
                    cloud=placement.cloud,
                    region=placement.region,
                    zone=placement.zone,
                    instance_type=placement.instance_type,
                    error_type=type(err).__name__,
                    message=str(err),
                )
            )
            db.add_event(cluster_name, "provision-failed", f"{type(err).__name__}: {err}", placement.cloud)
            _terminate_quietly(cloud, cluster_name, db)
            if isinstance(err, InvalidRequestError):
                raise ProvisionFailedError(
                    f"Could not provision cluster {cluster_name!r}: the request is invalid "
                    "(not retried elsewhere).",
                    attempts,
                ) from None
            blocked = _block(blocked, placement, err)
            emit(f"  {_where(placement)}: {type(err).__name__}: {err} - trying the next placement")
            continue
        except BaseException:
            # a bug, an SDK error nobody typed, or Ctrl-C: leave nothing running
            _terminate_quietly(cloud, cluster_name, db)
            raise
        db.set_nodes(cluster_name, info.nodes)
        db.set_ssh_key(cluster_name, info.ssh_key_path)
        db.add_event(cluster_name, "provisioned", _where(placement), placement.cloud)
        rec = db.require_cluster(cluster_name)
        db.open_usage(rec, started_at=provision_started)
        return Provisioned(cluster=info, placement=placement, attempts=attempts, blocked=blocked)


def _where(p: Placement) -> str:
    return "/".join(x for x in (p.cloud, p.region, p.zone) if x)


def _terminate_quietly(cloud: Cloud, cluster_name: str, db: StateDB) -> None:
    try:
        cloud.terminate(cluster_name)
    except Exception as exc:  # recorded: `down` retries every cloud the events name
        with contextlib.suppress(Exception):
            db.add_event(cluster_name, "terminate-failed", f"{type(exc).__name__}: {exc}", cloud.name)
