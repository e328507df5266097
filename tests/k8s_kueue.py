"""A minimal Kueue in the Kubernetes API fake (tests/k8s_store.py): the plain-pod group
integration (KEP-976), as far as a gang of launcher's needs it.

- webhook (on pod create): a pod labelled `kueue.x-k8s.io/queue-name` gets the
  scheduling gate `kueue.x-k8s.io/admission` (unless it has it) and the label
  `kueue.x-k8s.io/managed=true`. A pod with scheduling gates is never scheduled: it is
  Pending with PodScheduled=False reason SchedulingGated, as the API server marks it.
- admission (before every scheduling pass): a pod group (`kueue.x-k8s.io/pod-group-name`,
  namespace) is admitted when all `kueue.x-k8s.io/pod-group-total-count` of its pods
  exist, its LocalQueue is one of the store's `kueue_queues`, admission is not withheld
  (`kueue_withhold`, the test knob: a queue whose quota never frees) and the whole group
  fits at once, each pod on its own node (all or nothing, no partial admission). Admission
  removes the gate from every pod of the group, so the scheduler binds them; an
  inadmissible group stays gated, with a Pending event saying why.

Not modelled: Workload objects, ClusterQueue quotas and cohorts, preemption by Kueue,
waitForPodsReady's own eviction (launcher's `provision_timeout` plays that part).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from tests.k8s_store import Obj

if TYPE_CHECKING:
    from tests.k8s_store import Store

QUEUE = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
GATE = "kueue.x-k8s.io/admission"
MANAGED = "kueue.x-k8s.io/managed"


def webhook(body: Obj) -> None:
    """Gate a queued pod (at create, before it is stored)."""
    meta = body.setdefault("metadata", {})
    if QUEUE not in (meta.get("labels") or {}):
        return
    meta["labels"][MANAGED] = "true"
    gates = body.setdefault("spec", {}).setdefault("schedulingGates", [])
    if not any(g.get("name") == GATE for g in gates):
        gates.append({"name": GATE})


def gated(pod: Obj) -> bool:
    return bool(pod["spec"].get("schedulingGates"))


def admit(store: Store) -> None:
    """Admit every pod group that may be (see the module docstring)."""
    groups: dict[tuple[str, str], list[Obj]] = {}
    for pod in store.items("pods"):
        labels = pod["metadata"].get("labels") or {}
        if GROUP in labels and "deletionTimestamp" not in pod["metadata"]:
            groups.setdefault((pod["metadata"]["namespace"], labels[GROUP]), []).append(pod)
    for (_, name), pods in groups.items():
        waiting = [p for p in pods if any(g.get("name") == GATE for g in p["spec"].get("schedulingGates") or [])]
        if not waiting:
            continue
        why = _inadmissible(store, pods)
        if why:
            for p in waiting:
                store.event(p, "Pending", why, "Normal", "kueue-admission")
            continue
        for p in waiting:
            p = copy.deepcopy(p)
            p["spec"]["schedulingGates"] = [g for g in p["spec"]["schedulingGates"] if g.get("name") != GATE]
            store._put("pods", p["metadata"]["namespace"], p, "MODIFIED")
            store.event(p, "Admitted", f"Admitted by ClusterQueue (pod group {name})", "Normal",
                        "kueue-admission")


def _inadmissible(store: Store, pods: list[Obj]) -> str | None:
    first = pods[0]["metadata"]
    total = int((first.get("annotations") or {}).get(TOTAL, "0") or 0)
    queue = (first.get("labels") or {}).get(QUEUE, "")
    if len(pods) != total:
        return f"pod group has {len(pods)} of {total} pods"
    if queue not in store.kueue_queues:
        return f"LocalQueue {queue} doesn't exist"
    if store.kueue_withhold:
        return "couldn't assign flavors to pod set main: insufficient quota"
    taken: set[str] = set()
    for pod in pods:
        if pod["spec"].get("nodeName"):
            taken.add(pod["spec"]["nodeName"])
            continue
        node = next((n for n in store.items("nodes") if n["metadata"]["name"] not in taken
                     and store._why_not(pod, n) is None), None)
        if node is None:
            return "couldn't assign flavors to pod set main: the group does not fit at once"
        taken.add(node["metadata"]["name"])
    return None
