"""Cluster records under `$LAUNCHER_HOME/runpod/clusters/<cluster>.json` (dir 0700,
files 0600): `{"pods": {name: id or ""}, "spot": bool, "region": ..., "zone": ...}`.

A pod's name is written BEFORE the deploy mutation is sent (its id once RunPod answers),
so a client killed in between leaves a name `terminate` looks for among the account's
pods. Writes are atomic (temp file + rename) under an fcntl lock.
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


def _path(cluster: str) -> Path:
    if "/" in cluster or cluster.startswith("."):
        raise ValueError(f"invalid cluster name {cluster!r}")
    path = launcher_home() / "runpod" / "clusters"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    return path / f"{cluster}.json"


def read(cluster: str) -> dict[str, Any] | None:
    """The record, or None when there is none."""
    try:
        data = json.loads(_path(cluster).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def update(cluster: str) -> Iterator[dict[str, Any]]:
    """Read-modify-write the record under its lock."""
    path = _path(cluster)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = read(cluster) or {}
        yield data
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(wfd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    finally:
        os.close(fd)


def add_pod(cluster: str, name: str, pod_id: str = "", **meta: Any) -> None:
    """Record a pod (by name before it exists; again with its id once created)."""
    with update(cluster) as data:
        data.setdefault("pods", {})[name] = pod_id
        data.update(meta)


def drop(cluster: str) -> None:
    """Forget the cluster. Idempotent."""
    with contextlib.suppress(FileNotFoundError):
        _path(cluster).unlink()
