"""What a pod's phase, conditions and container states mean for launcher (pods are the
API's JSON dicts).

| the pod shows                                              | NodeState  | why            |
|------------------------------------------------------------|------------|----------------|
| phase Failed, reason Evicted (kubelet node-pressure)       | PREEMPTED  | evicted        |
| condition DisruptionTarget PreemptionByScheduler            | PREEMPTED  | preempted      |
| DisruptionTarget DeletionByTaintManager / its node not Ready, phase Unknown | PREEMPTED | node lost |
| other DisruptionTarget (EvictionByEvictionAPI, TerminationByKubelet...) | PREEMPTED | disrupted |
| a container terminated OOMKilled                           | TERMINATED | OOMKilled      |
| phase Succeeded                                            | TERMINATED | completed      |
| phase Failed otherwise                                     | TERMINATED | failed         |
| a container waiting ErrImagePull/ImagePullBackOff/InvalidImageName, CreateContainerConfigError | TERMINATED | image error (the user's) |
| phase Pending otherwise                                    | PENDING    |                |
| phase Running                                              | RUNNING    |                |

Preemption-like ends (the first four rows) recover a managed job as a spot
preemption does; the others are the job's own outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.clouds.base import NodeState

IMAGE_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                          "ErrImageNeverPull", "CreateContainerConfigError"})
_DISRUPTION_WHY = {"PreemptionByScheduler": "preempted", "DeletionByTaintManager": "node lost",
                   "TerminationByKubelet": "evicted", "EvictionByEvictionAPI": "evicted"}


@dataclass(frozen=True)
class PodVerdict:
    state: NodeState
    why: str  # "evicted", "preempted", "node lost", "OOMKilled", "completed", "image error", ...
    detail: str = ""  # the cluster's own message

    @property
    def text(self) -> str:
        return f"{self.why}: {self.detail}" if self.detail else self.why


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    st = pod.get("status") or {}
    return list(st.get("containerStatuses") or []) + list(st.get("initContainerStatuses") or [])


def verdict(pod: dict[str, Any], node_ready: bool | None = None) -> PodVerdict:
    """The pod's state (see the module docstring); `node_ready` False: its node stopped
    reporting (Ready not True)."""
    st = pod.get("status") or {}
    phase = st.get("phase") or "Pending"
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    dis = conds.get("DisruptionTarget")
    if dis is not None and dis.get("status") == "True":
        return PodVerdict(NodeState.PREEMPTED, _DISRUPTION_WHY.get(dis.get("reason") or "", "disrupted"),
                          dis.get("message") or dis.get("reason") or "")
    if phase == "Failed" and st.get("reason") == "Evicted":
        return PodVerdict(NodeState.PREEMPTED, "evicted", st.get("message") or "")
    for cs in _containers(pod):
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("reason") == "OOMKilled":
            return PodVerdict(NodeState.TERMINATED, "OOMKilled",
                              f"container {cs.get('name')} ran out of memory (exit {term.get('exitCode')})")
        wait = (cs.get("state") or {}).get("waiting") or {}
        if wait.get("reason") in IMAGE_ERRORS:
            return PodVerdict(NodeState.TERMINATED, "image error",
                              f"{wait['reason']}: {wait.get('message') or cs.get('image') or ''}")
    if phase == "Unknown" or (node_ready is False and phase in ("Running", "Pending")
                              and (pod.get("spec") or {}).get("nodeName")):
        return PodVerdict(NodeState.PREEMPTED, "node lost",
                          f"node {(pod.get('spec') or {}).get('nodeName')} stopped reporting")
    if phase == "Succeeded":
        return PodVerdict(NodeState.TERMINATED, "completed")
    if phase == "Failed":
        codes = [((cs.get("state") or {}).get("terminated") or {}).get("exitCode") for cs in _containers(pod)]
        return PodVerdict(NodeState.TERMINATED, "failed",
                          st.get("message") or st.get("reason") or f"exit codes {codes}")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return PodVerdict(NodeState.TERMINATED, "deleted")
    if phase == "Running":
        return PodVerdict(NodeState.RUNNING, "running")
    return PodVerdict(NodeState.PENDING, "pending", unschedulable(pod) or "")


def unschedulable(pod: dict[str, Any]) -> str | None:
    """The scheduler's message when the pod is Pending as Unschedulable, else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" \
                and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "Unschedulable")
    return None
