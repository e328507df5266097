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
what a killed launch left behind. Each attempt is recorded too (attempts.py), with
the idempotency token the cloud gets in `ProvisionRequest.idempotency_token`.

`retry_until_up`: when a whole round fails and some placement failed for capacity
or quota, the plan is tried again from the start (clouds refused for credentials
stay blocked) after a capped exponential backoff (`Backoff`: 30 s, 60 s, ... 10 min),
each round announced through `on_event`. Ctrl-C during the wait raises
KeyboardInterrupt with nothing provisioned.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from launcher.catalog.money import format_money
from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    ClusterInfo,
    FailoverAttempt,
    InvalidRequestError,
    ProvisionFailedError,
    ProvisionRequest,
    QuotaError,
)
from launcher.errors import LauncherError, NoPlacementError
from launcher.optimizer.ranking import Blocked, Placement
from launcher.provisioning import attempts as attempt_log
from launcher.provisioning.cloud_access import CloudFn, default_cloud
from launcher.state.db import PlacementRecord, StateDB

if TYPE_CHECKING:
    from launcher.clouds.base import Cloud
    from launcher.task.model import Task

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
    """What the failover loop needs of `launcher.provisioning.planning.Plan`."""

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


@dataclass(frozen=True)
class Backoff:
    """Wait before retry round n (1-based): min(initial * factor**(n-1), maximum) seconds."""

    initial: float = 30.0
    factor: float = 2.0
    maximum: float = 600.0

    def delay(self, round_number: int) -> float:
        return float(min(self.initial * self.factor ** max(0, round_number - 1), self.maximum))


# Errors that waiting can cure: the capacity or the quota may come back.
RETRYABLE = (CapacityError.__name__, QuotaError.__name__)


def default_plan(task: Task, blocked: Blocked) -> PlanLike:
    from launcher.provisioning.planning import plan

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


def provision_request(
    cluster_name: str,
    p: Placement,
    ssh_public_key: str | None,
    settings: dict[str, dict[str, object]] | None = None,
) -> ProvisionRequest:
    """The request for placement `p`; `settings` are the task's `config:` overrides."""
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
        fabric_asked=c.network.fabric if c.network is not None else None,
        disk_size_gb=c.disk_size_gb,
        image_id=c.image_id,
        ports=tuple(c.ports),
        labels=dict(c.labels),
        ssh_public_key=ssh_public_key,
        settings=dict(settings or {}),
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


def nothing_launchable_message(plan: PlanLike, what: str = "this task") -> str:
    """Why no placement of `plan` (for `what`) can be launched here: per cloud, its
    placements' short reasons (planning_rows), with the check's own words where they say
    more (a cloud not enabled, a config refusal, Kubernetes)."""
    from launcher.provisioning.planning import TPU_NOT_LAUNCHABLE
    from launcher.provisioning.planning_rows import (
        REASON_CONFIG,
        REASON_KUBERNETES,
        REASON_NOT_ENABLED,
    )

    clouds = sorted({p.cloud for p in plan.placements})
    disabled: dict[str, str] = getattr(plan, "disabled_reasons", None) or {}
    placement_reasons: list[str | None] = getattr(plan, "reasons", None) or []
    by_cloud: dict[str, list[str]] = {}
    for p, reason in zip(plan.placements, placement_reasons, strict=False):
        if reason is not None and reason not in by_cloud.setdefault(p.cloud, []):
            by_cloud[p.cloud].append(reason)
    detailed = (REASON_NOT_ENABLED, REASON_CONFIG, REASON_KUBERNETES)  # with the check's words
    parts = []
    for c in clouds:
        words = [f"{r} ({disabled[c]})" if r in detailed and c in disabled else r
                 for r in by_cloud.get(c, [])] or ([disabled[c]] if c in disabled else [])
        if words:
            parts.append(f"{c}: {', '.join(words)}")
    tpu = [p for p in plan.placements if (p.accelerator or "").lower().startswith("tpu-")]
    return (
        f"No placement of {what} can be launched here. Placements exist on "
        f"{', '.join(clouds)}, but none is launchable "
        + (f"({'; '.join(parts)}). " if parts
           else "(no credentials, or no provisioner for it in this version). ")
        + (TPU_NOT_LAUNCHABLE + " " if tpu else "")
        + "`launcher launch TASK --dryrun` shows every placement and why it is not launchable."
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
    retry_until_up: bool = False,
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], None] = time.sleep,
) -> Provisioned:
    """Provision `cluster_name` for `task` on the best enabled placement, failing over.

    Blocking. Creates the cluster's INIT row if it does not exist (else updates
    its placement) before each attempt. On success the row holds the placement
    and the nodes; status is left INIT (the caller marks it UP once the runtime is
    ready). On failure the row is left for the caller to delete (it knows
    whether the launch created it); every partial attempt has been terminated.

    `confirm` is asked before the first paid placement, and again only if a
    failover moves to a more expensive one. With `retry_until_up`, a round in which
    some placement failed for capacity or quota is followed, after `backoff`
    (`sleep` is injectable for tests), by another round over the whole plan.
    Raises NoPlacementError (nothing fits before any attempt), ProvisionFailedError
    (with every attempt of the last round), LaunchAbortedError (declined),
    KeyboardInterrupt (Ctrl-C; nothing is left provisioned).
    """
    emit = on_event or (lambda _msg: None)
    confirmed = [0.0]
    round_number = 1
    round_blocked = blocked
    while True:
        try:
            return _one_round(
                task, cluster_name, db, blocked=round_blocked, only_region=only_region,
                plan_fn=plan_fn, cloud_fn=cloud_fn, confirm=confirm, emit=emit,
                ssh_public_key=ssh_public_key, owner=owner, confirmed=confirmed,
            )
        except ProvisionFailedError as exc:
            retryable = any(a.error_type in RETRYABLE for a in exc.attempts)
            invalid = any(a.error_type == InvalidRequestError.__name__ for a in exc.attempts)
            if not retry_until_up or not retryable or invalid:
                raise
            delay = backoff.delay(round_number)
            emit(f"Round {round_number}: every placement failed "
                 f"({_error_counts(exc.attempts)}); retrying in {delay:g}s "
                 "(--retry-until-up; Ctrl-C to stop)")
            db.add_event(cluster_name, "retry-round",
                         f"round {round_number} failed; next in {delay:g}s")
            # clouds that refused our credentials stay refused; capacity may come back
            round_blocked = blocked
            for a in exc.attempts:
                if a.error_type == AuthError.__name__:
                    round_blocked = round_blocked.with_cloud(a.cloud)
            sleep(delay)
            round_number += 1


