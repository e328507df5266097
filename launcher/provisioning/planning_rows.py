"""Which placements of a plan a launch can pick, and the rows a plan is shown as.

A placement is *launchable* when a `launcher launch` here could pick it: its cloud is
enabled (a provisioner in this version, credentials that pass the check, no `config:`
key of the task refusing it) and launcher has a launch path for that placement (not a
TPU VM, not a multi-node GCP GPUDirect gang, not Kubernetes). Every other placement
carries a short reason, the same words in the human table and in `--json`.

`plan_rows` folds placements that differ only by zone into one row (its zones listed)
and orders the rows launchable first, each part in ranking order, so the top of a dry
run is what the user can actually get. Used by launcher.provisioning.planning (the
JSON) and the CLI's table; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.optimizer.ranking import Placement

# Why a placement is not launchable. What launcher cannot build decides before a cloud
# that is merely not enabled (enabling that cloud would not help).
REASON_TPU = "planned only (TPU VM)"
REASON_GPUDIRECT = "planned only (GPUDirect)"
REASON_KUBERNETES = "planned only (Kubernetes)"
REASON_NO_PROVISIONER = "no provisioner"
REASON_CONFIG = "refused by task config"
REASON_NOT_ENABLED = "cloud not enabled"


def cloud_reason(cloud: str, *, enabled: bool, refused: bool, implemented: bool,
                 kubernetes: bool) -> str | None:
    """The short reason a placement on `cloud` is not launchable for the cloud's sake
    (None: the cloud is fine)."""
    if kubernetes:
        return REASON_KUBERNETES
    if not implemented:
        return REASON_NO_PROVISIONER
    if refused:
        return REASON_CONFIG
    return None if enabled else REASON_NOT_ENABLED


def launch_reasons(
    placements: Sequence[Placement],
    cloud_reason_of: Callable[[str], str | None],
    tpu: Callable[[Placement], bool],
    gpudirect: Callable[[Placement], bool],
) -> list[str | None]:
    """Per placement: None when launchable, else the short reason (placement limits
    first, then the cloud's)."""
    out: list[str | None] = []
    for p in placements:
        if tpu(p):
            out.append(REASON_TPU)
        elif gpudirect(p):
            out.append(REASON_GPUDIRECT)
        else:
            out.append(cloud_reason_of(p.cloud))
    return out


@dataclass
class PlanRow:
    """One row of a plan as shown: the placements `members` (indexes into the plan's
    placements, best first) that differ only by zone; `zones` theirs, best first."""

    members: list[int]
    zones: list[str] = field(default_factory=list)
    reason: str | None = None  # None: launchable

    @property
    def first(self) -> int:
        return self.members[0]

    @property
    def launchable(self) -> bool:
        return self.reason is None


def row_key(p: Placement, reason: str | None) -> tuple[object, ...]:
    """What placements of one row share: everything but the zone."""
    return (
        p.cloud, p.region, p.instance_type, p.use_spot, p.node_price, p.num_nodes,
        p.candidate.preference, p.accelerator, p.accelerator_count, p.fabric,
        p.expected_hourly_cost, reason,
    )  # fmt: skip


def plan_rows(placements: Sequence[Placement], reasons: Sequence[str | None]) -> list[PlanRow]:
    """The plan's rows: placements folded by `row_key`, launchable rows first, each
    part in the order of its best placement."""
    rows: list[PlanRow] = []
    at: dict[tuple[object, ...], PlanRow] = {}
    for index, (p, reason) in enumerate(zip(placements, reasons, strict=True)):
        key = row_key(p, reason)
        row = at.get(key)
        if row is None:
            row = at[key] = PlanRow([], reason=reason)
            rows.append(row)
        row.members.append(index)
        if p.zone is not None:
            row.zones.append(p.zone)
    return [r for r in rows if r.launchable] + [r for r in rows if not r.launchable]
