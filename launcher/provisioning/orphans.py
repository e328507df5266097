"""Orphans: resources carrying launcher's cluster tag that no cluster in the state DB
owns. Found through a cloud's optional capabilities (launcher/clouds/base.py):
`SupportsResourceScan` lists every tagged kind (instances, security groups, placement
groups, Elastic IPs, detached volumes...), else `SupportsOrphans` lists instances only.
Removed with `terminate_orphan` (launcher/provisioning/teardown.py, `launcher down
--orphan NAME --cloud CLOUD`). Blocking; never raises for a cloud that cannot be listed
(it is named in `errors` instead)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from launcher.clouds.base import INSTANCE, SupportsOrphans, SupportsResourceScan, TaggedResource
from launcher.provisioning.cloud_access import CloudFn, default_cloud
from launcher.state.db import StateDB


@dataclass(frozen=True)
class Orphan:
    """What one cluster name holds on one cloud. `node_ids`: its instances; `resources`:
    everything tagged with it, instances included (sorted by kind, then id)."""

    cloud: str
    cluster: str
    node_ids: tuple[str, ...]
    resources: tuple[TaggedResource, ...] = ()

    @property
    def command(self) -> str:
        """The command that removes it."""
        return f"launcher down --orphan {self.cluster} --cloud {self.cloud}"

    def summary(self) -> str:
        """E.g. `2 instances (i-1, i-2), 1 security group (sg-1)`."""
        res = self.resources or tuple(TaggedResource(INSTANCE, i) for i in self.node_ids)
        counts = Counter(r.kind for r in res)
        parts = []
        for kind in sorted(counts, key=lambda k: (k != INSTANCE, k)):
            ids = ", ".join(r.id for r in res if r.kind == kind)
            n = counts[kind]
            parts.append(f"{n} {kind}{'' if n == 1 else 's'} ({ids})")
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {"cloud": self.cloud, "cluster": self.cluster, "node_ids": list(self.node_ids),
                "resources": [{"kind": r.kind, "id": r.id} for r in self.resources],
                "command": self.command}


@dataclass
class OrphanScan:
    orphans: list[Orphan] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # cloud -> why it was not listed


def find_orphans(clouds: Iterable[str], *, cloud_fn: CloudFn = default_cloud) -> OrphanScan:
    """Ask every cloud in `clouds` that supports it for its tagged clusters (every
    resource kind where the cloud can list them), and keep those the state DB does not
    know (a launch writes its row before any cloud call, so a cluster being launched
    is never taken for an orphan)."""
    scan = OrphanScan()
    for name in clouds:
        try:
            cloud = cloud_fn(name)
        except KeyError:
            continue
        try:
            if isinstance(cloud, SupportsResourceScan):
                tagged = cloud.list_tagged_resources()
            elif isinstance(cloud, SupportsOrphans):
                tagged = {c: [TaggedResource(INSTANCE, i) for i in ids]
                          for c, ids in cloud.list_tagged_clusters().items()}
            else:
                continue
        except Exception as exc:  # reported, never fatal for `status`
            from launcher.clouds.sdk import error_text

            scan.errors[name] = error_text(exc, name)
            continue
        if not tagged:
            continue
        with StateDB() as db:
            known = {c.name for c in db.list_clusters()}
        for cluster, res in sorted(tagged.items()):
            if cluster in known or not res:
                continue
            ordered = tuple(sorted(set(res), key=lambda r: (r.kind != INSTANCE, r.kind, r.id)))
            ids = tuple(sorted(r.id for r in ordered if r.kind == INSTANCE))
            scan.orphans.append(Orphan(name, cluster, ids, ordered))
    return scan


def enabled_cloud_names() -> list[str]:
    """Implemented clouds whose credentials work here (the clouds `status --refresh`
    scans for orphans)."""
    from launcher.clouds.registry import IMPLEMENTED, credential_status

    return [n for n in IMPLEMENTED if credential_status(n).enabled]
