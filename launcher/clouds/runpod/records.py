"""Cluster records under `$LAUNCHER_HOME/runpod/clusters/<cluster>.json` (dir 0700,
files 0600): `{"pods": {name: id or ""}, "spot": bool, "region": ..., "zone": ...}`.

A pod's name is written BEFORE the deploy mutation is sent (its id once RunPod answers),
so a client killed in between leaves a name `terminate` looks for among the account's
pods. Writes are atomic (temp file + rename) under an fcntl lock.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.record_store import ClusterRecords, load_json

_STORE = ClusterRecords("runpod", private_parent=True)
update = _STORE.update
drop = _STORE.drop


def read(cluster: str) -> dict[str, Any] | None:
    """The record, or None when there is none."""
    return load_json(_STORE.path(cluster))


def add_pod(cluster: str, name: str, pod_id: str = "", **meta: Any) -> None:
    """Record a pod (by name before it exists; again with its id once created)."""
    with update(cluster) as data:
        data.setdefault("pods", {})[name] = pod_id
        data.update(meta)

