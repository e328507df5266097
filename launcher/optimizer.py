"""The optimizer: rank catalog offers into placements for a task. Pure: no I/O, no globals.

CONTRACT (shared): `Placement`, `Rejection`, `Ranking`, `Blocked` and
`rank(task, offers, blocked=Blocked(), hours=None) -> Ranking`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from launcher.catalog.offer import Offer
from launcher.resources import ResourceCandidate


class TaskLike(Protocol):
    """What the optimizer needs of a task (launcher.task.Task satisfies it)."""

    @property
    def num_nodes(self) -> int: ...

    def candidates(self) -> list[ResourceCandidate]: ...


@dataclass(frozen=True)
class Blocked:
    """Places failover has ruled out. Zones/regions are qualified by cloud."""

    clouds: frozenset[str] = frozenset()
    regions: frozenset[tuple[str, str]] = frozenset()  # (cloud, region)
    zones: frozenset[tuple[str, str, str]] = frozenset()  # (cloud, region, zone)

    def with_cloud(self, cloud: str) -> Blocked:
        return Blocked(self.clouds | {cloud}, self.regions, self.zones)

    def with_region(self, cloud: str, region: str) -> Blocked:
        return Blocked(self.clouds, self.regions | {(cloud, region)}, self.zones)

    def with_zone(self, cloud: str, region: str, zone: str) -> Blocked:
        return Blocked(self.clouds, self.regions, self.zones | {(cloud, region, zone)})


@dataclass(frozen=True)
class Placement:
    """One way to run the task: `num_nodes` nodes of one offer, all in one zone/region."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str | None
    accelerator_count: float  # per node
    num_nodes: int
    use_spot: bool
    node_price: float  # $/h of one node in the chosen market
    hourly_cost: float  # node_price x num_nodes
    total_cost: float | None  # hourly_cost x hours when hours were given
    fabric: str | None
    fabric_gbps: float | None
    offer: Offer = field(repr=False, compare=False)
    candidate: ResourceCandidate = field(repr=False, compare=False)


@dataclass(frozen=True)
class Rejection:
    cloud: str
    instance_type: str
    region: str
    zone: str | None
    reason: str  # the FIRST reason this offer could not serve any candidate


@dataclass(frozen=True)
class Ranking:
    placements: list[Placement]  # best first: by candidate preference, then cost, then stable keys
    rejected: list[Rejection]


def rank(
    task: TaskLike,
    offers: Iterable[Offer],
    blocked: Blocked = Blocked(),
    hours: float | None = None,
) -> Ranking:
    """Rank `offers` for `task`. Deterministic; never raises for an unsatisfiable task
    (an empty `placements` with reasons in `rejected` says why)."""
    raise NotImplementedError  # implemented by the optimizer work (issue 2)


def _unused(_: Sequence[Offer]) -> None:  # placeholder to keep imports used until rank lands
    return None
