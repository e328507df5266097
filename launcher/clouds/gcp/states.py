"""GCE's view of instances as NodeStates, and the small readers cloud.py uses.

- `node_state(status, preempted)`: PROVISIONING/STAGING/REPAIRING -> PENDING, RUNNING ->
  RUNNING, TERMINATED (GCE's word for stopped) -> PREEMPTED when a
  `compute.instances.preempted` operation names the instance, else STOPPED;
  STOPPING/SUSPENDING/SUSPENDED -> STOPPED.
- `preempted_names`: the instances of a zone with a preemption operation (zone
  operations listed with `operationType="compute.instances.preempted"`, Google's own
  way to find preemptions).
"""

from __future__ import annotations

import re
from typing import Any

from launcher.clouds.base import NodeState
from launcher.clouds.gcp.ops import Sleep, call
from launcher.clouds.gcp.provision import RANK_LABEL

PREEMPTED_OP = "compute.instances.preempted"
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}\Z")


def node_state(status: str, preempted: bool) -> NodeState:
    if status in ("PROVISIONING", "STAGING", "REPAIRING"):
        return NodeState.PENDING
    if status == "RUNNING":
        return NodeState.RUNNING
    if status == "TERMINATED" and preempted:
        return NodeState.PREEMPTED
    if status in ("STOPPING", "TERMINATED", "SUSPENDING", "SUSPENDED"):
        return NodeState.STOPPED
    return NodeState.UNKNOWN


def rank_key(inst: Any) -> tuple[int, str]:
    rank = inst.labels.get(RANK_LABEL, "")
    return (int(rank) if rank.isdigit() else 1 << 30, str(inst.name))


def metadata(inst: Any, key: str) -> str | None:
    for item in getattr(getattr(inst, "metadata", None), "items", None) or []:
        if item.key == key:
            return str(item.value)
    return None


def label_ok(key: str, value: str) -> bool:
    return bool(_LABEL_KEY.match(key)) and bool(_LABEL_VALUE.match(value))


def preempted_names(clients: Any, project: str, zone: str, sleep: Sleep) -> set[str]:
    """Names of instances with a `compute.instances.preempted` operation in `zone`."""
    def run() -> set[str]:
        from google.cloud import compute_v1

        ops = clients.zone_operations().list(request=compute_v1.ListZoneOperationsRequest(
            project=project, zone=zone, filter=f'operationType="{PREEMPTED_OP}"'))
        return {str(op.target_link).rstrip("/").rsplit("/", 1)[-1] for op in ops}
    found: set[str] = call(run, action="list preemption operations", zone=zone, sleep=sleep)
    return found
