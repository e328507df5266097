"""Cluster records under `$LAUNCHER_HOME/nebius/clusters/<cluster>.json` (dir 0700, files 0600).

A record is written BEFORE the first create call: the project, region, whether the gang
is preemptible, and the names of everything that may be created (boot disks, instances,
the GPU cluster). Every resource also carries the label `launcher-cluster=<cluster>`, so
`terminate` finds it by label in the recorded project even when a client was killed
between the create call and the state DB write. After provisioning, `instance_ids`
(rank order) is added. Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from launcher.config.settings import launcher_home


def _path(cluster: str) -> Path:
    if "/" in cluster or cluster.startswith("."):
        raise ValueError(f"invalid cluster name {cluster!r}")
    path = launcher_home() / "nebius" / "clusters"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path / f"{cluster}.json"


def read(cluster: str) -> dict[str, Any] | None:
    """The record, or None when there is none."""
    try:
        data = json.loads(_path(cluster).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(cluster: str, data: dict[str, Any]) -> None:
    path = _path(cluster)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def update(cluster: str, **fields: Any) -> None:
    data = read(cluster) or {}
    data.update(fields)
    write(cluster, data)


def drop(cluster: str) -> None:
    """Forget the cluster. Idempotent."""
    with contextlib.suppress(FileNotFoundError):
        _path(cluster).unlink()


def recorded() -> dict[str, dict[str, Any]]:
    """Every recorded cluster -> its record."""
    out = {}
    for p in sorted(_path("x").parent.glob("*.json")):
        data = read(p.stem)
        if data is not None:
            out[p.stem] = data
    return out
