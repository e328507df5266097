"""Finding and deleting a cluster's resources by label, waiting for each deletion.

`list_labeled` pages through List of instances, disks or GPU clusters in a project and
keeps those labelled `launcher-cluster` (= the cluster, or any). `delete_cluster`
deletes instances, then their boot disks, then the GPU cluster (an instance holds its
disk and its GPU cluster until it is gone), waiting on every Delete operation; a
resource already gone (NOT_FOUND) counts as deleted. Idempotent. Raises CloudError.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from launcher.clouds.nebius import shapes
from launcher.clouds.nebius.errors import ONCE, is_not_found, nebius_errors, with_retries
from launcher.clouds.nebius.session import Session

KINDS = ("instances", "disks", "gpu_clusters")


def _client(session: Session, kind: str) -> Any:
    return getattr(session, kind)()


def _list_request(kind: str, project: str, token: str) -> Any:
    from nebius.api.nebius.compute.v1 import (
        ListDisksRequest,
        ListGpuClustersRequest,
        ListInstancesRequest,
    )

    cls = {"instances": ListInstancesRequest, "disks": ListDisksRequest,
           "gpu_clusters": ListGpuClustersRequest}[kind]
    return cls(parent_id=project, page_size=500, page_token=token)


def list_labeled(session: Session, project: str, kind: str,
                 cluster: str | None) -> list[Any]:
    """Resources of `kind` labelled with `cluster` (None: with any launcher cluster)."""
    out: list[Any] = []
    token = ""
    client = _client(session, kind)
    while True:
        req = _list_request(kind, project, token)

        def call(r: Any = req) -> Any:
            return client.list(r, timeout=30).wait()

        with nebius_errors(action=f"list {kind}"):
            page = with_retries(call)
        for item in page.items:
            tag = dict(item.metadata.labels or {}).get(shapes.CLUSTER_LABEL)
            if tag and (cluster is None or tag == cluster):
                out.append(item)
        token = str(page.next_page_token or "")
        if not token:
            return out


def _delete(session: Session, kind: str, resource_id: str, timeout: float,
            poll: float) -> None:
    from nebius.api.nebius.compute.v1 import (
        DeleteDiskRequest,
        DeleteGpuClusterRequest,
        DeleteInstanceRequest,
    )

    cls = {"instances": DeleteInstanceRequest, "disks": DeleteDiskRequest,
           "gpu_clusters": DeleteGpuClusterRequest}[kind]
    client = _client(session, kind)
    with nebius_errors(action=f"delete {resource_id}"):
        try:
            op = with_retries(lambda: client.delete(cls(id=resource_id), **ONCE).wait())
            op.sync_wait(interval=poll, timeout=timeout)
        except Exception as exc:
            if not is_not_found(exc):
                raise


def delete_cluster(session: Session, project: str, cluster: str, timeout: float,
                   poll: float) -> int:
    """Delete everything labelled with `cluster` in `project`; how many were deleted."""
    deleted = 0
    for kind in KINDS:
        ids = [str(r.metadata.id) for r in list_labeled(session, project, kind, cluster)]
        if not ids:
            continue
        with ThreadPoolExecutor(min(16, len(ids))) as ex:
            futures = [ex.submit(_delete, session, kind, i, timeout, poll) for i in ids]
        for f in futures:
            f.result()
        deleted += len(ids)
    return deleted
