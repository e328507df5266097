"""Planning: where a task can run and what it costs, over every catalog cloud.

`plan`, `cost`, `enabled_clouds` (re-exported by `launcher.api.planning`, which adds
the GPU listings). The failover loop and the managed-jobs controller plan through
here, so it lives below the API.
Everything here is read-only and needs no credentials: prices come from the
catalog snapshot, `enabled` from `launcher.clouds.registry.credential_status` (proven
for launches; configured in env/files for dry runs and `cost`, see `plan`).
Results are typed dataclasses with `to_json()`; nothing here prints.
Raises `NoPlacementError` when nothing fits (explained per constraint),
`TaskValidationError` for unknown accelerator names in a task, `InvalidQueryError`
(exit code 2) for bad query arguments and unknown names in them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.catalog.locations import resolve_task_locations
from launcher.catalog.offer import KUBERNETES_CLOUD, UNPRICED_CLOUDS, Offer
from launcher.catalog.query_args import InvalidQueryError, _catalog_clouds, json_number
from launcher.errors import NoPlacementError
from launcher.optimizer.ranking import (
    LOCAL_CLOUD,
    Blocked,
    Place,
    Placement,
    Ranking,
    Rejection,
    Reorder,
    candidate_failures,
    rank,
)
from launcher.provisioning.planning_explain import (
    describe_candidate,
    explain_candidate,
    explain_no_placement,
)
from launcher.provisioning.planning_rows import (
    REASON_NOT_ENABLED,
    PlanRow,
    cloud_reason,
    launch_reasons,
    plan_rows,
)
from launcher.provisioning.planning_spot import placement_label, reorder_note, spot_model
from launcher.task.resources import ResourceCandidate

if TYPE_CHECKING:
    from launcher.catalog.interruption import InterruptionRate
    from launcher.clouds.status import CredentialStatus
    from launcher.task.model import Task

__all__ = [
    "InvalidQueryError",
    "Plan",
    "UnsatisfiableTaskError",
    "cost",
    "enabled_clouds",
    "json_number",
    "plan",
    "price_known",
]


# ---------------------------------------------------------------- plan / cost

# Why a catalog cloud without an implementation is not enabled.
NO_PROVISIONER = "no provisioner in this version (cost queries only)"
# TPU VMs (GCP `tpu-v2-8`, `tpu-v6e-8`, ...) are in the catalog for planning and cost
# queries; no provisioner creates TPU VMs yet, so they are never an enabled placement.
TPU_NOT_LAUNCHABLE = (
    "TPU VMs are planned and priced only: launcher cannot create TPU VMs yet, so a "
    "launch never picks them (use a GPU alternative to launch)."
)


# A task naming kubernetes, with no kubeconfig here, is planned with offers derived from
# its own request.
KUBERNETES_PLAN_ONLY = (
    "Kubernetes placements are planned only: no kubeconfig context exists here, so they "
    "are the request itself (price shown as '-'; whether a cluster has the GPUs and "
    "network asked for is not checked), and a launch never picks them."
)


def is_tpu(accelerator: str | None) -> bool:
    """Whether `accelerator` is a TPU name (SkyPilot's `tpu-v2-8`, `tpu-v6e-8`, ...)."""
    return accelerator is not None and accelerator.lower().startswith("tpu-")


# `--json` shows the best this many placement rows (and rejections); `--all` shows all.
JSON_PLACEMENT_LIMIT = 100

# The note of a plan where nothing is launchable: one short line, the details per cloud
# are `launcher check`'s (and the JSON's "disabled_clouds").
NOTHING_LAUNCHABLE = (
    "No placement is launchable here (each says why); `launcher check` shows which clouds "
    "are enabled and why."
)


@dataclass
class Plan:
    """The ranked placements for a task over every catalog cloud.

    `placements` best first (the ranking; the failover loop walks it in this order);
    `enabled[i]` says whether placement i is launchable here (planning_rows: its cloud
    enabled and a launch path for it) and `reasons[i]` why not (None when it is);
    `chosen` is the index of the first launchable one (None when none is); `rejected`
    has one entry per offer that served no candidate; `notes` are plain sentences worth
    showing (e.g. why `local` is in). `rows()` is the plan as shown.
    """

    task: Task
    placements: list[Placement]
    enabled: list[bool]
    chosen: int | None
    rejected: list[Rejection]
    hours: float | None = None
    notes: list[str] = field(default_factory=list)
    disabled_reasons: dict[str, str] = field(default_factory=dict)  # cloud -> why not enabled
    # Spot tasks: the expected-cost model's work and restart overhead (hours), and where
    # its order differs from the list-price order (see launcher.optimizer).
    work_hours: float | None = None
    restart_overhead_hours: float | None = None
    reordered: list[Reorder] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)  # per placement; None: launchable

    @property
    def chosen_placement(self) -> Placement | None:
        return None if self.chosen is None else self.placements[self.chosen]

    def rejection_summary(self) -> list[tuple[str, int]]:
        """(reason, count) over `rejected`, most common first, then alphabetical."""
        counts: dict[str, int] = {}
        for r in self.rejected:
            counts[r.reason] = counts.get(r.reason, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def rows(self) -> list[PlanRow]:
        """The plan as shown (table and JSON): placements that differ only by zone
        folded into one row, launchable rows first (see planning_rows)."""
        reasons = self.reasons or [None if e else REASON_NOT_ENABLED for e in self.enabled]
        return plan_rows(self.placements, reasons)

    def to_json(self, limit: int | None = JSON_PLACEMENT_LIMIT) -> dict[str, Any]:
        """The pinned dry-run JSON: {"placements", "chosen", "rejected"} (+ "hours", "notes",
        "placements_total", "truncated", "disabled_clouds", ...).

        Placements that differ only by zone (same cloud, region, instance type, market,
        price and alternative) are one row whose "zones" lists them all, best first.
        Rows are launchable first, each part best first; every row says whether it is
        `launchable` and, when not, the short `reason`. "chosen" indexes these rows (0,
        or null when nothing is launchable). `limit` keeps the first rows only (None:
        all); "placements_total" counts the rows before the cut.
        """
        all_rows = self.rows()
        chosen_row = next((at for at, r in enumerate(all_rows) if self.chosen in r.members), None)
        cut = len(all_rows) if limit is None else limit
        rows = []
        for r in all_rows[:cut]:
            row = placement_to_dict(self.placements[r.first], r.launchable)
            row["zones"] = r.zones
            row["launchable"] = r.launchable
            row["reason"] = r.reason
            rows.append(row)
        clouds = {p.cloud for p in self.placements}
        return {
            "placements": rows,
            "chosen": chosen_row,
            "rejected": [_rejection_to_dict(r) for r in self.rejected],
            "hours": self.hours,
            "notes": list(self.notes),
            "placements_total": len(all_rows),
            "truncated": len(all_rows) > cut,
            "disabled_clouds": {c: why for c, why in self.disabled_reasons.items() if c in clouds},
            "work_hours": self.work_hours,
            "restart_overhead_hours": self.restart_overhead_hours,
            "order_differs_from_list_price": bool(self.reordered),
            "reordered": [
                {"ahead": placement_label(r.ahead), "cheaper_by_list_price": placement_label(r.cheaper)}
                for r in self.reordered
            ],
        }

    to_dict = to_json


class UnsatisfiableTaskError(NoPlacementError):
    """No offer fits the task at all. Keeps what the ranking rejected, so `--json`
    callers still get the plan's shape (`to_json`), with the message as "error"."""

    def __init__(self, message: str, rejected: list[Rejection], hours: float | None) -> None:
        super().__init__(message)
        self.rejected = rejected
        self.hours = hours

    def to_json(self, limit: int | None = JSON_PLACEMENT_LIMIT) -> dict[str, Any]:
        """{"placements": [], "chosen": null, "rejected": [...], "hours", "notes": [],
        "error": the message} plus the keys of `Plan.to_json` (`limit` is moot here)."""
        return {
            "placements": [],
            "chosen": None,
            "rejected": [_rejection_to_dict(r) for r in self.rejected],
            "hours": self.hours,
            "notes": [],
            "error": str(self),
            "placements_total": 0,
            "truncated": False,
        }


def _rejection_to_dict(r: Rejection) -> dict[str, Any]:
    return {
        "cloud": r.cloud,
        "instance_type": r.instance_type,
        "region": r.region,
        "zone": r.zone,
        "reason": r.reason,
    }


def _derived(p: Placement) -> bool:
    """A Kubernetes placement derived from the request (no kubeconfig): plan only."""
    return p.cloud == KUBERNETES_CLOUD and not p.offer.fetched_at


def price_known(p: Placement) -> bool:
    """False for a placement whose cloud has no prices (a request-derived Kubernetes
    placement: shown as "-"); a context's live offers carry `kubernetes.pricing`."""
    return p.cloud not in UNPRICED_CLOUDS or not _derived(p)


def placement_to_dict(p: Placement, enabled: bool) -> dict[str, Any]:
    """One placement in the dry-run / cost JSON shape (prices null where unknown:
    UNPRICED_CLOUDS)."""
    if not price_known(p):
        return {**_placement_dict(p, enabled), "node_price": None, "hourly_cost": None,
                "total_cost": None, "list_price_per_hour": None, "expected_hourly_cost": None,
                "expected_cost": None}
    return _placement_dict(p, enabled)


def _finite(x: float | None) -> float | None:
    """JSON has no infinity: an expected cost that never ends is null (the note says so)."""
    return None if x is None or x == float("inf") else x


def _placement_dict(p: Placement, enabled: bool) -> dict[str, Any]:
    return {
        "cloud": p.cloud,
        "region": p.region,
        "zone": p.zone,
        "instance_type": p.instance_type,
        "accelerator": p.accelerator,
        "accelerator_count": json_number(p.accelerator_count),
        "num_nodes": p.num_nodes,
        "use_spot": p.use_spot,
        "node_price": p.node_price,
        "hourly_cost": p.hourly_cost,
        "total_cost": p.total_cost,
        "fabric": p.fabric,
        "fabric_gbps": p.fabric_gbps,
        "max_nodes": p.offer.max_nodes,
        "vcpus": p.offer.vcpus,
        "memory_gib": p.offer.memory_gib,
        "preference": p.candidate.preference,
        "enabled": enabled,
        "list_price_per_hour": p.hourly_cost,
        "expected_hourly_cost": _finite(p.ranking_cost),
        "expected_cost": _finite(p.expected_cost if p.expected_cost is not None else p.total_cost),
        "interruption_rate_per_hour": p.interruption_rate_per_hour,
        "interruption_source": p.interruption_source,
    }


def plan(
    task: Task,
    blocked: Blocked = Blocked(),
    hours: float | None = None,
    observed: Mapping[Place, InterruptionRate] | None = None,
    *,
    verify_credentials: bool = True,
) -> Plan:
    """Rank every catalog offer for `task`. Blocking only on local reads, and on the
    credential checks below.

    Which clouds are enabled: with `verify_credentials` (launches, the managed-jobs
    controller) each cloud asked is proven by its own `check()` (one token or identity
    call per cloud with credentials, cached per process); without (dry runs, cost
    queries: no network) credentials configured in env/files, and the cloud's SDK
    installed, count as enabled (launcher.clouds.presence), and no provisioner module
    is imported. Only the clouds that have placements are asked, plus, for a task
    that names no cloud, enough others to know whether `local` takes part.

    A task with spot candidates is ranked on expected cost (launcher.optimizer's
    SpotCostModel): interruption rates from launcher.catalog.interruption, plus
    `observed` (what a managed job's recovery saw: recent preemptions per zone/region);
    the restart overhead is the task's `job_recovery` restart overhead when it gives one,
    else DEFAULT_RESTART_OVERHEAD_HOURS; the work is `hours`, else the task's
    `job_recovery` duration, else DEFAULT_WORK_HOURS. A note names the placements whose
    order differs from the list-price order.

    Accelerator names are canonicalized against the catalog first (TaskValidationError
    with suggestions for unknown names). The `local` cloud takes part only when the task
    names it or when no other catalog cloud is enabled here (a note says so).
    Raises NoPlacementError, explained per constraint, when no offer fits at all.
    """
    from launcher.catalog import query
    from launcher.task.model import canonicalize_accelerators

    if hours is not None and not hours > 0:
        raise InvalidQueryError(f"--hours must be a positive number of hours, got {hours:g}.")
    from launcher.catalog.aliases import user_aliases

    task = canonicalize_accelerators(task, query.accelerator_names(), user_aliases())
    task = _resolve_families(query, task)
    offers = _offers_for(query, task.candidates())
    # region/zone spelled as the catalog does (or an error naming the field); AWS zone
    # names add their region's offers under that name (see catalog/locations.py)
    task, offers = resolve_task_locations(task, offers, _catalog_clouds(query))
    cands = task.candidates()

    status_cache: dict[str, CredentialStatus] = {}

    def status(cloud: str) -> CredentialStatus:
        st = status_cache.get(cloud)
        if st is None:
            # a `config:` key this cloud cannot honour (task/config_section.py) decides first
            refused = task.config.launch_refusal(cloud) if task.config else None
            if refused:
                from launcher.clouds.status import CredentialStatus as Status

                st = status_cache[cloud] = Status(False, refused)
            elif verify_credentials:
                st = status_cache[cloud] = _credential_status(cloud)
            else:
                st = status_cache[cloud] = _credential_presence(cloud)
        return st

    notes: list[str] = list(task.notes)
    if task.num_nodes == 1 and any(
        c.network is not None and (c.network.fabric != "any" or c.network.min_gbps is not None)
        for c in cands
    ):
        notes.append(
            "The network requirement is moot on a one-node task (it concerns traffic "
            "between nodes), so it does not narrow the placements."
        )
    names_local = any(c.cloud == LOCAL_CLOUD for c in cands)
    include_local = False
    if not names_local and any(c.cloud is None for c in cands):
        # the clouds with offers for this task first: their answer is needed anyway,
        # and one enabled cloud settles it (any() stops there)
        with_offers = sorted({o.cloud for o in offers} - {LOCAL_CLOUD})
        others = with_offers + sorted(_implemented_catalog_clouds(query) - set(with_offers)
                                      - {LOCAL_CLOUD})
        if not any(status(c).enabled for c in others):
            include_local = True

    spot = spot_model(task, hours, observed) if any(c.use_spot for c in cands) else None
    ranking = rank(task, offers, blocked, hours, include_local=include_local, spot=spot)
    if include_local and any(p.cloud == LOCAL_CLOUD for p in ranking.placements):
        # only when local actually fits: an instance type or GPU it lacks keeps it out
        notes.append("The local cloud is a candidate because no other cloud is enabled here.")
    if not ranking.placements:
        why = explain_no_placement(task.num_nodes, cands, offers, blocked, include_local)
        if any(c.cloud == KUBERNETES_CLOUD for c in cands):
            from launcher.provisioning.offers import kubernetes_largest_nodes

            largest = kubernetes_largest_nodes({c.region for c in cands if c.cloud == KUBERNETES_CLOUD})
            why = f"{why} {largest}" if largest else why
        raise UnsatisfiableTaskError(
            why,
            ranking.rejected,
            hours,
        )

    notes.extend(
        _unplaceable_alternatives(task.num_nodes, cands, offers, ranking, blocked, include_local)
    )
    from launcher.clouds.gcp.limits import GPUDIRECT_NOT_LAUNCHABLE, needs_gpudirect
    from launcher.clouds.registry import IMPLEMENTED

    by_cloud: dict[str, str | None] = {}

    def cloud_reason_of(cloud: str) -> str | None:
        if cloud not in by_cloud:  # once per cloud: a CPU task has thousands of placements
            by_cloud[cloud] = cloud_reason(
                cloud,
                enabled=status(cloud).enabled,
                refused=bool(task.config and task.config.launch_refusal(cloud)),
                implemented=cloud in IMPLEMENTED,
                kubernetes=cloud == KUBERNETES_CLOUD and not status(cloud).enabled,
            )
        return by_cloud[cloud]

    reasons = launch_reasons(
        ranking.placements,
        cloud_reason_of,
        tpu=lambda p: is_tpu(p.accelerator),
        gpudirect=lambda p: needs_gpudirect(p.cloud, p.instance_type, p.num_nodes),
    )
    enabled = [r is None for r in reasons]
    chosen = next((i for i, e in enumerate(enabled) if e), None)
    disabled = {c: s.reason for c, s in sorted(status_cache.items()) if not s.enabled}
    if any(is_tpu(p.accelerator) for p in ranking.placements):
        notes.append(TPU_NOT_LAUNCHABLE)
    if any(_derived(p) for p in ranking.placements):
        notes.append(KUBERNETES_PLAN_ONLY)
    if any(needs_gpudirect(p.cloud, p.instance_type, p.num_nodes) for p in ranking.placements):
        notes.append(GPUDIRECT_NOT_LAUNCHABLE)
    if chosen is None:
        notes.append(NOTHING_LAUNCHABLE)
    reordered: list[Reorder] = []
    if spot is not None:
        from launcher.optimizer.ranking import reordered_by_expected_cost

        reordered = reordered_by_expected_cost(ranking.placements)
        if reordered:
            notes.append(reorder_note(reordered))
        if any(p.ranking_cost == float("inf") for p in ranking.placements):
            notes.append(
                "Some spot placements never finish in expectation (interruption rate x "
                "restart overhead >= 1): their expected cost is shown as 'never' (null in JSON)."
            )
    return Plan(task, ranking.placements, enabled, chosen, ranking.rejected, hours, notes, disabled,
                spot.work_hours if spot else None,
                spot.restart_overhead_hours if spot else None, reordered, reasons)


def _resolve_families(query: Any, task: Task) -> Task:
    """SkyPilot's old `Inferentia:N` for an inf2 size, read as `Inferentia2:N` (see
    launcher.task.families); reads the catalog only when the task names such a chip."""
    from launcher.task.families import family_names, resolve_family_counts

    names = family_names(task)
    if not names:
        return task
    counts: dict[str, set[float]] = {}
    for o in query.offers(accelerators=sorted(names)):
        if o.accelerator is not None:
            counts.setdefault(o.accelerator, set()).add(o.accelerator_count)
    return resolve_family_counts(task, lambda name: counts.get(name, set()))


_MAX_ALTERNATIVE_NOTES = 5


def _unplaceable_alternatives(
    num_nodes: int,
    cands: Sequence[ResourceCandidate],
    offers: Sequence[Offer],
    ranking: Ranking,
    blocked: Blocked,
    include_local: bool,
) -> list[str]:
    """A note per alternative (any_of / ordered entry, accelerator set member) that no
    offer can serve while others can, saying why, so none vanishes silently. An
    alternative whose offers were all taken by a better-ranked twin is not unplaceable."""
    if len(cands) < 2:
        return []
    placed = {p.candidate for p in ranking.placements}
    notes: list[str] = []
    seen: set[str] = set()
    for c in sorted(cands, key=lambda c: c.preference):
        if c in placed:
            continue
        if any(not candidate_failures(o, c, num_nodes, blocked, include_local, True) for o in offers):
            continue
        desc = describe_candidate(c, num_nodes)
        if desc in seen:
            continue
        seen.add(desc)
        if len(notes) == _MAX_ALTERNATIVE_NOTES:
            notes.append("(more alternatives cannot be placed; `--json` lists every rejection)")
            break
        why = explain_candidate(c, num_nodes, offers, blocked, include_local)
        notes.append(f"Alternative '{desc}' cannot be placed: {why}.")
    return notes


def cost(task: Task, hours: float | None = None) -> Plan:
    """`plan` with total costs for `hours` (None: hourly costs only), credentials found
    counting as enabled (no network). Same errors as `plan`."""
    return plan(task, hours=hours, verify_credentials=False)


def _credential_status(cloud: str) -> CredentialStatus:
    """The cloud's proven status (registry.credential_status: its `check()`)."""
    return _status(cloud, verify=True)


def _credential_presence(cloud: str) -> CredentialStatus:
    """Credentials configured and SDK installed (no network, no provisioner import)."""
    return _status(cloud, verify=False)


def _status(cloud: str, *, verify: bool) -> CredentialStatus:
    from launcher.clouds.registry import IMPLEMENTED, credential_status
    from launcher.clouds.status import CredentialStatus

    if cloud == KUBERNETES_CLOUD:
        from launcher.provisioning.offers import KUBERNETES_NOT_LAUNCHABLE, kubernetes_configured

        if not kubernetes_configured():
            return CredentialStatus(False, KUBERNETES_NOT_LAUNCHABLE)
    if cloud not in IMPLEMENTED:  # skip the registry import chain for catalog-only clouds
        return CredentialStatus(False, NO_PROVISIONER)
    return credential_status(cloud, verify=verify)


def _implemented_catalog_clouds(query: Any) -> set[str]:
    from launcher.clouds.registry import IMPLEMENTED

    return set(IMPLEMENTED) & set(_catalog_clouds(query))


def enabled_clouds(clouds: Iterable[str] | None = None) -> dict[str, CredentialStatus]:
    """Credential status per cloud (default: every cloud with an implementation). Never raises."""
    from launcher.clouds.registry import IMPLEMENTED

    names = list(IMPLEMENTED) if clouds is None else list(clouds)
    return {name: _credential_status(name) for name in names}


def _offers_for(query: Any, cands: Sequence[ResourceCandidate]) -> list[Offer]:
    """The catalog rows any candidate could use, read through the catalog's index.

    GPU candidates fetch their accelerators' rows only; CPU-only or instance-type
    candidates need the rows without accelerators (or all rows), narrowed to the
    candidates' clouds when every such candidate names one.
    """
    from launcher.provisioning.offers import (
        SLURM_CLOUD,
        SSH_CLOUD,
        kubernetes_cluster_offers,
        kubernetes_offers,
        kubernetes_ranked_by_default,
        pool_offers,
        slurm_cluster_offers,
    )

    accs = sorted({c.accelerator for c in cands if c.accelerator is not None})
    # kubernetes has no catalog rows: its plan-only offers come from the task itself
    wide = [c for c in cands if c.accelerator is None and c.cloud != KUBERNETES_CLOUD]
    live = pool_offers()
    if any(c.cloud in (None, SLURM_CLOUD) for c in cands):  # asks the clusters: only then
        live += slurm_cluster_offers()
    if any(c.cloud is None for c in cands) and kubernetes_ranked_by_default():
        live += kubernetes_cluster_offers()  # your listed contexts rank beside the clouds
    out: list[Offer] = list(query.offers(accelerators=accs, live=live)) if accs else []
    if wide:
        clouds = (
            None
            if any(c.cloud is None for c in wide)
            else sorted({c.cloud for c in wide if c.cloud})
        )
        need_gpu_rows = any(c.instance_type is not None for c in wide)
        seen = set(accs)
        for o in query.offers(clouds=clouds, live=live):
            if o.cloud in (SSH_CLOUD, SLURM_CLOUD) and o.accelerator is not None and o.accelerator in seen:
                continue  # already read for a GPU candidate
            if (o.accelerator is None or o.cloud == SSH_CLOUD
                    or (need_gpu_rows and o.accelerator not in seen)):
                # a host of the user's own pool serves a CPU-only task too
                out.append(o)
    out.extend(kubernetes_offers(cands))
    return list(dict.fromkeys(out))  # a context's offer read for two candidates: once


# ---------------------------------------------------------------- explaining "nothing fits"
