"""Catalog offers read live from configured Slurm clusters (sinfo + scontrol show node).

One offer per (cluster, partition, node shape, GPUs asked per node): region = the
cluster's name, zone = the partition, instance type `a100x2of4` (2 of the 4 typed a100
GPUs of a node; `gpux2of4` for untyped GRES; `cpu` for GPU-less nodes). A node may be
shared, so every count from 1 to the node's GPUs is offered, with the node's vCPUs and
memory in the same proportion. Price = `pricing` (per GPU-hour) x GPUs, 0 by default.
`max_nodes` = the usable nodes of that shape, capped by the partition's MaxNodes.
The accelerator is the partition's `gpu_models` entry when config names one, else the
GRES type upper-cased (`a100` -> `A100`), else `GPU` (untyped GRES: a task cannot ask
for `GPU` by name, so give untyped partitions a `gpu_models` entry).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from launcher.catalog.offer import Offer
from launcher.clouds.base import CloudError
from launcher.clouds.slurm.client import CLOUD, SlurmClient
from launcher.clouds.slurm.parse import NodeRecord, PartitionRow
from launcher.config.slurm import SlurmCluster

log = logging.getLogger(__name__)
UNTYPED = "gpu"
_TYPE_RE = re.compile(r"^(?P<label>[A-Za-z0-9_.-]+?)x(?P<k>\d+)of(?P<g>\d+)$")


@dataclass(frozen=True)
class NodeShape:
    """Nodes of one partition with the same GPU type and count."""

    partition: PartitionRow
    gpu_type: str | None
    gpus: int
    cpus: int
    memory_mib: int
    nodes: tuple[NodeRecord, ...]

    def cpus_for(self, k: int) -> int:
        """The vCPUs an offer of `k` of the node's GPUs promises (its share; all without
        GPUs): what the allocation asks for per node (`--cpus-per-task`)."""
        share = k / self.gpus if self.gpus else 1.0
        return max(1, int(self.cpus * share))

    @property
    def label(self) -> str:
        return self.gpu_type or UNTYPED

    @property
    def max_nodes(self) -> int:
        usable = sum(1 for n in self.nodes if n.usable)
        cap = self.partition.max_nodes
        return usable if cap is None else min(usable, cap)

    def free_nodes(self, gpus_per_node: int) -> int:
        """Usable nodes with at least `gpus_per_node` GPUs not allocated (AllocTRES/GresUsed)."""
        return sum(1 for n in self.nodes if n.usable and n.gpus_free >= gpus_per_node)


def instance_type(label: str, k: int, g: int) -> str:
    return "cpu" if g == 0 else f"{label}x{k}of{g}"


def parse_instance_type(name: str) -> tuple[str | None, int, int]:
    """`a100x2of4` -> ("a100", 2, 4); `gpux2of4` -> (None, 2, 4); `cpu` -> (None, 0, 0).
    Raises ValueError for anything else."""
    if name == "cpu":
        return None, 0, 0
    m = _TYPE_RE.match(name)
    if not m:
        raise ValueError(f"'{name}' is not a Slurm instance type (e.g. a100x2of4, gpux1of8, cpu)")
    label = m.group("label")
    return (None if label == UNTYPED else label), int(m.group("k")), int(m.group("g"))


def accelerator_name(gpu_type: str | None) -> str:
    return gpu_type.upper() if gpu_type else "GPU"


def node_shapes(cluster: SlurmCluster, client: SlurmClient) -> list[NodeShape]:
    """The shapes of the cluster's partitions (configured ones only, when listed),
    the default partition first. Raises CloudError when the cluster does not answer."""
    parts = client.partitions()
    nodes = client.nodes()
    wanted = set(cluster.partitions)
    shapes = []
    for p in sorted(parts, key=lambda r: (not r.default, r.name)):
        if wanted and p.name not in wanted:
            continue
        groups: dict[tuple[str | None, int], list[NodeRecord]] = {}
        for n in nodes:
            if p.name in n.partitions:
                groups.setdefault((n.gpu_type, n.gpus), []).append(n)
        for (gtype, gpus), members in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
            shapes.append(NodeShape(p, gtype, gpus, min(n.cpus for n in members),
                                    min(n.memory_mib for n in members), tuple(members)))
    return shapes


def shape_offers(cluster: SlurmCluster, shapes: list[NodeShape], source: str) -> list[Offer]:
    fetched = datetime.now(UTC).isoformat(timespec="seconds")
    out = []
    for s in shapes:
        if not s.partition.up or s.max_nodes == 0:
            continue
        fab = cluster.fabric.get(s.partition.name)
        for k in range(1, s.gpus + 1) if s.gpus else [0]:
            share = k / s.gpus if s.gpus else 1.0
            out.append(Offer(
                cloud=CLOUD, region=cluster.name, zone=s.partition.name,
                instance_type=instance_type(s.label, k, s.gpus),
                accelerator=(cluster.gpu_models.get(s.partition.name) or accelerator_name(s.gpu_type))
                if k else None,
                accelerator_count=float(k), accelerator_memory_gib=None,
                vcpus=float(s.cpus_for(k)),
                memory_gib=round(s.memory_mib * share / 1024, 2),
                price=round(cluster.pricing * k, 6), spot_price=None,
                fabric=fab.fabric if fab else None, fabric_gbps=fab.gbps if fab else None,
                nvlink=None, max_nodes=s.max_nodes, arch="x86_64", source=source,
                fetched_at=fetched,
            ))  # fmt: skip
    return out


def slurm_offers() -> list[Offer]:
    """Offers of every configured cluster that answers now (one that does not is
    logged and contributes none). Raises ConfigError for a malformed config."""
    from launcher.config.settings import load_config

    out: list[Offer] = []
    for cluster in load_config().slurm.clusters.values():
        client = SlurmClient(cluster)
        try:
            shapes = node_shapes(cluster, client)
        except CloudError as exc:
            log.warning("no offers from Slurm cluster '%s': %s", cluster.name, exc)
            continue
        out.extend(shape_offers(cluster, shapes, f"sinfo/scontrol on {cluster.login}"))
    return out
