"""Catalog offers read live from the nodes of each Kubernetes context launcher may use.

A node shape = the schedulable, Ready nodes of one context with the same GPU type, GPU
count and fabric (labels.py says how they are read), after dropping nodes whose
taints the context's pods do not tolerate (`pod_config.spec.tolerations`, plus the
GPU taints `nvidia.com/gpu` / `amd.com/gpu` a GPU pod always tolerates). One offer per
shape and GPUs per pod k (1..G): region = the context, no zone, instance type
`H100x2of8` (2 of a node's 8 H100s; `cpu4of32` for 4 of a CPU node's 32 vCPUs, in
powers of two), vCPUs and memory = 90% of the smallest node's allocatable share
(kubelet and daemonset pods need the rest; a CPU shape's part-node sizes are exact), price = the context's `pricing` per
GPU-hour x k (0 by default), fabric from the nodes, `max_nodes` = the shape's nodes
(one pod per node). Nodes are read once per `CACHE_S` per process.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from launcher.catalog.offer import Offer
from launcher.clouds.base import CloudError
from launcher.clouds.kubernetes import labels as L
from launcher.clouds.kubernetes.api import (
    CLOUD,
    TIMEOUT,
    KubeContext,
    as_cloud_error,
    contexts,
    core,
)

log = logging.getLogger(__name__)
CACHE_S = 10.0
SHARE = 0.9  # of a node's allocatable share a pod requests
_TYPE_RE = re.compile(r"^(?P<acc>.+?)x(?P<k>\d+)of(?P<g>\d+)$")
_CPU_RE = re.compile(r"^cpu(?P<k>\d+)of(?P<g>\d+)$")
_cache: dict[str, tuple[float, list[Any]]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class NodeView:
    """One node as the offers see it."""

    name: str
    labels: dict[str, str]
    cpus: float
    memory_gib: float
    accelerator: str | None
    gpu_label: str | None  # the label the accelerator was read from
    gpu_resource: str | None
    gpus: int
    fabric: L.Fabric | None
    taints: tuple[dict[str, Any], ...]
    schedulable: bool


@dataclass(frozen=True)
class Shape:
    accelerator: str | None
    gpus: int
    gpu_resource: str | None
    fabric: L.Fabric | None
    nodes: tuple[NodeView, ...] = field(default=())

    @property
    def cpus(self) -> float:
        return min(n.cpus for n in self.nodes)

    @property
    def memory_gib(self) -> float:
        return min(n.memory_gib for n in self.nodes)

    def label_terms(self) -> list[dict[str, Any]]:
        """nodeSelectorTerms (ORed) that pick exactly this shape's GPU nodes."""
        by_key: dict[str, set[str]] = {}
        for n in self.nodes:
            if n.gpu_label:
                by_key.setdefault(n.gpu_label, set()).add(n.labels[n.gpu_label])
        return [{"matchExpressions": [{"key": k, "operator": "In", "values": sorted(v)}]}
                for k, v in sorted(by_key.items())]


