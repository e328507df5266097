"""`launcher clouds cleanup CLOUD`: delete what launcher created once for many clusters and
`down` never deletes (an AWS region's key pair and shared security group, a GCP
network's firewall rules, the SSH key registered on a Lambda or Vast account...).

    cleanup_leftovers(cloud, region=None, dryrun=False, confirm=None) -> CleanupReport

Only a cloud with the optional `SupportsCleanup` capability has leftovers; it lists only
resources launcher created (its names and tags). A leftover is kept when the cloud shows
it in use (an instance of any state but terminated uses it) or when a cluster in the
state DB is on that cloud in its region (any status: a launch records its cluster
before its first cloud call; an account-wide leftover: any cluster on the cloud). A
launch that starts after the check finds what was deleted missing and creates it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.errors import LauncherError, UsageError

DELETED, WOULD_DELETE, KEPT, FAILED = "deleted", "would delete", "kept", "failed"


@dataclass(frozen=True)
class CleanupItem:
    """One leftover and what happened to it (`action`), with the reason when kept or
    failed."""

    kind: str
    name: str
    region: str | None
    action: str
    reason: str = ""


@dataclass
class CleanupReport:
    cloud: str
    region: str | None
    dryrun: bool
    items: list[CleanupItem] = field(default_factory=list)
    note: str = ""  # why there is nothing to do, when there is not

    def to_json(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "region": self.region, "dryrun": self.dryrun,
                "note": self.note, "items": [asdict(i) for i in self.items]}


def _cloud_object(cloud: str) -> Any:
    from launcher.clouds.registry import IMPLEMENTED
    from launcher.provisioning.cloud_access import default_cloud
    from launcher.task.fields import did_you_mean

    if cloud not in IMPLEMENTED:
        raise UsageError(f"clouds cleanup: unknown cloud {cloud!r}"
                         f"{did_you_mean(cloud, IMPLEMENTED)} (one of "
                         f"{', '.join(sorted(IMPLEMENTED))}).")
    try:
        return default_cloud(cloud)
    except ImportError as exc:
        raise LauncherError(f"clouds cleanup {cloud}: {exc.name or 'its SDK'} is not "
                            f"installed: pip install 'launcher[{cloud}]'.") from None


def _clusters_using(cloud: str) -> dict[str | None, list[str]]:
    """Region -> the state DB's clusters on `cloud` there ("NAME (STATUS)")."""
    from launcher.state.db import StateDB

    out: dict[str | None, list[str]] = {}
    with StateDB() as db:
        for rec in db.list_clusters():
            if rec.cloud == cloud:
                out.setdefault(rec.region, []).append(f"{rec.name} ({rec.status.value})")
    return out


def cleanup_leftovers(cloud: str, region: str | None = None, *, dryrun: bool = False,
                      confirm: Callable[[list[CleanupItem]], bool] | None = None
                      ) -> CleanupReport:
    """List `cloud`'s leftovers (in `region`, None: everywhere) and, unless `dryrun`,
    delete those nothing uses, after `confirm(items to delete)` says yes (None: yes).
    Blocking. Raises UsageError (unknown cloud), CloudError (the cloud cannot be
    listed), LauncherError (declined: nothing was deleted)."""
    from launcher.clouds.base import CloudError, SupportsCleanup

    obj = _cloud_object(cloud)
    report = CleanupReport(cloud, region, dryrun)
    if not isinstance(obj, SupportsCleanup):
        report.note = (f"{cloud} keeps nothing outside its clusters: `launcher down` deletes "
                       "everything a cluster created.")
        return report
    clusters = _clusters_using(cloud)
    found = obj.list_leftovers(region)
    plan = []
    for item in sorted(found, key=lambda i: (i.region or "", i.kind, i.name)):
        users = (sum(clusters.values(), []) if item.region is None
                 else clusters.get(item.region, []))
        why = item.in_use_by or (f"cluster(s) {', '.join(sorted(users))} on {cloud}"
                                 + (f" in {item.region}" if item.region else "")
                                 if users else None)
        plan.append((item, why))
    todo = [CleanupItem(i.kind, i.name, i.region, WOULD_DELETE) for i, why in plan
            if why is None]
    if not dryrun and todo and confirm is not None and not confirm(todo):
        raise LauncherError("clouds cleanup: nothing deleted.")
    for item, why in plan:
        if why is not None:
            report.items.append(CleanupItem(item.kind, item.name, item.region, KEPT, why))
        elif dryrun:
            report.items.append(CleanupItem(item.kind, item.name, item.region, WOULD_DELETE))
        else:
            try:
                obj.delete_leftover(item)
                report.items.append(CleanupItem(item.kind, item.name, item.region, DELETED))
            except CloudError as exc:
                report.items.append(CleanupItem(item.kind, item.name, item.region, FAILED,
                                                str(exc)))
    if not report.items:
        report.note = f"no leftovers of {cloud}" + (f" in {region}" if region else "") + "."
    return report
