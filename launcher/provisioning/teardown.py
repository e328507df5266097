"""Teardown: give a cluster's nodes back, on every cloud a launch attempt touched.

Shared by `launcher down`, `status --refresh`, failed launches and the managed-jobs
controller. Every function is blocking and idempotent.
"""

from __future__ import annotations

from launcher.errors import LauncherError
from launcher.provisioning import attempts as attempt_log
from launcher.provisioning.cloud_access import CloudFn, default_cloud
from launcher.state.db import ClusterRecord, StateDB, cluster_lock

# How long `down_cluster` waits for a command holding the cluster (e.g. a launch).
LOCK_WAIT_S = 10.0


def terminate_everywhere(db: StateDB, rec: ClusterRecord, cloud_fn: CloudFn) -> None:
    """Terminate the cluster on its cloud and on every cloud a launch attempt touched
    (a launch killed mid-failover may have left nodes on an earlier cloud).
    Raises LauncherError naming the clouds that failed; the row is then kept."""
    clouds = dict.fromkeys([rec.cloud, *db.clouds_touched(rec.name)])
    errors = []
    for cloud_name in clouds:
        try:
            cloud = cloud_fn(cloud_name)
        except KeyError:
            continue  # a cloud this version cannot provision on never got instances
        try:
            cloud.terminate(rec.name)
        except Exception as exc:
            from launcher.clouds.sdk import error_text

            errors.append(f"{cloud_name}: {error_text(exc, cloud_name)}")
    if errors:
        raise LauncherError(
            f"Could not terminate every node of {rec.name!r}: {'; '.join(errors)}. "
            "The cluster is kept in `launcher status`; retry `launcher down`."
        )
    attempt_log.abandon_pending(db, rec.name)  # its nodes are gone: never reuse a token


def down_cluster(cluster_name: str, *, cloud_fn: CloudFn = default_cloud,
                 wait: float = LOCK_WAIT_S) -> None:
    """Terminate every node of the cluster (on every cloud a launch attempt touched)
    and forget it. Raises ClusterNotFoundError for an unknown name, ClusterBusyError
    when another command holds the cluster longer than `wait`, LauncherError when a
    cloud could not terminate (the row is then kept, so `down` can be retried)."""
    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        with cluster_lock(cluster_name, wait=wait, purpose="down"):
            rec = db.get_cluster(cluster_name) or rec
            terminate_everywhere(db, rec, cloud_fn)
            db.delete_cluster(cluster_name, reason="down")


def terminate_orphan(cloud_name: str, cluster_name: str, *,
                     cloud_fn: CloudFn = default_cloud) -> None:
    """Terminate instances tagged with `cluster_name` on `cloud_name` that no cluster in
    the state DB owns (see `status --refresh`'s orphans). Refuses (LauncherError) a name
    the DB knows: that one goes through `launcher down`. Idempotent."""
    with StateDB() as db:
        if db.get_cluster(cluster_name) is not None:
            raise LauncherError(
                f"Cluster {cluster_name!r} is in the state DB, so it is not an orphan: "
                f"use `launcher down {cluster_name}`.")
        try:
            cloud = cloud_fn(cloud_name)
        except KeyError:
            raise LauncherError(f"Unknown cloud {cloud_name!r}: no provisioner for it.") from None
        cloud.terminate(cluster_name)
        attempt_log.abandon_pending(db, cluster_name)
        db.add_event(cluster_name, "orphan-terminated", f"on {cloud_name}", cloud_name)
