"""Cluster records under `$LAUNCHER_HOME/azure/clusters/<cluster>.json` (dir 0700, files 0600).

A record holds the resource groups a cluster may own (`{"groups": {name: location}}`),
written BEFORE the group is created, and its current gang (`"gang"`: location, zone,
VM names in rank order, spot or not). `terminate(name)` deletes every recorded group (and,
with no record, finds groups by tag), then drops the record: a client killed between
the create call and the state DB write leaves nothing `launcher down` cannot find.
Writes are atomic (temp file + rename) under an fcntl lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launcher.config import launcher_home


def _dir() -> Path:
    path = launcher_home() / "azure" / "clusters"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    return path


def _path(cluster: str) -> Path:
    if "/" in cluster or cluster.startswith("."):
        raise ValueError(f"invalid cluster name {cluster!r}")
    return _dir() / f"{cluster}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def _update(cluster: str) -> Iterator[dict[str, Any]]:
    path = _path(cluster)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = _read(path)
        yield data
        _write(path, data)
    finally:
        os.close(fd)


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
    with contextlib.suppress(FileNotFoundError):
        _path(cluster).unlink()


def recorded_clusters() -> dict[str, dict[str, str]]:
    """Every recorded cluster -> its groups."""
    return {p.stem: {str(k): str(v) for k, v in (_read(p).get("groups") or {}).items()}
            for p in sorted(_dir().glob("*.json"))}
