"""Azure's view of a VM as a NodeState (what `query` reports).

From the VM's instance view (`statuses`: `ProvisioningState/<x>`, `PowerState/<y>`):
running -> RUNNING; creating/starting -> PENDING; deallocated/stopped -> STOPPED, or
PREEMPTED for a spot VM (Azure evicts spot VMs; launcher never stops them); a VM that
is gone while its resource group still exists -> PREEMPTED for spot (eviction policy
Delete), else TERMINATED; deleting -> TERMINATED.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.base import NodeState


def power_state(view: dict[str, Any]) -> tuple[str, str]:
    """(provisioning state, power state) codes of an instance view, lower case."""
    prov = power = ""
    for st in view.get("statuses") or []:
        code = str(st.get("code", "")).lower()
        if code.startswith("provisioningstate/"):
            prov = code.split("/", 1)[1]
        elif code.startswith("powerstate/"):
            power = code.split("/", 1)[1]
    return prov, power


def node_state(vm: dict[str, Any] | None, spot: bool) -> NodeState:
    """Azure's view of one VM of a live group (None: the VM is gone) as a NodeState."""
    if vm is None:
        return NodeState.PREEMPTED if spot else NodeState.TERMINATED
    props = vm.get("properties") or {}
    spot = spot or props.get("priority") == "Spot"
    prov, power = power_state(props.get("instanceView") or {})
    prov = prov or str(props.get("provisioningState", "")).lower()
    if prov == "deleting":
        return NodeState.TERMINATED
    if power in ("deallocated", "deallocating", "stopped", "stopping"):
        return NodeState.PREEMPTED if spot else NodeState.STOPPED
    if power == "running" and prov in ("succeeded", "updating", ""):
        return NodeState.RUNNING
    if prov in ("creating", "updating") or power in ("starting", ""):
        return NodeState.PENDING
    if prov == "failed":
        return NodeState.UNKNOWN
    return NodeState.UNKNOWN
