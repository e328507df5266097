"""Small cloud-owned files under `$LAUNCHER_HOME/gcp/clusters/` (dir 0700, files 0600).

`<cluster>.json` holds the zones a cluster may have instances in, its compact placement
policy per region, and its current gang (zone + instance names in rank order). It is
written BEFORE any create call in a zone and dropped by `terminate` once every zone is
clean, so `terminate(name)` (which only gets the name) knows where to look without
listing every zone of every region. Writes are atomic (temp file + rename); updates
hold an fcntl lock.
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
    path = launcher_home() / "gcp" / "clusters"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    """The record, locked; written back when the block ends without error."""
    path = _path(cluster)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = _read(path)
        yield data
        _write(path, data)
    finally:
        os.close(fd)


def add_zone(cluster: str, zone: str) -> None:
    """Record that `cluster` may have instances in `zone` (idempotent)."""
    with _update(cluster) as data:
        zones = list(data.get("zones") or [])
        if zone not in zones:
            zones.append(zone)
        data["zones"] = zones


def cluster_zones(cluster: str) -> list[str] | None:
    """Zones recorded for `cluster`, or None when there is no record at all."""
    path = _path(cluster)
    if not path.exists():
        return None
    return [str(z) for z in _read(path).get("zones") or []]


def add_policy(cluster: str, region: str, name: str) -> None:
    """Record (before creating it) the cluster's placement policy in `region`."""
    with _update(cluster) as data:
        data["policies"] = {**(data.get("policies") or {}), region: name}


def policies(cluster: str) -> dict[str, str]:
    got = _read(_path(cluster)).get("policies")
    return {str(k): str(v) for k, v in got.items()} if isinstance(got, dict) else {}


def drop_policy(cluster: str, region: str) -> None:
    with _update(cluster) as data:
        data["policies"] = {k: v for k, v in (data.get("policies") or {}).items() if k != region}


def set_instances(cluster: str, zone: str, names: list[str], spot: bool) -> None:
    """Record the cluster's current gang (rank order): `query` reports on these."""
    with _update(cluster) as data:
        zones = list(data.get("zones") or [])
        if zone not in zones:
            zones.append(zone)
        data.update(zones=zones, instances={"zone": zone, "names": names, "spot": spot})


def recorded_instances(cluster: str) -> tuple[str, list[str], bool] | None:
    """(zone, names, spot) of the cluster's current gang, None when unknown."""
    inst = _read(_path(cluster)).get("instances")
    if isinstance(inst, dict) and isinstance(inst.get("names"), list):
        return str(inst["zone"]), [str(n) for n in inst["names"]], bool(inst.get("spot"))
    return None


def drop_cluster(cluster: str) -> None:
    """Forget the cluster's record. Idempotent."""
    with contextlib.suppress(FileNotFoundError):
        _path(cluster).unlink()


def recorded_clusters() -> dict[str, list[str]]:
    """Every recorded cluster -> its zones."""
    return {p.stem: [str(z) for z in _read(p).get("zones") or []]
            for p in sorted(_dir().glob("*.json"))}
