"""A task's `volumes:` on Kubernetes: one PersistentVolumeClaim per volume, mounted in
every pod of the gang (API JSON dicts; the SDK calls go through the CoreV1Api given).

- `/mnt/d: NAME` (or `{name: NAME, sub_path: ...}`): the PVC NAME in the context's
  namespace. One that exists is used as it is and never deleted (it carries no
  cluster label). A missing one is an InvalidRequestError, unless the entry gives a
  `size`: then the launch creates it, labelled with the cluster.
- `/mnt/s: {size: 100Gi}` (ephemeral): the PVC `CLUSTER-vol-I`, created by the launch,
  labelled with the cluster.

PVCs the launch creates carry `launcher.dev/cluster=CLUSTER` (and the entry's
`labels`), so rollback and teardown (a deletecollection by that label) delete them and
nothing else. They ask for `size` (a Kubernetes quantity: `100Gi`, `1.5Ti`; a bare
number is GiB), the entry's `config.storage_class_name` (default: the cluster's default
class) and `config.access_mode` (default: ReadWriteOnce for one node, ReadWriteMany for
more: pods on different nodes cannot share a ReadWriteOnce volume). A PVC shared by
pods on several nodes must allow it (ReadWriteMany or ReadOnlyMany, read-only for the
latter): an existing one that does not is refused before any pod is made.

Binding is the cluster's: a PVC of an Immediate class binds at once, one of a
WaitForFirstConsumer class when the first pod using it is scheduled; a pod whose PVC
never binds stays unschedulable and the gang is rolled back after `provision_timeout`
like any other (the scheduler's message says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from launcher.clouds.base import InvalidRequestError
from launcher.clouds.kubernetes.api import CLOUD, TIMEOUT, as_cloud_error, status_code
from launcher.clouds.kubernetes.manifests import CLUSTER_LABEL, labels
from launcher.task.volumes import VolumeMount

# volumes pods on several nodes may share
_SHARED = ("ReadWriteMany", "ReadOnlyMany")
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([KMGTPkmgtp])(i?)[Bb]?)?\Z")


@dataclass(frozen=True)
class Claim:
    """A volume as the pods mount it."""

    index: int
    path: str
    claim_name: str
    sub_path: str | None
    read_only: bool


def quantity(size: str) -> str:
    """A volume `size` as a Kubernetes quantity: `100Gi`, `100GiB` -> `100Gi`, `1TB` ->
    `1T`, `500` -> `500Gi`. Raises InvalidRequestError for anything else."""
    m = _SIZE_RE.match(size.strip())
    if not m:
        raise InvalidRequestError(f"volume size {size!r} is not a size such as '100Gi'.", cloud=CLOUD)
    num, prefix, binary = m.group(1), (m.group(2) or "").upper(), m.group(3)
    if not prefix:
        return f"{num}Gi"
    if binary:
        return f"{num}{prefix}i"
    return f"{num}{'k' if prefix == 'K' else prefix}"


def claim_name(cluster: str, index: int, vol: VolumeMount) -> str:
    return vol.name if vol.name else f"{cluster[:50]}-vol-{index}"


def access_mode(vol: VolumeMount, num_nodes: int) -> str:
    return vol.access_mode or ("ReadWriteOnce" if num_nodes == 1 else "ReadWriteMany")


def pvc(cluster: str, index: int, vol: VolumeMount, num_nodes: int) -> dict[str, Any]:
    """The PVC the launch creates for `vol` (see the module docstring)."""
    assert vol.size is not None
    spec: dict[str, Any] = {"accessModes": [access_mode(vol, num_nodes)],
                            "resources": {"requests": {"storage": quantity(vol.size)}}}
    if vol.storage_class:
        spec["storageClassName"] = vol.storage_class
    return {"metadata": {"name": claim_name(cluster, index, vol),
                         "labels": {**vol.labels, **labels(cluster)},
                         "annotations": {"launcher.dev/mount-path": vol.path}},
            "spec": spec}


def ensure_claims(v1: Any, ns: str, ctx_name: str, cluster: str, num_nodes: int,
                  volumes: tuple[VolumeMount, ...]) -> list[Claim]:
    """Create the PVCs the launch makes (an existing one of this cluster, from a retried
    call, is adopted), check the named ones, and return what the pods mount. Raises
    InvalidRequestError (a missing named PVC without `size`; one pods on several nodes
    cannot share) or the CloudError of a failed call."""
    out = []
    where = {"cloud": CLOUD, "region": ctx_name}
    for i, vol in enumerate(volumes):
        name = claim_name(cluster, i, vol)
        existing = _get(v1, ns, ctx_name, name) if vol.name else None
        if existing is None and vol.name and not vol.size:
            raise InvalidRequestError(
                f"Kubernetes context '{ctx_name}': volume {vol.path}: PersistentVolumeClaim "
                f"'{name}' does not exist in namespace '{ns}'. Create it (kubectl apply), or give "
                "the volume a `size` so the launch creates it.", **where)
        if existing is None:
            body = pvc(cluster, i, vol, num_nodes)
            try:
                v1.create_namespaced_persistent_volume_claim(ns, body, _request_timeout=TIMEOUT)
            except Exception as exc:
                if status_code(exc) != 409:
                    raise as_cloud_error(exc, ctx_name, f"creating PersistentVolumeClaim {name}") from None
                existing = _get(v1, ns, ctx_name, name)
            modes = body["spec"]["accessModes"]
        if existing is not None:
            mine = ((existing.get("metadata") or {}).get("labels") or {}).get(CLUSTER_LABEL)
            if not vol.name and mine != cluster:
                raise InvalidRequestError(
                    f"Kubernetes context '{ctx_name}': volume {vol.path}: PersistentVolumeClaim "
                    f"'{name}' exists and is not this cluster's.", **where)
            modes = (existing.get("spec") or {}).get("accessModes") or []
        if num_nodes > 1 and not any(m in _SHARED for m in modes):
            raise InvalidRequestError(
                f"Kubernetes context '{ctx_name}': volume {vol.path}: PersistentVolumeClaim "
                f"'{name}' is {', '.join(modes) or 'of no access mode'}; the {num_nodes} pods run "
                "on different nodes, which needs ReadWriteMany (or ReadOnlyMany).", **where)
        read_only = bool(modes) and all(m == "ReadOnlyMany" for m in modes)
        out.append(Claim(i, vol.path, name, vol.sub_path, read_only))
    return out


def _get(v1: Any, ns: str, ctx_name: str, name: str) -> dict[str, Any] | None:
    import json

    try:
        resp = v1.read_namespaced_persistent_volume_claim(name, ns, _preload_content=False,
                                                          _request_timeout=TIMEOUT)
    except Exception as exc:
        if status_code(exc) == 404:
            return None
        raise as_cloud_error(exc, ctx_name, f"reading PersistentVolumeClaim {name}") from None
    got: dict[str, Any] = json.loads(resp.data)
    return got


def pod_volumes(claims: list[Claim]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod spec volumes, container volumeMounts) for the claims."""
    vols, mounts = [], []
    for c in claims:
        vols.append({"name": f"vol-{c.index}", "persistentVolumeClaim": {
            "claimName": c.claim_name, **({"readOnly": True} if c.read_only else {})}})
        mount: dict[str, Any] = {"name": f"vol-{c.index}", "mountPath": c.path}
        if c.sub_path:
            mount["subPath"] = c.sub_path
        if c.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return vols, mounts
