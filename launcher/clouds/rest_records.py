"""Per-cluster records of instances on REST clouds (Lambda, Vast), under
`$LAUNCHER_HOME/<cloud>/clusters/<cluster>.json` (dir 0700, files 0600).

A record is written BEFORE each create call (`add_pending(cluster, name, region)`: the
instance name the cloud will show), then completed with the cloud's id (`set_id`). So a
client killed between the create call and the state DB write leaves a record naming what
may exist: `terminate` looks the names up in the cloud's list and deletes them.
Writes are atomic (temp file + rename) under an fcntl lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.clouds.record_store import ClusterRecords


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
        self._store = ClusterRecords(cloud)
        self._update = self._store.update

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
        if not self._store.path(cluster).exists():
            return None
        found = self._store.read(cluster).get("instances") or {}
        return [Entry(name=str(n), region=str(v.get("region") or ""),
                      instance_id=str(v["id"]) if v.get("id") is not None else None,
                      spot=bool(v.get("spot")))
                for n, v in sorted(found.items())]

    def drop_cluster(self, cluster: str) -> None:
        """Forget the cluster. Idempotent."""
        self._store.drop(cluster)