def _error_counts(attempts: list[FailoverAttempt]) -> str:
    counts: dict[str, int] = {}
    for a in attempts:
        counts[a.error_type] = counts.get(a.error_type, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))


def _one_round(
    task: Task,
    cluster_name: str,
    db: StateDB,
    *,
    blocked: Blocked,
    only_region: tuple[str, str] | None,
    plan_fn: PlanFn,
    cloud_fn: CloudFn,
    confirm: ConfirmCallback | None,
    emit: EventCallback,
    ssh_public_key: str | None,
    owner: str | None,
    confirmed: list[float],
) -> Provisioned:
    """One pass over the plan (the loop described in the module docstring)."""
    attempts: list[FailoverAttempt] = []
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
            raise NoPlacementError(nothing_launchable_message(plan))
        if placement.hourly_cost > confirmed[0] and confirm is not None:
            if not confirm(placement):
                raise LaunchAbortedError("Launch aborted: the placement was not confirmed.")
            confirmed[0] = placement.hourly_cost
        record = placement_record(placement)
        if db.get_cluster(cluster_name) is None:
            db.create_cluster(cluster_name, record, task_name=task.name, owner=owner)
        else:
            db.set_placement(cluster_name, record)
        emit(f"Provisioning {cluster_name}: {record.resources} on {_where(placement)}"
             f" ({format_money(placement.hourly_cost)}/h)")
        if placement.candidate.image_id and placement.cloud in _OWN_ACCESS_CLOUDS:
            # these nodes are existing machines: no image (or docker container) is applied
            emit(f"Note: resources.image_id {placement.candidate.image_id!r} is ignored on the"
                 f" {placement.cloud} cloud; the task runs directly on its nodes.")
        cloud = cloud_fn(placement.cloud)
        public_key = ssh_public_key
        if public_key is None and placement.cloud not in _OWN_ACCESS_CLOUDS:
            from launcher.runtime.keys import ensure_user_key

            public_key = ensure_user_key().public_key()
        row = attempt_log.begin(db, cluster_name, placement.cloud, placement.region,
                                placement.zone, placement.instance_type,
                                not_before=db.require_cluster(cluster_name).launched_at)
        config = getattr(task, "config", None)  # the task's `config:` overrides, if any
        req = replace(provision_request(cluster_name, placement, public_key,
                                        config.provider_overrides() if config else None),
                      idempotency_token=row.token, volumes=tuple(getattr(task, "volumes", ())))
        # billed from the provision call on (the cloud bills booting nodes too)
        provision_started = time.time()
        try:
            info = cloud.provision(req)
        except CloudError as err:
            attempt_log.finish(db, row, "failed", type(err).__name__, str(err))
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
        except BaseException as exc:
            # a bug, an SDK error nobody typed, or Ctrl-C: leave nothing running
            with contextlib.suppress(Exception):
                attempt_log.finish(db, row, "failed", type(exc).__name__, str(exc))
            _terminate_quietly(cloud, cluster_name, db)
            raise
        attempt_log.finish(db, row, "ok")
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