def node_ready(node: dict[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def node_view(node: dict[str, Any]) -> NodeView:
    """A NodeView of a node (the API's JSON)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = dict(meta.get("labels") or {})
    alloc = dict(status.get("allocatable") or {})
    res, gpus = L.gpu_resource(alloc)
    acc, key = L.gpu_type(labels) if gpus else (None, None)
    if gpus and acc is None:
        acc = "GPU" if res == L.NVIDIA_GPU else "AMD-GPU"
    taints = tuple({"key": t.get("key"), "value": t.get("value"), "effect": t.get("effect")}
                   for t in spec.get("taints") or [])
    return NodeView(meta["name"], labels, L.quantity(alloc.get("cpu", 0)),
                    L.quantity(alloc.get("memory", 0)) / 2**30, acc, key, res, gpus,
                    L.fabric(labels, alloc), taints,
                    node_ready(node) and not spec.get("unschedulable"))


def list_nodes(ctx_name: str) -> list[dict[str, Any]]:
    """The context's nodes as the API's JSON (no SDK models: a field the SDK's model
    does not expect must not break offers). Raises CloudError."""
    import json

    try:
        resp = core(ctx_name).list_node(_preload_content=False, _request_timeout=TIMEOUT)
        return list(json.loads(resp.data).get("items") or [])
    except Exception as exc:
        raise as_cloud_error(exc, ctx_name, "listing nodes") from None


def tolerated(view: NodeView, tolerations: list[dict[str, Any]]) -> bool:
    for t in view.taints:
        if t["effect"] not in ("NoSchedule", "NoExecute"):
            continue
        if view.gpus and t["key"] in (L.NVIDIA_GPU, L.AMD_GPU):
            continue
        if not any(_tolerates(tol, t) for tol in tolerations):
            return False
    return True


def _tolerates(tol: dict[str, Any], taint: dict[str, Any]) -> bool:
    if tol.get("effect") and tol["effect"] != taint["effect"]:
        return False
    if tol.get("operator") == "Exists":
        return not tol.get("key") or tol["key"] == taint["key"]
    return bool(tol.get("key") == taint["key"] and (tol.get("value") or "") == (taint.get("value") or ""))


def pod_tolerations(ctx: KubeContext) -> list[dict[str, Any]]:
    return list(((ctx.settings.pod_config.get("spec") or {}).get("tolerations")) or [])


def nodes(ctx: KubeContext, *, fresh: bool = False) -> list[NodeView]:
    """The context's nodes (cached CACHE_S unless `fresh`). Raises CloudError."""
    with _cache_lock:
        hit = _cache.get(ctx.name)
        if hit and not fresh and time.monotonic() - hit[0] < CACHE_S:
            return list(hit[1])
    views = [node_view(n) for n in list_nodes(ctx.name)]
    with _cache_lock:
        _cache[ctx.name] = (time.monotonic(), views)
    return views


def forget(ctx_name: str | None = None) -> None:
    with _cache_lock:
        if ctx_name is None:
            _cache.clear()
        else:
            _cache.pop(ctx_name, None)


def shapes(ctx: KubeContext, views: list[NodeView]) -> list[Shape]:
    """The context's usable node shapes (see the module docstring)."""
    tols = pod_tolerations(ctx)
    groups: dict[tuple[Any, ...], list[NodeView]] = {}
    for v in views:
        if v.schedulable and tolerated(v, tols):
            groups.setdefault((v.accelerator or "", v.gpus, v.gpu_resource or "", v.fabric), []).append(v)
    out = [Shape(acc or None, g, res or None, fab, tuple(members))
           for (acc, g, res, fab), members in groups.items()]
    return sorted(out, key=lambda s: (s.accelerator or "", s.gpus, s.fabric.fabric if s.fabric else ""))


def instance_type(shape: Shape, k: int) -> str:
    return f"{shape.accelerator}x{k}of{shape.gpus}" if shape.gpus else f"cpu{k}of{int(shape.cpus)}"


def parse_instance_type(name: str) -> tuple[str | None, int, int]:
    """`H100x2of8` -> ("H100", 2, 8); `cpu4of32` -> (None, 4, 32). ValueError otherwise."""
    m = _CPU_RE.match(name)
    if m:
        return None, int(m.group("k")), int(m.group("g"))
    m = _TYPE_RE.match(name)
    if not m:
        raise ValueError(f"'{name}' is not a Kubernetes instance type (e.g. H100x8of8, cpu4of32)")
    return m.group("acc"), int(m.group("k")), int(m.group("g"))


def cpu_sizes(total: int) -> list[int]:
    out, k = [], 1
    while k < total:
        out.append(k)
        k *= 2
    return [*out, total] if total >= 1 else []


def pod_size(shape: Shape, k: int) -> tuple[int, float]:
    """(vCPUs, GiB memory) a pod of `k` (GPUs, or vCPUs of a CPU shape) requests."""
    share = k / shape.gpus if shape.gpus else k / max(1.0, shape.cpus)
    if not shape.gpus and k < int(shape.cpus):  # part of a CPU node: exactly k vCPUs
        return k, max(0.5, round(shape.memory_gib * share, 2))
    return max(1, int(shape.cpus * share * SHARE)), max(0.5, round(shape.memory_gib * share * SHARE, 2))


def shape_offers(ctx: KubeContext, found: list[Shape]) -> list[Offer]:
    fetched = datetime.now(UTC).isoformat(timespec="seconds")
    out = []
    for s in found:
        counts = range(1, s.gpus + 1) if s.gpus else cpu_sizes(int(s.cpus))
        for k in counts:
            cpus, mem = pod_size(s, k)
            out.append(Offer(
                cloud=CLOUD, region=ctx.name, zone=None, instance_type=instance_type(s, k),
                accelerator=s.accelerator if s.gpus else None,
                accelerator_count=float(k) if s.gpus else 0.0, accelerator_memory_gib=None,
                vcpus=float(cpus), memory_gib=mem,
                price=round(ctx.settings.pricing * (k if s.gpus else 0), 6), spot_price=None,
                fabric=s.fabric.fabric if s.fabric else None,
                fabric_gbps=s.fabric.gbps if s.fabric else None, nvlink=None,
                max_nodes=len(s.nodes), arch="x86_64",
                source=f"nodes of Kubernetes context {ctx.name}", fetched_at=fetched,
            ))  # fmt: skip
    return out


def kubernetes_offers() -> list[Offer]:
    """Offers of every usable context that answers now (one that does not is logged
    and contributes none). Raises ConfigError for a malformed config."""
    out: list[Offer] = []
    try:
        ctxs = contexts()
    except CloudError as exc:
        log.warning("no Kubernetes offers: %s", exc)
        return []
    for ctx in ctxs:
        try:
            out.extend(shape_offers(ctx, shapes(ctx, nodes(ctx))))
        except CloudError as exc:
            log.warning("no offers from Kubernetes context '%s': %s", ctx.name, exc)
    return out


def largest_node(views: list[NodeView]) -> str:
    """`gpu-7 (8x H100, 96 vCPUs, 1024 GiB)`: the node with the most GPUs, then vCPUs."""
    if not views:
        return "none (the context has no nodes)"
    n = max(views, key=lambda v: (v.gpus, v.cpus, v.memory_gib))
    gpus = f"{n.gpus}x {n.accelerator}, " if n.gpus else ""
    return f"{n.name} ({gpus}{n.cpus:g} vCPUs, {n.memory_gib:.0f} GiB)"


def gpu_usage(ctx: KubeContext) -> dict[str, tuple[int, int]]:
    """node name -> (GPUs free, GPUs allocatable) for the context's GPU nodes (the GPU
    requests of its live pods counted against allocatable). Raises CloudError."""
    views = [v for v in nodes(ctx, fresh=True) if v.gpus]
    import json

    try:
        pods = json.loads(core(ctx.name).list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _preload_content=False, _request_timeout=TIMEOUT).data).get("items") or []
    except Exception as exc:
        raise as_cloud_error(exc, ctx.name, "listing pods") from None
    used: dict[str, int] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node:
            continue
        for c in p["spec"].get("containers") or []:
            res = c.get("resources") or {}
            lim = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            for key in (L.NVIDIA_GPU, L.AMD_GPU):
                if key in lim:
                    used[node] = used.get(node, 0) + int(L.quantity(lim[key]))
    return {v.name: (max(0, v.gpus - used.get(v.name, 0)), v.gpus) for v in views}


@dataclass(frozen=True)
class GpuNodes:
    """One GPU node type of a context: how many nodes, and GPUs free of total."""

    context: str
    accelerator: str
    gpus_per_node: int
    nodes: int
    free: int
    total: int


def gpu_node_summary() -> list[GpuNodes]:
    """Per context and GPU node type (accelerator, GPUs per node): nodes, free and total
    GPUs (live pods' requests counted). A context that does not answer is skipped."""
    out = []
    try:
        ctxs = contexts()
    except CloudError:
        return []
    for ctx in ctxs:
        try:
            usage = gpu_usage(ctx)
            views = [v for v in nodes(ctx) if v.gpus]
        except CloudError as exc:
            log.warning("no GPU usage from Kubernetes context '%s': %s", ctx.name, exc)
            continue
        groups: dict[tuple[str, int], list[NodeView]] = {}
        for v in views:
            groups.setdefault((v.accelerator or "GPU", v.gpus), []).append(v)
        for (acc, g), members in sorted(groups.items()):
            free = sum(usage.get(v.name, (0, 0))[0] for v in members if v.schedulable)
            out.append(GpuNodes(ctx.name, acc, g, len(members), free, g * len(members)))
    return out
