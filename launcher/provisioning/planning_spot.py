"""Planning helpers for spot tasks: the expected-cost model a plan ranks with, and the
words for a ranking whose order differs from the list-price order (launcher.optimizer.expected_cost;
docs/spot.md "Expected cost"). Used by launcher.provisioning.planning; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from launcher.catalog.money import format_money
from launcher.optimizer.ranking import Place, Placement, Reorder, SpotCostModel

if TYPE_CHECKING:
    from launcher.catalog.interruption import InterruptionRate
    from launcher.task.model import Task


def placement_label(p: Placement) -> str:
    """ "aws us-east-1/us-east-1a p3.2xlarge spot": a placement in one phrase."""
    where = p.region + (f"/{p.zone}" if p.zone else "")
    return f"{p.cloud} {where} {p.instance_type} {'spot' if p.use_spot else 'on-demand'}"


def spot_model(
    task: Task, hours: float | None, observed: Mapping[Place, InterruptionRate] | None
) -> SpotCostModel:
    """The expected-cost model for `task`: rates from launcher.catalog.interruption plus
    `observed`; R = the task's job_recovery restart overhead, else the default; W =
    `hours`, else the task's job_recovery duration, else DEFAULT_WORK_HOURS."""
    from launcher.catalog.interruption import load_table
    from launcher.optimizer.ranking import DEFAULT_RESTART_OVERHEAD_HOURS, DEFAULT_WORK_HOURS

    recovery = getattr(task, "job_recovery", None)
    minutes = getattr(recovery, "restart_overhead_minutes", None)
    duration = getattr(recovery, "duration_hours", None)
    work = hours if hours is not None else (duration if duration else DEFAULT_WORK_HOURS)
    return SpotCostModel(
        rates=load_table(),
        restart_overhead_hours=(minutes / 60.0 if minutes is not None
                                else DEFAULT_RESTART_OVERHEAD_HOURS),
        work_hours=float(work),
        observed=dict(observed or {}),
    )


def _money_or_never(x: float) -> str:
    return "never" if x == float("inf") else f"{format_money(x)}/h"


def reorder_note(reordered: Sequence[Reorder]) -> str:
    """One line: which placements expected cost ranks ahead of cheaper-by-list ones."""
    parts = []
    for r in reordered:
        a, b = r.ahead, r.cheaper
        parts.append(
            f"{placement_label(a)} (list {format_money(a.hourly_cost)}/h, expected "
            f"{_money_or_never(a.ranking_cost)}) ahead of {placement_label(b)} (list "
            f"{format_money(b.hourly_cost)}/h, expected {_money_or_never(b.ranking_cost)})"
        )
    return "Expected cost changes the list-price order: " + "; ".join(parts) + "."
