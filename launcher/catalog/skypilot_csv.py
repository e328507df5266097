"""Read SkyPilot catalog v8 `vms.csv` files into normalised offer rows (build step only).

Column layouts differ per cloud (see ../shared/catalog-reference/README.md); rows are
read by column name, so the order does not matter. GCP's host + add-on layout is
joined in `gcp_join.py`; every other cloud goes through `normalise_rows` here.

Normalisation rules (documented in docs/catalog.md):
- empty or 0 price = not offered (None); vast's SpotPrice "0.00" is the common case.
- `AvailabilityZone` becomes `zone` where the file has it (AWS zone ids, RunPod data
  centers); other clouds have no zones (None).
- AWS Local Zone rows (`use1-atl2-az1`) are dropped: they need an opt-in per account.
- rows with no region, or with neither an on-demand nor a spot price, are dropped and
  counted per reason.
- GPU memory per accelerator (GiB) comes from GpuInfo; the clouds disagree on what
  `MemoryInfo.SizeInMiB` holds, see `GPU_MEMORY_CONVENTION`.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# What MemoryInfo.SizeInMiB means per cloud (checked against the data):
# - "per_gpu": MiB of one GPU (AWS, Lambda, Nebius, ... ; Lambda's TotalGpuMemoryInMiB is
#   wrong on multi-GPU rows, so only the per-GPU entry is used).
# - "instance_total": MiB of all the row's GPUs together (vast: entry Count = N and
#   SizeInMiB = TotalGpuMemoryInMiB; e.g. 2x A100 40GB shows 81920).
# - "gb": nominal GB of one GPU despite the name (RunPod: 80 for an 80GB A100/H100).
GPU_MEMORY_CONVENTION: Mapping[str, str] = {"vast": "instance_total", "runpod": "gb"}
# AWS Local Zone ids (`use1-atl2-az1`, `usw2-lax1-az1`): a zone of a metro site, which an
# account must opt in to and give subnets of its own before it can launch there. A
# launch would fail (or silently pick a far-away site), so the bundled catalog leaves
# them out; a refresh (`describe_instance_type_offerings`) lists them only once opted in.
_AWS_LOCAL_ZONE = re.compile(r"^[a-z]+\d+-[a-z]+\d+-az\d+$")
# A per-GPU memory outside this range (GiB) is a unit error in the source: left unknown.
_SANE_GPU_GIB = (1.0, 400.0)


class BuildError(Exception):
    """The inputs cannot be turned into a snapshot (missing file, bad value, conflict)."""


@dataclass
class Row:
    """One normalised offer row before interconnect and gang-size facts are joined."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str | None
    accelerator_count: float
    accelerator_memory_gib: float | None
    vcpus: float | None
    memory_gib: float | None
    price: float | None
    spot_price: float | None
    arch: str


