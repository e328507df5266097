"""Small cloud-owned files under `$LAUNCHER_HOME/gcp/clusters/` (dir 0700, files 0600).

`<cluster>.json` holds the zones a cluster may have instances in, its compact placement
policy per region, and its current gang (zone + instance names in rank order). It is
written BEFORE any create call in a zone and dropped by `terminate` once every zone is
clean, so `terminate(name)` (which only gets the name) knows where to look without
listing every zone of every region. Writes are atomic (temp file + rename); updates
hold an fcntl lock.
"""

from __future__ import annotations

from launcher.clouds.record_store import ClusterRecords, read_json

_STORE = ClusterRecords("gcp")
_path = _STORE.path
_read = read_json
_update = _STORE.update


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
    _STORE.drop(cluster)


def recorded_clusters() -> dict[str, list[str]]:
    """Every recorded cluster -> its zones."""
    return {c: [str(z) for z in rec.get("zones") or []] for c, rec in _STORE.all().items()}
