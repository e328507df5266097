"""Names and tags of what launcher creates for a cluster on Azure.

Everything of a cluster lives in ONE resource group per attempt location,
`launcher-<cluster>-<location>`, tagged `launcher-cluster=<cluster>` (how `down`, `query`
and the orphan scan find it; deleting the group deletes everything in it). Inside:
`<cluster>-nsg`, `<cluster>-vnet` (subnet `default`), `<cluster>-ppg` (InfiniBand gangs),
and per rank r: `<cluster>-<r>` (VM), `<cluster>-<r>-nic`, `<cluster>-<r>-ip`.
"""

from __future__ import annotations

import getpass

CLUSTER_TAG = "launcher-cluster"
RANK_TAG = "launcher-rank"
VERSION_TAG = "launcher-version"
USER_TAG = "launcher-user"
SUBNET = "default"


def resource_group(cluster: str, location: str) -> str:
    return f"launcher-{cluster}-{location}"


def vm(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}"


def nic(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}-nic"


def public_ip(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}-ip"


def vnet(cluster: str) -> str:
    return f"{cluster}-vnet"


def nsg(cluster: str) -> str:
    return f"{cluster}-nsg"


def ppg(cluster: str) -> str:
    return f"{cluster}-ppg"


def cluster_tags(cluster: str) -> dict[str, str]:
    """Tags of every resource of `cluster` (VMs get RANK_TAG on top)."""
    from launcher import __version__

    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (containers)
        user = "unknown"
    return {CLUSTER_TAG: cluster, VERSION_TAG: __version__, USER_TAG: user}


def rank_of(vm_name: str, cluster: str) -> int | None:
    tail = vm_name[len(cluster) + 1:] if vm_name.startswith(cluster + "-") else ""
    return int(tail) if tail.isdigit() else None
