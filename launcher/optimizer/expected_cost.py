"""The expected-cost model of spot placements (used by launcher.optimizer; pure).

It knows offers and rates, never placements: the optimizer imports it, not the reverse
(`reordered_by_expected_cost`, which compares placements, lives in the optimizer).

See launcher.optimizer's module docstring ("Expected cost") and docs/spot.md: a gang of
n nodes is interrupted at lambda = n x a node's rate; each interruption costs R hours
of paid time without progress; T = W / (1 - lambda x R).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from launcher.catalog.interruption import InterruptionRate
from launcher.catalog.offer import Offer

# Restart overhead when the task gives none: 10 min to provision and set up again,
# plus half of a 30-minute checkpoint interval of lost work (docs/spot.md).
DEFAULT_RESTART_OVERHEAD_HOURS = 10 / 60 + 0.5 * (30 / 60)
# Work assumed by dry runs that give no --hours (and no job_recovery duration): one hour,
# so `expected_cost` reads as "$ per hour of work".
DEFAULT_WORK_HOURS = 1.0

Place = tuple[str, str, "str | None"]  # (cloud, region, zone); zone None = the whole region


class RateSource(Protocol):
    """Interruption rates by offer (launcher.catalog.interruption.InterruptionTable)."""

    def rate(self, cloud: str, region: str, instance_type: str) -> InterruptionRate: ...


@dataclass(frozen=True)
class SpotCostModel:
    """How the optimizer costs spot placements (see the module docstring).

    `rates`: a node's interruption rate per offer (data: catalog/interruption.py).
    `observed`: extra rate of a placement (the whole gang: one preemption is one event
    however many nodes it has) that recovery saw (recent preemptions), keyed by
    (cloud, region, zone) for a zone or (cloud, region, None) for a whole region; both
    apply to an offer in that zone. `restart_overhead_hours`: R. `work_hours`: W when
    `rank` gets no `hours`."""

    rates: RateSource
    restart_overhead_hours: float = DEFAULT_RESTART_OVERHEAD_HOURS
    work_hours: float = DEFAULT_WORK_HOURS
    observed: Mapping[Place, InterruptionRate] = field(default_factory=dict)

    def node_rate(self, o: Offer, num_nodes: int = 1) -> InterruptionRate:
        """The rate one node of `o` is interrupted at in a gang of `num_nodes`, with its
        source: the data's rate plus 1/num_nodes of what recovery observed in its zone
        and in its region (so the gang's rate, num_nodes x this, adds `observed` once)."""
        base = self.rates.rate(o.cloud, o.region, o.instance_type)
        if not self.observed:
            return base
        keys: tuple[Place, ...] = (
            ((o.cloud, o.region, o.zone), (o.cloud, o.region, None))
            if o.zone is not None else ((o.cloud, o.region, None),)
        )
        seen = [r for k in keys if (r := self.observed.get(k)) is not None]
        if not seen:
            return base
        return InterruptionRate(
            base.per_hour + sum(r.per_hour for r in seen) / max(1, num_nodes),
            "; ".join([base.source, *(r.source for r in seen)]),
        )


def expected_cost_factor(gang_rate_per_hour: float, restart_overhead_hours: float) -> float:
    """Expected paid hours per hour of work: 1 / (1 - lambda x R) (see the module
    docstring); math.inf when lambda x R >= 1."""
    load = gang_rate_per_hour * restart_overhead_hours
    return math.inf if load >= 1.0 else 1.0 / (1.0 - load)
