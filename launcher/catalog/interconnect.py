"""Interconnect facts per (cloud, instance type) and gang-size rules (build step only).

Two inputs, both with a source per row:
- the interconnect reference (`../shared/interconnect-reference.csv`): cloud,
  instance_type, fabric, interconnect_gbps, nvlink, source_url, note;
- `data/interconnect_extra.csv`: facts the reference lacks, same meaning plus
  `inter_node_rdma` (`no` = a source says there is no inter-node RDMA, e.g. Lambda's
  on-demand 8-GPU instances; the build refuses any RDMA fabric for such a type).
An instance type in neither file gets fabric/fabric_gbps/nvlink None: unknown stays
unknown, nothing is guessed. The extra file may add to the reference but never
contradict it (a conflict is a BuildError).

`max_nodes` comes from `data/max_nodes_rules.csv` (cloud + instance type regex).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.catalog.offer import FABRICS, RDMA_FABRICS
from launcher.catalog.skypilot_csv import BuildError, parse_float


@dataclass(frozen=True)
class Interconnect:
    fabric: str | None
    fabric_gbps: float | None
    nvlink: bool | None
    inter_node_rdma: bool | None  # None = no source says either way
    source: str
    # The reference's GPU for the type; fills a catalog row that names no accelerator
    # (Azure's GB200 VM is listed without one). Names as the reference spells them.
    accelerator: str | None = None
    accelerator_count: float | None = None


def _yes_no(text: str, what: str) -> bool | None:
    t = text.strip().lower()
    if t == "":
        return None
    if t in ("yes", "true", "1"):
        return True
    if t in ("no", "false", "0"):
        return False
    raise BuildError(f"{what}: expected yes/no, got {text!r}")


def _fabric(text: str, what: str) -> str | None:
    f = text.strip().lower() or None
    if f is not None and f not in FABRICS:
        raise BuildError(f"{what}: fabric {text!r} is not one of {', '.join(FABRICS)}")
    return f


def load_interconnect(
    reference: Iterable[dict[str, str]], extra: Iterable[dict[str, str]]
) -> dict[tuple[str, str], Interconnect]:
    """Merge the reference and the extra file into (cloud, instance_type) -> Interconnect."""
    facts: dict[tuple[str, str], Interconnect] = {}
    for r in reference:
        key = (r["cloud"], r["instance_type"])
        what = f"interconnect reference {key[0]}/{key[1]}"
        if key in facts:
            raise BuildError(f"{what}: listed twice")
        facts[key] = Interconnect(
            fabric=_fabric(r["fabric"], what),
            fabric_gbps=parse_float(r["interconnect_gbps"], f"{what} interconnect_gbps"),
            nvlink=_yes_no(r["nvlink"], f"{what} nvlink"),
            inter_node_rdma=None,
            source=r["source_url"],
            accelerator=r["accelerator"] or None,
            accelerator_count=parse_float(r["accelerator_count"], f"{what} accelerator_count"),
        )
    for r in extra:
        key = (r["cloud"], r["instance_type"])
        what = f"interconnect_extra.csv {key[0]}/{key[1]}"
        new = Interconnect(
            fabric=_fabric(r["fabric"], what),
            fabric_gbps=parse_float(r["fabric_gbps"], f"{what} fabric_gbps"),
            nvlink=_yes_no(r["nvlink"], f"{what} nvlink"),
            inter_node_rdma=_yes_no(r["inter_node_rdma"], f"{what} inter_node_rdma"),
            source=r["source_url"],
        )
        old = facts.get(key)
        if old is not None:
            for name in ("fabric", "fabric_gbps", "nvlink"):
                a, b = getattr(old, name), getattr(new, name)
                if a is not None and b is not None and a != b:
                    raise BuildError(f"{what}: {name} {b!r} contradicts the reference's {a!r}")
            new = Interconnect(
                fabric=old.fabric or new.fabric,
                fabric_gbps=old.fabric_gbps if old.fabric_gbps is not None else new.fabric_gbps,
                nvlink=old.nvlink if old.nvlink is not None else new.nvlink,
                inter_node_rdma=new.inter_node_rdma,
                source=f"{old.source} ; {new.source}",
                accelerator=old.accelerator,
                accelerator_count=old.accelerator_count,
            )
        if new.inter_node_rdma is False and new.fabric in RDMA_FABRICS:
            raise BuildError(f"{what}: fabric {new.fabric} but a source says no inter-node RDMA")
        if (
            new.inter_node_rdma is True
            and new.fabric is not None
            and new.fabric not in RDMA_FABRICS
        ):
            raise BuildError(f"{what}: inter_node_rdma yes but fabric {new.fabric} is not RDMA")
        facts[key] = new
    return facts


@dataclass(frozen=True)
class MaxNodesRule:
    cloud: str
    pattern: re.Pattern[str]
    max_nodes: int


def load_max_nodes_rules(rows: Iterable[dict[str, str]]) -> list[MaxNodesRule]:
    rules = []
    for r in rows:
        try:
            rules.append(
                MaxNodesRule(r["cloud"], re.compile(r["instance_type_regex"]), int(r["max_nodes"]))
            )
        except (re.error, ValueError) as e:
            raise BuildError(f"max_nodes_rules.csv {r.get('cloud')}: {e}") from e
    return rules


def max_nodes_for(rules: Iterable[MaxNodesRule], cloud: str, instance_type: str) -> int | None:
    """The first matching rule's max_nodes, else None (no known limit)."""
    for rule in rules:
        if rule.cloud == cloud and rule.pattern.fullmatch(instance_type):
            return rule.max_nodes
    return None
