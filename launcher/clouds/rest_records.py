"""Per-cluster records of instances on REST clouds (Lambda, Vast), under
`$LAUNCHER_HOME/<cloud>/clusters/<cluster>.json` (dir 0700, files 0600).

A record is written BEFORE each create call (`add_pending(cluster, name, region)`: the
instance name the cloud will show), then completed with the cloud's id (`set_id`). So a
client killed between the create call and the state DB write leaves a record naming what
may exist: `terminate` looks the names up in the cloud's list and deletes them.
Writes are atomic (temp file + rename) under an fcntl lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config import launcher_home


@dataclass(frozen=True)
class Entry:
    """One instance launcher asked for: its name, region, and id once known."""

    name: str
    region: str
    instance_id: str | None
    spot: bool = False


class Records:
    """The records of one cloud (`Records("lambda")`)."""

    def __init__(self, cloud: str) -> None:
        self.cloud = cloud

    def _path(self, cluster: str) -> Path:
        if "/" in cluster or cluster.startswith("."):
            raise ValueError(f"invalid cluster name {cluster!r}")
        d = launcher_home() / self.cloud / "clusters"
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return d / f"{cluster}.json"

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @contextlib.contextmanager
    def _update(self, cluster: str) -> Iterator[dict[str, Any]]:
        path = self._path(cluster)
        fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self._read(path)
            yield data
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(wfd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        finally:
            os.close(fd)

    def add_pending(self, cluster: str, name: str, region: str, spot: bool = False) -> None:
        """Record (before the create call) that `name` may come to exist. Idempotent."""
        with self._update(cluster) as data:
            data.setdefault("instances", {}).setdefault(
                name, {"region": region, "id": None, "spot": spot})

    def set_id(self, cluster: str, name: str, instance_id: str) -> None:
        with self._update(cluster) as data:
            data.setdefault("instances", {}).setdefault(name, {})["id"] = instance_id

    def drop(self, cluster: str, name: str) -> None:
        with self._update(cluster) as data:
            (data.get("instances") or {}).pop(name, None)

    def entries(self, cluster: str) -> list[Entry] | None:
        """The recorded instances in name order; None when there is no record at all."""
        path = self._path(cluster)
        if not path.exists():
            return None
        found = self._read(path).get("instances") or {}
        return [Entry(name=str(n), region=str(v.get("region") or ""),
                      instance_id=str(v["id"]) if v.get("id") is not None else None,
                      spot=bool(v.get("spot")))
                for n, v in sorted(found.items())]

    def drop_cluster(self, cluster: str) -> None:
        """Forget the cluster. Idempotent."""
        with contextlib.suppress(FileNotFoundError):
            self._path(cluster).unlink()
