"""What the `gcp` provisioner cannot build yet, as facts the planner can read without
importing any Google SDK (planning marks such placements not launchable, so a launch
fails over to another placement instead of stopping at an InvalidRequestError)."""

from __future__ import annotations

# Multi-node gangs of these machine families need GPUDirect networking (TCPX / TCPXO or
# RDMA NICs on their own VPCs), which launcher does not build yet: they are refused
# rather than joined over plain Ethernet.
GPUDIRECT_PREFIXES = ("a3-", "a4-", "a4x-")

GPUDIRECT_NOT_LAUNCHABLE = (
    "Multi-node GCP gangs of a3/a4 machine types are planned and priced only: they need "
    "GPUDirect networking (TCPX/TCPXO or RDMA NICs on their own VPCs), which launcher "
    "does not set up on GCP yet, so a launch never picks them (it would not join the "
    "nodes over plain Ethernet)."
)


def needs_gpudirect(cloud: str, instance_type: str, num_nodes: int) -> bool:
    """Whether this placement is a multi-node GPUDirect gang on GCP (see above)."""
    return cloud == "gcp" and num_nodes > 1 and instance_type.startswith(GPUDIRECT_PREFIXES)
