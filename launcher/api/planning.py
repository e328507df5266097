"""Planning API: where a task can run and what it costs, over every catalog cloud.

`plan`, `cost`, `enabled_clouds` come from `launcher.provisioning.planning` (the
failover loop and the managed-jobs controller plan there too); `gpus`,
`gpu_summary`, `price_dates`, `catalog_status` from gpu_listing.py (imported lazily:
a dry run need not load them). Nothing here prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from launcher.provisioning.planning import (
    JSON_PLACEMENT_LIMIT,
    NO_PROVISIONER,
    NOTHING_LAUNCHABLE,
    InvalidQueryError,
    Plan,
    UnsatisfiableTaskError,
    cost,
    describe_candidate,
    enabled_clouds,
    explain_no_placement,
    json_number,
    placement_to_dict,
    plan,
    price_known,
)

if TYPE_CHECKING:
    from launcher.api.gpu_listing import (
        GpuListing,
        GpuRow,
        GpuSummaryRow,
        PriceDates,
        catalog_age_days,
        catalog_status,
        gpu_summary,
        gpus,
        parse_accelerator_spec,
        price_dates,
    )

__all__ = [
    "JSON_PLACEMENT_LIMIT",
    "NOTHING_LAUNCHABLE",
    "NO_PROVISIONER",
    "GpuListing",
    "GpuRow",
    "GpuSummaryRow",
    "InvalidQueryError",
    "Plan",
    "PriceDates",
    "UnsatisfiableTaskError",
    "catalog_age_days",
    "catalog_status",
    "cost",
    "describe_candidate",
    "enabled_clouds",
    "explain_no_placement",
    "gpu_summary",
    "gpus",
    "json_number",
    "parse_accelerator_spec",
    "placement_to_dict",
    "price_known",
    "plan",
    "price_dates",
]

_GPU_LISTING_NAMES = frozenset(
    {
        "GpuListing", "GpuRow", "GpuSummaryRow", "PriceDates", "catalog_age_days",
        "catalog_status", "gpu_summary", "gpus", "parse_accelerator_spec", "price_dates",
    }
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """The gpu_listing.py names, re-exported lazily (a dry run need not import them)."""
    if name in _GPU_LISTING_NAMES:
        from launcher.api import gpu_listing

        return getattr(gpu_listing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
