"""Small cloud-owned files under `$LAUNCHER_HOME/aws/` (dir 0700, files 0600).

- `clusters/<cluster>.json`: the regions a cluster may have resources in, and its
  placement group per region (EC2 placement groups are deleted by name). Written
  BEFORE any create call in a region, dropped by `terminate` once every region is
  clean, so `terminate(name)` (which only gets the name) knows where to look.
- `regions/<region>.json`: what `network.py` learnt about a region (key pair, security
  group, VPC, zone ids, subnets, instance-type facts, AMI root devices). A cache:
  wrong or missing entries are found again (provision retries once on a NotFound).

Writes are atomic (temp file + rename); updates of one file hold an fcntl lock.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from launcher.clouds.record_store import locked as _locked
from launcher.clouds.record_store import read_json as _read
from launcher.clouds.record_store import write_json as _write
from launcher.config.settings import launcher_home


def aws_dir() -> Path:
    path = launcher_home() / "aws"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def _subdir(name: str) -> Path:
    path = aws_dir() / name
    path.mkdir(exist_ok=True, mode=0o700)
    return path


# ---- cluster -> regions -------------------------------------------------------------


def _cluster_path(cluster: str) -> Path:
    if "/" in cluster or cluster.startswith("."):
        raise ValueError(f"invalid cluster name {cluster!r}")
    return _subdir("clusters") / f"{cluster}.json"


def cluster_regions(cluster: str) -> list[str] | None:
    """Regions recorded for `cluster`, or None when there is no record at all."""
    path = _cluster_path(cluster)
    if not path.exists():
        return None
    regions = _read(path).get("regions")
    return [str(r) for r in regions] if isinstance(regions, list) else []


def add_cluster_region(cluster: str, region: str) -> None:
    """Record that `cluster` may have resources in `region`. Idempotent."""
    path = _cluster_path(cluster)
    with _locked(path):
        data = _read(path)
        regions = [str(r) for r in data.get("regions") or []]
        if region not in regions:
            regions.append(region)
            _write(path, {**data, "regions": regions})


def add_placement_group(cluster: str, region: str, name: str) -> None:
    """Record (before creating it) the cluster's placement group in `region`."""
    path = _cluster_path(cluster)
    with _locked(path):
        data = _read(path)
        groups = dict(data.get("placement_groups") or {})
        groups[region] = name
        regions = [str(r) for r in data.get("regions") or []]
        if region not in regions:
            regions.append(region)
        _write(path, {**data, "regions": regions, "placement_groups": groups})


def placement_groups(cluster: str) -> dict[str, str]:
    """region -> the placement group recorded for `cluster` there."""
    groups = _read(_cluster_path(cluster)).get("placement_groups")
    return {str(k): str(v) for k, v in groups.items()} if isinstance(groups, dict) else {}


def drop_placement_group(cluster: str, region: str) -> None:
    path = _cluster_path(cluster)
    with _locked(path):
        data = _read(path)
        groups = dict(data.get("placement_groups") or {})
        if groups.pop(region, None) is not None:
            _write(path, {**data, "placement_groups": groups})


def set_instances(cluster: str, region: str, ids: list[str]) -> None:
    """Record the instance ids (rank order) of the cluster's current gang in `region`
    (replacing an earlier gang's): `query` reports on these."""
    path = _cluster_path(cluster)
    with _locked(path):
        data = _read(path)
        regions = [str(r) for r in data.get("regions") or []]
        if region not in regions:
            regions.append(region)
        _write(path, {**data, "regions": regions, "instances": {"region": region, "ids": ids}})


def recorded_instances(cluster: str) -> tuple[str, list[str]] | None:
    """(region, ids) of the cluster's current gang, None when unknown."""
    inst = _read(_cluster_path(cluster)).get("instances")
    if isinstance(inst, dict) and isinstance(inst.get("ids"), list):
        return str(inst.get("region")), [str(i) for i in inst["ids"]]
    return None


def drop_cluster(cluster: str) -> None:
    """Forget the cluster's record. Idempotent."""
    path = _cluster_path(cluster)
    with _locked(path), contextlib.suppress(FileNotFoundError):
        path.unlink()


def recorded_clusters() -> dict[str, list[str]]:
    """Every recorded cluster -> its regions."""
    out: dict[str, list[str]] = {}
    for path in sorted(_subdir("clusters").glob("*.json")):
        regions = _read(path).get("regions")
        out[path.stem] = [str(r) for r in regions] if isinstance(regions, list) else []
    return out


# ---- region cache -------------------------------------------------------------------


def _region_path(region: str) -> Path:
    return _subdir("regions") / f"{region}.json"


def region_cache(region: str) -> dict[str, Any]:
    """The cached facts of `region` ({} when none)."""
    return _read(_region_path(region))


def update_region_cache(region: str, **entries: Any) -> None:
    """Merge `entries` into the region's cache (None values delete the key)."""
    path = _region_path(region)
    with _locked(path):
        data = _read(path)
        for key, value in entries.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        _write(path, data)


def recorded_regions() -> list[str]:
    """The regions with a cache file (a launch prepared something there)."""
    return sorted(p.stem for p in _subdir("regions").glob("*.json"))


def clear_region_cache(region: str) -> None:
    path = _region_path(region)
    with _locked(path), contextlib.suppress(FileNotFoundError):
        path.unlink()
