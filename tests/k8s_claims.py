"""PersistentVolumeClaims in the Kubernetes API fake (tests/k8s_store.py): validation as
the API server does it, and binding as the PV controller and the scheduler's volume
binding do it.

- create: `spec.accessModes` (one at least, each a known mode) and
  `spec.resources.requests.storage` are required, else 422 Invalid with the API's
  field messages; a missing `storageClassName` gets the default class (the
  DefaultStorageClass admission plugin); `status.phase` starts Pending.
- binding: the store's `storage_classes` maps class -> volumeBindingMode. A claim of an
  `Immediate` class is Bound at once (a PV `pvc-UID` of the requested size); one of a
  `WaitForFirstConsumer` class when the first pod using it is bound to a node; one of
  a class that does not exist stays Pending, with a ProvisioningFailed event.
- scheduling: a pod whose claim does not exist, or is Pending and not
  WaitForFirstConsumer, is unschedulable with kube-scheduler's messages
  (`persistentvolumeclaim "x" not found`, `pod has unbound immediate
  PersistentVolumeClaims`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from tests.k8s_store import ApiError, Obj

if TYPE_CHECKING:
    from tests.k8s_store import Store

MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
DEFAULT_CLASSES = {"standard": "Immediate", "local-wffc": "WaitForFirstConsumer"}
DEFAULT_CLASS = "standard"


def validate(name: str, body: Obj, default_class: str | None) -> None:
    """Raise ApiError 422 as the API server does for an invalid claim; fill defaults."""
    spec = body.setdefault("spec", {})
    errs = []
    modes = spec.get("accessModes") or []
    if not modes:
        errs.append("spec.accessModes: Required value: at least 1 access mode is required")
    for m in modes:
        if m not in MODES:
            errs.append(f'spec.accessModes: Unsupported value: "{m}": supported values: '
                        + ", ".join(f'"{x}"' for x in MODES))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        errs.append("spec.resources[storage]: Required value")
    if errs:
        msg = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        raise ApiError(422, "Invalid", f'PersistentVolumeClaim "{name}" is invalid: {msg}',
                       {"name": name, "kind": "PersistentVolumeClaim",
                        "causes": [{"reason": "FieldValueRequired", "message": e.split(": ", 1)[1],
                                    "field": e.split(":", 1)[0]} for e in errs]})
    if "storageClassName" not in spec and default_class:
        spec["storageClassName"] = default_class
    body["status"] = {"phase": "Pending"}


def _bind(store: Store, claim: Obj) -> None:
    claim = copy.deepcopy(claim)
    spec = claim["spec"]
    spec["volumeName"] = f"pvc-{claim['metadata']['uid']}"
    claim["status"] = {"phase": "Bound", "accessModes": list(spec["accessModes"]),
                       "capacity": {"storage": spec["resources"]["requests"]["storage"]}}
    store._put("persistentvolumeclaims", claim["metadata"]["namespace"], claim, "MODIFIED")


def after_create(store: Store, claim: Obj) -> None:
    """Bind an Immediate claim; say why one of an unknown class cannot be."""
    cls = claim["spec"].get("storageClassName")
    mode = store.storage_classes.get(cls or "")
    if mode == "Immediate":
        _bind(store, claim)
    elif mode is None:
        store.event(claim, "ProvisioningFailed", f'storageclass.storage.k8s.io "{cls}" not found',
                    "Warning", "persistentvolume-controller")
    else:
        store.event(claim, "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding",
                    source="persistentvolume-controller")


def _claims(store: Store, pod: Obj) -> list[tuple[str, Obj | None]]:
    ns = pod["metadata"]["namespace"]
    out = []
    for vol in pod["spec"].get("volumes") or []:
        name = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if name:
            out.append((name, store.objects.get(("persistentvolumeclaims", ns, name))))
    return out


def problem(store: Store, pod: Obj) -> str | None:
    """Why no node can take `pod` because of its claims (None: they allow it)."""
    for name, claim in _claims(store, pod):
        if claim is None or "deletionTimestamp" in claim["metadata"]:
            return f'persistentvolumeclaim "{name}" not found'
        if claim["status"].get("phase") != "Bound" and store.storage_classes.get(
                claim["spec"].get("storageClassName") or "") != "WaitForFirstConsumer":
            return "pod has unbound immediate PersistentVolumeClaims"
    return None


def on_pod_bound(store: Store, pod: Obj) -> None:
    """The pod was bound to a node: its WaitForFirstConsumer claims bind now."""
    for _, claim in _claims(store, pod):
        if claim is not None and claim["status"].get("phase") != "Bound":
            _bind(store, claim)