def read_csv(path: str) -> tuple[list[dict[str, str]], str]:
    """Rows of a CSV file as dicts (header = keys) and the file's sha256. Raises BuildError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BuildError(f"cannot read {path}: {e.strerror}") from e
    text = data.decode("utf-8-sig")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    for i, r in enumerate(reader, start=2):
        if None in r:
            raise BuildError(f"{path}:{i}: more cells than header columns")
        rows.append({k: (v or "").strip() for k, v in r.items()})
    return rows, hashlib.sha256(data).hexdigest()


def parse_float(text: str, what: str) -> float | None:
    """'' -> None, else float (BuildError naming `what` on garbage)."""
    if text == "":
        return None
    try:
        return float(text)
    except ValueError as e:
        raise BuildError(f"{what}: not a number: {text!r}") from e


def parse_price(text: str, what: str) -> float | None:
    """A list price: empty or zero means "not offered" (None), never free."""
    v = parse_float(text, what)
    if v is None or v <= 0:
        return None
    return v


_gpuinfo_cache: dict[str, object] = {}


def _parse_gpuinfo(text: str) -> object:
    if text in _gpuinfo_cache:
        return _gpuinfo_cache[text]
    value: object = None
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = None
    _gpuinfo_cache[text] = value
    return value


def gpu_memory_gib(cloud: str, gpuinfo: str) -> float | None:
    """Memory of one GPU in GiB from a GpuInfo cell, or None when it does not say."""
    info = _parse_gpuinfo(gpuinfo)
    if not isinstance(info, dict):
        return None  # e.g. Azure: GpuInfo is just the GPU's name
    gpus = info.get("Gpus")
    if not isinstance(gpus, list) or not gpus or not isinstance(gpus[0], dict):
        return None
    entry = gpus[0]
    mem = entry.get("MemoryInfo")
    size = mem.get("SizeInMiB") if isinstance(mem, dict) else None
    if not isinstance(size, int | float) or size <= 0:
        return None
    convention = GPU_MEMORY_CONVENTION.get(cloud, "per_gpu")
    if convention == "gb":
        gib = float(size)
    elif convention == "instance_total":
        count = entry.get("Count")
        if not isinstance(count, int | float) or count <= 0:
            return None
        gib = size / count / 1024
    else:
        gib = size / 1024
    lo, hi = _SANE_GPU_GIB
    return round(gib, 2) if lo <= gib <= hi else None


# Arm machine types by naming convention (the files have no Arch column except AWS).
_AZURE_ARM = re.compile(r"^Standard_[A-Z]+\d+[a-z]*p[a-z]*_v\d+$")
_GRACE = re.compile(r"G[BH][23]00")  # Grace CPU superchips (GB200, GH200, GB300)
_ARM_PREFIXES: Mapping[str, tuple[str, ...]] = {
    "gcp": ("t2a-", "c4a-", "a4x-"),  # Ampere Altra, Axion, Grace (GB200)
    "lambda": ("gpu_1x_gh200",),  # Grace Hopper
}


def arch_of(cloud: str, instance_type: str, arch_cell: str = "") -> str:
    """ "x86_64" or "arm64": the file's Arch column when present, else naming rules."""
    if arch_cell:
        return "arm64" if arch_cell in ("arm64", "aarch64") else "x86_64"
    if cloud == "azure" and _AZURE_ARM.match(instance_type):
        return "arm64"
    if _GRACE.search(instance_type):
        return "arm64"
    if instance_type.startswith(_ARM_PREFIXES.get(cloud, ())):
        return "arm64"
    return "x86_64"


def normalise_rows(
    cloud: str,
    raw: Iterable[dict[str, str]],
    aliases: Mapping[str, str],
    dropped: Counter[str],
) -> list[Row]:
    """Rows of a non-GCP cloud's vms.csv -> Rows. Counts dropped input rows per reason."""
    out: list[Row] = []
    for r in raw:
        it = r.get("InstanceType", "")
        where = f"{cloud}/{it}"
        region = r.get("Region", "")
        if not it:
            dropped["no instance type"] += 1
            continue
        if not region:
            dropped["no region"] += 1
            continue
        price = parse_price(r.get("Price", ""), f"{where} Price")
        spot = parse_price(r.get("SpotPrice", ""), f"{where} SpotPrice")
        if price is None and spot is None:
            dropped["no price"] += 1
            continue
        zone = r.get("AvailabilityZone") or None
        if cloud == "aws" and zone and _AWS_LOCAL_ZONE.match(zone):
            dropped["AWS Local Zone (needs opt-in)"] += 1
            continue
        acc_name = r.get("AcceleratorName", "")
        acc = aliases.get(acc_name, acc_name) or None
        count = parse_float(r.get("AcceleratorCount", ""), f"{where} AcceleratorCount") or 0.0
        if acc is None:
            count = 0.0
        elif count <= 0:
            dropped["accelerator without a count"] += 1
            continue
        out.append(
            Row(
                cloud=cloud,
                region=region,
                zone=zone,
                instance_type=it,
                accelerator=acc,
                accelerator_count=count,
                accelerator_memory_gib=gpu_memory_gib(cloud, r.get("GpuInfo", "")) if acc else None,
                vcpus=parse_float(r.get("vCPUs", ""), f"{where} vCPUs"),
                memory_gib=parse_float(r.get("MemoryGiB", ""), f"{where} MemoryGiB"),
                price=price,
                spot_price=spot,
                arch=arch_of(cloud, it, r.get("Arch", "")),
            )
        )
    return out
