"""GCP: join host machine rows with GPU add-on rows of the same zone (build step only).

GCP's vms.csv prices a GPU machine in two parts: a host row (`InstanceType` set, no
accelerator) and GPU add-on rows (`InstanceType` empty, `AcceleratorName` +
`AcceleratorCount`, priced for that many GPUs). One offer = host + add-on of the same
zone, on-demand and spot joined the same way (a part without a price makes that
market's price None; a zone missing either part gives no offer).

- Accelerator-optimized machines (A2, A3, A4, G2) carry fixed GPUs: the machine type ->
  (accelerator, count) table is `data/gcp_gpu_machines.csv` (e.g. a3-highgpu-8g = 8 x
  H100: host $9.46006 + add-on $33.60609 = $43.07/h in us-central1-a).
- T4/V100/P100/P4 attach to N1 hosts. For each add-on (zone, GPU, count) we offer the
  cheapest N1 host (n1-standard/highmem/highcpu) in that zone with at least the
  default vCPUs for that GPU count (SkyPilot's defaults), memory >= 4 GiB per such
  vCPU, and within GCP's per-count vCPU/memory limits (`data/gcp_n1_gpu_hosts.csv`).
- TPU rows (`tpu-v2-8`, `tpu-v6e-8`, ...: no InstanceType, count 1, the whole TPU VM's
  price) are offers of their own, instance type `TPU-VM` as in SkyPilot, with unknown
  host vCPUs/memory. They are for planning and cost queries: launch refuses TPU VMs
  (launcher.provisioning.planning.TPU_NOT_LAUNCHABLE).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from launcher.catalog.skypilot_csv import (
    BuildError,
    Row,
    arch_of,
    gpu_memory_gib,
    parse_float,
    parse_price,
)

_N1_HOST_PREFIXES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")
# Accelerator-optimized families (A2, A3, A4, A4X, G2, G4, ...; g1 is a legacy shared-core
# CPU type): a machine type of these missing from the table is a new GCP machine type to
# add there, not a CPU machine.
_GPU_FAMILY = re.compile(r"^(a\d+x?|g[2-9])-")


@dataclass(frozen=True)
class GpuMachine:
    accelerator: str
    count: int


@dataclass(frozen=True)
class N1HostRule:
    min_vcpus: float
    max_vcpus: float
    max_memory_gib: float


@dataclass(frozen=True)
class _AddOn:
    region: str
    price: float | None
    spot_price: float | None
    memory_gib: float | None


@dataclass(frozen=True)
class _Host:
    instance_type: str
    region: str
    zone: str
    vcpus: float | None
    memory_gib: float | None
    price: float | None
    spot_price: float | None


def load_gpu_machines(rows: Iterable[dict[str, str]]) -> dict[str, GpuMachine]:
    return {
        r["machine_type"]: GpuMachine(r["accelerator"], int(r["accelerator_count"])) for r in rows
    }


def load_n1_rules(rows: Iterable[dict[str, str]]) -> dict[tuple[str, int], N1HostRule]:
    return {
        (r["accelerator"], int(r["accelerator_count"])): N1HostRule(
            float(r["min_vcpus"]), float(r["max_vcpus"]), float(r["max_memory_gib"])
        )
        for r in rows
    }


def _positive(x: float | None) -> float | None:
    return x if x is not None and x > 0 else None


def _sum(host: float | None, addon: float | None) -> float | None:
    """Host + add-on price; None when either part is unlisted or the sum is not positive."""
    if host is None or addon is None:
        return None
    return _positive(round(host + addon, 6))


def join_gcp(
    raw: Iterable[dict[str, str]],
    gpu_machines: Mapping[str, GpuMachine],
    n1_rules: Mapping[tuple[str, int], N1HostRule],
    aliases: Mapping[str, str],
    dropped: Counter[str],
) -> list[Row]:
    """GCP vms.csv rows -> Rows (CPU machines, GPU machines, N1 + GPU). Counts drops."""
    addons: dict[tuple[str, str, int], _AddOn] = {}
    hosts: list[_Host] = []
    tpus: list[Row | None] = []
    for r in raw:
        it = r["InstanceType"]
        zone = r["AvailabilityZone"]
        region = r["Region"]
        if not region or not zone:
            dropped["no region or zone"] += 1
            continue
        if it:
            # A host's price may be 0.0 when the add-on carries the whole machine's price
            # (a4-highgpu-8g); 0 only means "not offered" for the sum, see _sum.
            price = parse_float(r["Price"], f"gcp/{it} Price")
            spot = parse_float(r["SpotPrice"], f"gcp/{it} SpotPrice")
            hosts.append(
                _Host(
                    it,
                    region,
                    zone,
                    parse_float(r["vCPUs"], f"gcp/{it} vCPUs"),
                    parse_float(r["MemoryGiB"], f"gcp/{it} MemoryGiB"),
                    price,
                    spot,
                )
            )
            continue
        acc = r["AcceleratorName"]
        price = parse_price(r["Price"], f"gcp/{acc} Price")
        spot = parse_price(r["SpotPrice"], f"gcp/{acc} SpotPrice")
        if not acc:
            dropped["neither instance type nor accelerator"] += 1
            continue
        if acc.startswith("tpu-"):
            tpus.append(_tpu_row(acc, region, zone, price, spot, r["AcceleratorCount"], dropped))
            continue
        count_f = parse_float(r["AcceleratorCount"], f"gcp/{acc} AcceleratorCount")
        if count_f is None or count_f <= 0 or count_f != int(count_f):
            raise BuildError(
                f"gcp add-on {acc} in {zone}: bad AcceleratorCount {r['AcceleratorCount']!r}"
            )
        key = (zone, aliases.get(acc, acc), int(count_f))
        if key in addons:
            raise BuildError(f"gcp: two add-on rows for {key[1]} x{key[2]} in {zone}")
        addons[key] = _AddOn(region, price, spot, gpu_memory_gib("gcp", r["GpuInfo"]))

    out: list[Row] = [t for t in tpus if t is not None]
    used_addons: set[tuple[str, str, int]] = set()
    n1_by_zone: dict[str, list[_Host]] = {}
    for h in hosts:
        if h.instance_type.startswith(_N1_HOST_PREFIXES):
            n1_by_zone.setdefault(h.zone, []).append(h)
        machine = gpu_machines.get(h.instance_type)
        if machine is None:
            if _GPU_FAMILY.match(h.instance_type):
                dropped["GPU machine type missing from gcp_gpu_machines.csv"] += 1
                continue
            price, spot = _positive(h.price), _positive(h.spot_price)
            if price is None and spot is None:
                dropped["no price"] += 1
                continue
            out.append(_row(h, None, 0, None, price, spot))
            continue
        key = (h.zone, machine.accelerator, machine.count)
        addon = addons.get(key)
        if addon is None:
            dropped["GPU host without its add-on row in the zone"] += 1
            continue
        used_addons.add(key)
        price, spot = _sum(h.price, addon.price), _sum(h.spot_price, addon.spot_price)
        if price is None and spot is None:
            dropped["no price"] += 1
            continue
        out.append(_row(h, machine.accelerator, machine.count, addon.memory_gib, price, spot))

    for key, addon in sorted(addons.items()):
        zone, acc, count = key
        rule = n1_rules.get((acc, count))
        if rule is None:
            if key not in used_addons:
                dropped["GPU add-on without its machine type in the zone"] += 1
            continue
        host = _cheapest_n1_host(n1_by_zone.get(zone, ()), rule)
        if host is None:
            dropped["N1 GPU add-on without a fitting N1 host in the zone"] += 1
            continue
        price, spot = _sum(host.price, addon.price), _sum(host.spot_price, addon.spot_price)
        if price is None and spot is None:
            dropped["no price"] += 1
            continue
        out.append(_row(host, acc, count, addon.memory_gib, price, spot))
    return out


TPU_INSTANCE_TYPE = "TPU-VM"


def _tpu_row(
    acc: str,
    region: str,
    zone: str,
    price: float | None,
    spot: float | None,
    count_text: str,
    dropped: Counter[str],
) -> Row | None:
    """One TPU VM offer (None, counted in `dropped`, when it has no price or its count
    is not 1: a TPU name already says its size)."""
    count = parse_float(count_text, f"gcp/{acc} AcceleratorCount")
    if count != 1:
        dropped["TPU row with a count other than 1"] += 1
        return None
    price, spot = _positive(price), _positive(spot)
    if price is None and spot is None:
        dropped["no price"] += 1
        return None
    return Row(
        cloud="gcp", region=region, zone=zone, instance_type=TPU_INSTANCE_TYPE, accelerator=acc,
        accelerator_count=1.0, accelerator_memory_gib=None, vcpus=None, memory_gib=None,
        price=price, spot_price=spot, arch="x86_64",
    )  # fmt: skip


def _cheapest_n1_host(candidates: Iterable[_Host], rule: N1HostRule) -> _Host | None:
    min_mem = 4 * rule.min_vcpus
    fitting = [
        h
        for h in candidates
        if h.price is not None
        and h.price > 0
        and h.vcpus is not None
        and h.memory_gib is not None
        and rule.min_vcpus <= h.vcpus <= rule.max_vcpus
        and min_mem <= h.memory_gib <= rule.max_memory_gib
    ]
    if not fitting:
        return None
    return min(fitting, key=lambda h: (h.price or 0.0, h.instance_type))


def _row(
    h: _Host,
    acc: str | None,
    count: int,
    acc_mem: float | None,
    price: float | None,
    spot: float | None,
) -> Row:
    return Row(
        cloud="gcp",
        region=h.region,
        zone=h.zone,
        instance_type=h.instance_type,
        accelerator=acc,
        accelerator_count=float(count),
        accelerator_memory_gib=acc_mem,
        vcpus=h.vcpus,
        memory_gib=h.memory_gib,
        price=price,
        spot_price=spot,
        arch=arch_of("gcp", h.instance_type),
    )
