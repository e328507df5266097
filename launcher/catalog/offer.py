"""The catalog's row type.

One `Offer` per (cloud, region, zone, instance type). Prices are USD per
instance-hour. `None` always means "unknown / not offered", never zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# The fabric names (a row's `fabric`; `None` = nobody has told us) are the task's
# vocabulary (launcher.task.resources), which config.yaml's ssh pools use too.
from launcher.task.resources import BEST_FABRICS as BEST_FABRICS
from launcher.task.resources import FABRICS as FABRICS
from launcher.task.resources import RDMA_FABRICS as RDMA_FABRICS

# The cloud whose nodes are processes on this machine (its offers are computed live).
LOCAL_CLOUD = "local"
# Clouds whose offers are whole machines of the user's own (SSH node pools): a task that
# asks for no accelerator may run on any such host with enough CPUs and memory, GPU or not.
WHOLE_HOST_CLOUDS = frozenset({"ssh"})
# Clouds whose nodes take the vCPUs and memory a task asks for, up to the row's (the
# local cloud's nodes are processes sharing this machine): an exact request (`cpus: 1`,
# `memory: 8`) is served by any row at least that large, like an at-least one.
SIZED_TO_REQUEST_CLOUDS = frozenset({LOCAL_CLOUD})
# The cloud of a user's own Kubernetes cluster: no catalog rows (the cluster's price is
# the user's business). Its plan-only offers are derived from the task that names it.
KUBERNETES_CLOUD = "kubernetes"
# Clouds whose offers serve only a candidate that names the cloud (never a task that
# leaves the cloud out), and whose prices are unknown (0 in the row, "-" when shown).
NAMED_ONLY_CLOUDS = frozenset({KUBERNETES_CLOUD})
UNPRICED_CLOUDS = frozenset({KUBERNETES_CLOUD})


def request_derived(o: Offer) -> bool:
    """An offer of NAMED_ONLY_CLOUDS derived from the request itself (no `fetched_at`:
    no source was read), as opposed to one read live from the user's cluster (a
    Kubernetes context's nodes), which ranks beside every other cloud's."""
    return o.cloud in NAMED_ONLY_CLOUDS and not o.fetched_at


def fabric_satisfies(have: str | None, wanted: str) -> bool:
    """Does a row with fabric `have` meet a request for `wanted` (a requestable fabric:
    a fabric name, `rdma`, `best` or `any`)? An unknown fabric meets only `any`."""
    if wanted == "any":
        return True
    if have is None:
        return False
    if wanted == "rdma":
        return have in RDMA_FABRICS
    if wanted == "best":
        return have in BEST_FABRICS
    return have == wanted


@dataclass(frozen=True, slots=True)
class Offer:
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str | None
    accelerator_count: float
    accelerator_memory_gib: float | None
    vcpus: float | None
    memory_gib: float | None
    price: float | None  # on-demand $/h; None = no on-demand offer listed
    spot_price: float | None  # spot $/h; None = no spot offer listed
    fabric: str | None  # one of FABRICS, or None when no source says
    fabric_gbps: float | None
    nvlink: bool | None
    max_nodes: int | None  # nodes one cluster may have; None = no known limit
    arch: str  # "x86_64" or "arm64"
    source: str  # where the row came from (file or API)
    fetched_at: str  # ISO-8601 date/time the source was read

    def hourly_price(self, use_spot: bool) -> float | None:
        """Price of one node per hour in the given market, or None if not offered."""
        return self.spot_price if use_spot else self.price

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
