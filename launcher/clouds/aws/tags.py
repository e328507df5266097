"""The tags launcher puts on everything it creates for a cluster on AWS.

- `launcher-cluster`: the cluster name (how terminate, query and orphans find things);
- `launcher-rank`: the node's rank (instances; set right after creation in launch-index
  order - one RunInstances call cannot give instances different tags);
- `launcher-version`, `launcher-user`: who created it; `Name`: `<cluster>-<rank>` for
  instances, the cluster name elsewhere.
"""

from __future__ import annotations

import getpass
from typing import Any

CLUSTER_TAG = "launcher-cluster"
RANK_TAG = "launcher-rank"
VERSION_TAG = "launcher-version"
USER_TAG = "launcher-user"


def cluster_tags(cluster: str) -> dict[str, str]:
    """The tags of every resource of `cluster` (instances get RANK_TAG on top)."""
    from launcher import __version__

    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (containers)
        user = "unknown"
    return {CLUSTER_TAG: cluster, VERSION_TAG: __version__, USER_TAG: user, "Name": cluster}


def tag_specification(resource_type: str, tags: dict[str, str]) -> dict[str, Any]:
    """One EC2 `TagSpecifications` entry."""
    return {"ResourceType": resource_type,
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}


def tag_value(resource: dict[str, Any], key: str) -> str | None:
    """A tag's value in an EC2 description (None when absent)."""
    for tag in resource.get("Tags") or []:
        if tag.get("Key") == key:
            return str(tag.get("Value"))
    return None


def cluster_filter(cluster: str) -> dict[str, Any]:
    return {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}
