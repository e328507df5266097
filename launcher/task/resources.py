"""Resources: what a task asks to run on.

CONTRACT (shared with the optimizer; do not change field names or meaning):
`ResourceCandidate` is one fully expanded alternative of a task's resources.
`Task.candidates()` returns the list of them: one per (any_of entry x
accelerator alternative), with `preference` giving the order for `ordered`
lists / accelerator lists (0 = most preferred); unordered sets share one
preference value, so only price decides between them.

Below the contract types: the task-side model of `resources:` as written
(`AcceleratorChoice`, `AcceleratorRequest`, `Resources` = one partial mapping,
`ResourcesSpec` = base + `any_of`/`ordered` alternatives) and the expansion into
candidates. Parsing lives in `launcher.task.resources_parser`; this module stays
import-light because the optimizer (and so `launcher gpus`) imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# Fabrics a catalog row (and an SSH pool in config.yaml) may carry.
FABRICS = ("infiniband", "efa", "roce", "tcpx", "ethernet")
# Fabrics that give RDMA between nodes (what `fabric: rdma` asks for).
RDMA_FABRICS = frozenset({"infiniband", "efa", "roce"})
# SkyPilot's `network_tier: best`: the best GPU network each cloud offers for the
# instance (EFA on AWS, GPUDirect-TCPX/TCPXO or RDMA on GCP, InfiniBand elsewhere).
BEST_FABRICS = RDMA_FABRICS | {"tcpx"}
# What `resources.network.fabric` may ask for. `rdma` = any of infiniband/efa/roce;
# `best` = any of those or GPUDirect-TCPX (what SkyPilot's `network_tier: best` means).
REQUESTABLE_FABRICS = ("infiniband", "efa", "roce", "tcpx", "rdma", "best", "any")


@dataclass(frozen=True, slots=True)
class NetworkRequest:
    fabric: str = "any"  # one of REQUESTABLE_FABRICS
    min_gbps: float | None = None  # minimum inter-node bandwidth per node


@dataclass(frozen=True, slots=True)
class ResourceCandidate:
    accelerator: str | None  # canonical catalog name; None = no accelerator asked for
    accelerator_count: float  # per node; 0 when accelerator is None
    cpus: float | None = None  # vCPUs per node
    cpus_at_least: bool = True  # "8+" -> True, "8" -> False (exactly 8)
    memory_gib: float | None = None  # host memory per node
    memory_at_least: bool = True
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    use_spot: bool = False
    max_hourly_cost: float | None = None  # cap on the whole placement's $/h (all nodes)
    network: NetworkRequest | None = None
    preference: int = 0
    # Carried through to provisioning; the optimizer ignores them.
    disk_size_gb: int | None = None
    image_id: str | None = None
    ports: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


# ---------------------------------------------------------------------------
# The task-side model of `resources:` (parsed by launcher.task.resources_parser).


@dataclass(frozen=True, slots=True)
class AcceleratorChoice:
    """One accelerator alternative: a name and a per-node count (fractions below 1 allowed)."""

    name: str
    count: float

    def __str__(self) -> str:
        return f"{self.name}:{format_number(self.count)}"


@dataclass(frozen=True, slots=True)
class AcceleratorRequest:
    """`accelerators:` as written. `ordered` = a YAML list (try in this order);
    otherwise any choice will do (one choice, or a set / several-key mapping)."""

    choices: tuple[AcceleratorChoice, ...]
    ordered: bool = False

    def to_yaml_value(self) -> str | list[str] | dict[str, None]:
        if len(self.choices) == 1:
            return str(self.choices[0])
        if self.ordered:
            return [str(c) for c in self.choices]
        return {str(c): None for c in self.choices}


Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Resources:
    """One `resources` mapping as written: the base, or one `any_of`/`ordered` entry.

    Every field is optional (None = not set here), so an entry can be laid over
    the base with `merged`. `path` is where it was written (for error messages).
    """

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    accelerators: AcceleratorRequest | None = None
    cpus: float | None = None
    cpus_at_least: bool = False  # "8+" -> True; "8" / 8 -> exactly 8
    memory_gib: float | None = None
    memory_at_least: bool = False
    instance_type: str | None = None
    use_spot: bool | None = None
    disk_size_gb: int | None = None
    disk_tier: str | None = None
    image_id: str | None = None
    image_id_by_region: tuple[tuple[str, str], ...] | None = None  # `image_id: {region: id}`
    ports: tuple[str, ...] | None = None  # "8080" or "10000-10010"
    labels: tuple[tuple[str, str], ...] | None = None
    max_hourly_cost: float | None = None  # $/h for the whole placement (all nodes)
    network: NetworkRequest | None = None
    path: Path = field(default=("resources",), compare=False)

    def merged(self, override: Resources) -> Resources:
        """`self` with every field `override` sets replaced (linked fields move together)."""
        changes: dict[str, object] = {}
        for name in _SIMPLE_FIELDS:
            value = getattr(override, name)
            if value is not None:
                changes[name] = value
        if override.cpus is not None:
            changes["cpus_at_least"] = override.cpus_at_least
        if override.memory_gib is not None:
            changes["memory_at_least"] = override.memory_at_least
        if override.image_id is not None or override.image_id_by_region is not None:
            changes["image_id"] = override.image_id
            changes["image_id_by_region"] = override.image_id_by_region
        changes["path"] = override.path
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        """SkyPilot-format mapping that parses back to an equal `Resources`."""
        out: dict[str, object] = {}
        for name in (
            "cloud",
            "region",
            "zone",
            "instance_type",
            "use_spot",
            "disk_size_gb",
            "disk_tier",
            "max_hourly_cost",
        ):
            value = getattr(self, name)
            if value is not None:
                out["disk_size" if name == "disk_size_gb" else name] = value
        if self.accelerators is not None:
            out["accelerators"] = self.accelerators.to_yaml_value()
        if self.cpus is not None:
            out["cpus"] = format_number(self.cpus) + ("+" if self.cpus_at_least else "")
        if self.memory_gib is not None:
            out["memory"] = format_number(self.memory_gib) + ("+" if self.memory_at_least else "")
        if self.image_id is not None:
            out["image_id"] = self.image_id
        elif self.image_id_by_region is not None:
            out["image_id"] = dict(self.image_id_by_region)
        if self.ports is not None:
            out["ports"] = list(self.ports)
        if self.labels is not None:
            out["labels"] = dict(self.labels)
        if self.network is not None:
            network: dict[str, object] = {"fabric": self.network.fabric}
            if self.network.min_gbps is not None:
                network["min_gbps"] = self.network.min_gbps
            out["network"] = network
        return out


_SIMPLE_FIELDS = (
    "cloud",
    "region",
    "zone",
    "accelerators",
    "cpus",
    "memory_gib",
    "instance_type",
    "use_spot",
    "disk_size_gb",
    "disk_tier",
    "ports",
    "labels",
    "max_hourly_cost",
    "network",
)


@dataclass(frozen=True)
class ResourcesSpec:
    """The whole `resources:` section: a base plus optional alternatives.

    `alternatives` are the `any_of` entries (`ordered=False`: price decides) or the
    `ordered` entries (`ordered=True`: earlier is preferred); each is laid over `base`.
    """

    base: Resources = Resources()
    alternatives: tuple[Resources, ...] = ()
    ordered: bool = False
    # Notes on what was written but set aside (an alternative that can never be placed
    # here, e.g. a pod-only key; `candidates` read as any_of), each
    # naming the entry and why; the rest of the task stands.
    dropped: tuple[str, ...] = field(default=(), compare=False)

    def expanded(self) -> list[Resources]:
        """The effective resources of each alternative (just the base when there are none)."""
        if not self.alternatives:
            return [self.base]
        return [self.base.merged(alt) for alt in self.alternatives]

    def all_written(self) -> list[Resources]:
        """The base and every alternative exactly as written (for renaming accelerators)."""
        return [self.base, *self.alternatives]

    def candidates(self) -> list[ResourceCandidate]:
        """Cartesian expansion: alternatives x accelerator choices x image regions.

        `preference` is the dense rank of (position in `ordered`, position in an
        accelerator list); unordered sets and `any_of` entries count as position 0.
        Identical candidates are kept once, at their best preference.
        """
        keyed: list[tuple[tuple[int, int], ResourceCandidate]] = []
        for index, res in enumerate(self.expanded()):
            outer = index if self.ordered else 0
            choices: tuple[AcceleratorChoice | None, ...] = (None,)
            inner_ordered = False
            if res.accelerators is not None:
                choices = res.accelerators.choices
                inner_ordered = res.accelerators.ordered
            images: list[tuple[str | None, str | None]]
            if res.image_id_by_region is not None:
                images = [
                    (reg, img)
                    for reg, img in res.image_id_by_region
                    if res.region is None or reg == res.region
                ]
            else:
                images = [(res.region, res.image_id)]
            for position, choice in enumerate(choices):
                inner = position if inner_ordered else 0
                for region, image in images:
                    keyed.append(((outer, inner), _candidate(res, choice, region, image)))
        kept: dict[ResourceCandidate, tuple[int, int]] = {}
        for key, cand in sorted(keyed, key=lambda kc: kc[0]):  # stable: written order in a key
            kept.setdefault(cand, key)
        ranks = {key: rank for rank, key in enumerate(sorted(set(kept.values())))}
        out = [replace(cand, preference=ranks[key]) for cand, key in kept.items()]
        return out

    def to_dict(self) -> dict[str, object]:
        out = self.base.to_dict()
        if self.alternatives:
            out["ordered" if self.ordered else "any_of"] = [a.to_dict() for a in self.alternatives]
        return out


def _candidate(
    res: Resources, choice: AcceleratorChoice | None, region: str | None, image: str | None
) -> ResourceCandidate:
    return ResourceCandidate(
        accelerator=None if choice is None else choice.name,
        accelerator_count=0 if choice is None else choice.count,
        cpus=res.cpus,
        cpus_at_least=res.cpus_at_least if res.cpus is not None else True,
        memory_gib=res.memory_gib,
        memory_at_least=res.memory_at_least if res.memory_gib is not None else True,
        cloud=res.cloud,
        region=region,
        zone=res.zone,
        instance_type=res.instance_type,
        use_spot=bool(res.use_spot),
        max_hourly_cost=res.max_hourly_cost,
        network=res.network,
        disk_size_gb=res.disk_size_gb,
        image_id=image,
        ports=res.ports or (),
        labels=res.labels or (),
    )


def format_number(value: float) -> str:
    """8.0 -> '8', 0.5 -> '0.5' (shortest text that reads back to the same float)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
