"""Orphans: instances carrying launcher's cluster tag that no cluster in the state DB
owns. Found through the optional `SupportsOrphans` capability of a cloud (see
launcher/clouds/base.py); removed with `terminate_orphan` (launcher/provisioning/teardown.py,
`launcher down --orphan NAME --cloud CLOUD`). Blocking; never raises for a cloud that
cannot be listed (it is named in `errors` instead)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from launcher.clouds.base import SupportsOrphans
from launcher.provisioning.cloud_access import CloudFn, default_cloud
from launcher.state import StateDB


@dataclass(frozen=True)
class Orphan:
    cloud: str
    cluster: str
    node_ids: tuple[str, ...]

    @property
    def command(self) -> str:
        """The command that removes it."""
        return f"launcher down --orphan {self.cluster} --cloud {self.cloud}"

    def to_json(self) -> dict[str, object]:
        return {"cloud": self.cloud, "cluster": self.cluster, "node_ids": list(self.node_ids),
                "command": self.command}


@dataclass
class OrphanScan:
    orphans: list[Orphan] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # cloud -> why it was not listed


def find_orphans(clouds: Iterable[str], *, cloud_fn: CloudFn = default_cloud) -> OrphanScan:
    """Ask every cloud in `clouds` that supports it for its tagged clusters, and keep
    those the state DB does not know (a launch writes its row before any cloud call,
    so a cluster being launched is never taken for an orphan)."""
    scan = OrphanScan()
    for name in clouds:
        try:
            cloud = cloud_fn(name)
        except KeyError:
            continue
        if not isinstance(cloud, SupportsOrphans):
            continue
        try:
            tagged = cloud.list_tagged_clusters()
        except Exception as exc:  # reported, never fatal for `status`
            from launcher.clouds.sdk import error_text

            scan.errors[name] = error_text(exc, name)
            continue
        if not tagged:
            continue
        with StateDB() as db:
            known = {c.name for c in db.list_clusters()}
        for cluster, ids in sorted(tagged.items()):
            if cluster not in known and ids:
                scan.orphans.append(Orphan(name, cluster, tuple(sorted(ids))))
    return scan


def enabled_cloud_names() -> list[str]:
    """Implemented clouds whose credentials work here (the clouds `status --refresh`
    scans for orphans)."""
    from launcher.clouds.registry import IMPLEMENTED, credential_status

    return [n for n in IMPLEMENTED if credential_status(n).enabled]
