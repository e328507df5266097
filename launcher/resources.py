"""Resources: what a task asks to run on.

CONTRACT (shared with the optimizer; do not change field names or meaning):
`ResourceCandidate` is one fully expanded alternative of a task's resources.
`Task.candidates()` returns the list of them: one per (any_of entry x
accelerator alternative), with `preference` giving the order for `ordered`
lists / accelerator lists (0 = most preferred); unordered sets share one
preference value, so only price decides between them.
"""

from __future__ import annotations

from dataclasses import dataclass

# What `resources.network.fabric` may ask for. `rdma` = any of infiniband/efa/roce.
REQUESTABLE_FABRICS = ("infiniband", "efa", "roce", "rdma", "any")


@dataclass(frozen=True, slots=True)
class NetworkRequest:
    fabric: str = "any"  # one of REQUESTABLE_FABRICS
    min_gbps: float | None = None  # minimum inter-node bandwidth per node


@dataclass(frozen=True, slots=True)
class ResourceCandidate:
    accelerator: str | None  # canonical catalog name; None = no accelerator asked for
    accelerator_count: float  # per node; 0 when accelerator is None
    cpus: float | None = None  # vCPUs per node
    cpus_at_least: bool = True  # "8+" -> True, "8" -> False (exactly 8)
    memory_gib: float | None = None  # host memory per node
    memory_at_least: bool = True
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    use_spot: bool = False
    max_hourly_cost: float | None = None  # cap on the whole placement's $/h (all nodes)
    network: NetworkRequest | None = None
    preference: int = 0
    # Carried through to provisioning; the optimizer ignores them.
    disk_size_gb: int | None = None
    image_id: str | None = None
    ports: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
