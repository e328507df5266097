"""Cluster records under `$LAUNCHER_HOME/azure/clusters/<cluster>.json` (dir 0700, files 0600).

A record holds the resource groups a cluster may own (`{"groups": {name: location}}`),
written BEFORE the group is created, and its current gang (`"gang"`: location, zone,
VM names in rank order, spot or not). `terminate(name)` deletes every recorded group (and,
with no record, finds groups by tag), then drops the record: a client killed between
the create call and the state DB write leaves nothing `launcher down` cannot find.
Writes are atomic (temp file + rename) under an fcntl lock.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.record_store import ClusterRecords, read_json

_STORE = ClusterRecords("azure", private_parent=True)
_path = _STORE.path
_read = read_json
_update = _STORE.update


def add_group(cluster: str, group: str, location: str) -> None:
    """Record (before creating it) a resource group of `cluster`. Idempotent."""
    with _update(cluster) as data:
        data.setdefault("groups", {})[group] = location


def drop_group(cluster: str, group: str) -> None:
    with _update(cluster) as data:
        (data.get("groups") or {}).pop(group, None)
        if (data.get("gang") or {}).get("group") == group:
            data.pop("gang", None)


def groups(cluster: str) -> dict[str, str] | None:
    """group -> location recorded for `cluster`; None when there is no record at all."""
    path = _path(cluster)
    if not path.exists():
        return None
    found = _read(path).get("groups")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def set_gang(cluster: str, group: str, location: str, zone: str | None, vms: list[str],
             spot: bool) -> None:
    """Record the cluster's current gang (VM names in rank order)."""
    with _update(cluster) as data:
        data["gang"] = {"group": group, "location": location, "zone": zone, "vms": vms,
                        "spot": spot}


def gang(cluster: str) -> dict[str, Any] | None:
    found = _read(_path(cluster)).get("gang")
    return found if isinstance(found, dict) else None


def drop_cluster(cluster: str) -> None:
    """Forget the cluster. Idempotent."""
    _STORE.drop(cluster)


def recorded_clusters() -> dict[str, dict[str, str]]:
    """Every recorded cluster -> its groups."""
    return {c: {str(k): str(v) for k, v in (rec.get("groups") or {}).items()}
            for c, rec in _STORE.all().items()}
