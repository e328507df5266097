"""What a Kubernetes node says about its GPUs and network, read from its labels and
allocatable (no SDK: nodes are the API's JSON dicts).

GPU type, first label found wins:
  skypilot.co/accelerator            SkyPilot's own (`h100`, `a100-80gb`)
  cloud.google.com/gke-accelerator   GKE (`nvidia-h100-80gb`, `nvidia-tesla-t4`)
  karpenter.k8s.aws/instance-gpu-name  Karpenter on EKS (`h100`, `a10g`)
  nvidia.com/gpu.product             NVIDIA GPU Feature Discovery (`NVIDIA-H100-80GB-HBM3`)
  gpu.nvidia.com/class               CoreWeave (`H100_NVLINK_80GB`)
  amd.com/gpu.product-name           AMD GPU operator's labeller (`AMD_Instinct_MI300X_OAM`)
The value is turned into words and named as nvidia-smi's product names are
(launcher.catalog.local.canonical_gpu_name): `NVIDIA-H100-80GB-HBM3` -> H100,
`nvidia-a100-80gb` -> A100-80GB, `H100_NVLINK_80GB` -> H100.
GPU count: allocatable `nvidia.com/gpu`, else `amd.com/gpu`.

Fabric: allocatable `rdma/*` (the RDMA shared device plugin) or `nvidia.com/hostdev`
(SR-IOV) -> infiniband, unless the node's labels say RoCE; `vpc.amazonaws.com/efa` -> efa;
labels `feature.node.kubernetes.io/rdma.capable|available=true` (Node Feature
Discovery) or `ib.coreweave.cloud/speed` (CoreWeave; its value is the speed) ->
infiniband. The resource to request per pod is returned with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

GPU_LABELS = (
    "skypilot.co/accelerator",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
    "nvidia.com/gpu.product",
    "gpu.nvidia.com/class",
    "amd.com/gpu.product-name",
)
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
EFA = "vpc.amazonaws.com/efa"
_IB_LABELS = ("feature.node.kubernetes.io/rdma.capable", "feature.node.kubernetes.io/rdma.available")
_SPEED_LABEL = "ib.coreweave.cloud/speed"
_ROCE_LABEL = "launcher.dev/fabric"  # an operator's explicit word wins (infiniband|roce|efa)
_UNITS = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40, "m": 1e-3}


def quantity(text: Any) -> float:
    """A resource.Quantity ("500m", "64Gi", "8") as a number (CPU in cores, bytes)."""
    s = str(text).strip()
    m = re.match(r"^([0-9.]+)([a-zA-Z]*)$", s)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(m.group(1)) * _UNITS.get(m.group(2), 1.0)


def gpu_type(labels: dict[str, str]) -> tuple[str | None, str | None]:
    """(accelerator name, the label it came from); (None, None) without any."""
    from launcher.catalog.local import canonical_gpu_name

    for key in GPU_LABELS:
        value = labels.get(key)
        if value:
            words = re.sub(r"[-_]+", " ", value)
            words = re.sub(r"\b(tesla|instinct|amd|oam)\b", " ", words, flags=re.IGNORECASE)
            return canonical_gpu_name(words.strip()), key
    return None, None


def gpu_resource(alloc: dict[str, Any]) -> tuple[str | None, int]:
    """(the extended resource GPUs are requested by, how many the node has)."""
    for res in (NVIDIA_GPU, AMD_GPU):
        n = int(quantity(alloc.get(res, 0)))
        if n > 0:
            return res, n
    return None, 0


@dataclass(frozen=True)
class Fabric:
    fabric: str  # one of launcher.task.resources.FABRICS
    gbps: float | None
    resource: str | None  # the extended resource a pod requests for it (None: none needed)
    per_node: int  # how many of it the node has (a pod asks for all it may use)


def fabric(labels: dict[str, str], alloc: dict[str, Any]) -> Fabric | None:
    """The node's inter-node fabric (see the module docstring), None when it shows none."""
    speed = labels.get(_SPEED_LABEL)
    gbps = None
    if speed:
        m = re.match(r"^(\d+(?:\.\d+)?)\s*[gG]", speed)
        gbps = float(m.group(1)) if m else None
    word = labels.get(_ROCE_LABEL)
    for res, value in sorted(alloc.items()):
        n = int(quantity(value)) if re.match(r"^[0-9.]+[a-zA-Z]*$", str(value)) else 0
        if n <= 0:
            continue
        if res == EFA:
            return Fabric("efa", gbps, res, n)
        if res.startswith("rdma/") or res == "nvidia.com/hostdev":
            return Fabric(word if word in ("roce", "infiniband") else "infiniband", gbps, res, n)
    if speed or any(labels.get(k) == "true" for k in _IB_LABELS):
        return Fabric(word if word in ("roce", "infiniband") else "infiniband", gbps, None, 0)
    return None
