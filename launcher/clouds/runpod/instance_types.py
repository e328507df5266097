"""Catalog instance types -> what RunPod's deploy mutations take.

The catalog names a RunPod offer `<count>x_<accelerator>_<SECURE|COMMUNITY>` (SkyPilot's
layout, e.g. `8x_H100-SXM_SECURE`); its zone is RunPod's `dataCenterId` (`US-KS-2`).
`gpu_types.csv` maps the catalog's accelerator names to RunPod's `gpuTypeId`s
("H100-SXM" -> "NVIDIA H100 80GB HBM3"); an id RunPod itself uses passes unchanged.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from launcher.clouds.base import InvalidRequestError

_NAME = re.compile(r"^(\d+)x_(.+?)(?:_(SECURE|COMMUNITY))?$")


@dataclass(frozen=True)
class PodShape:
    gpu_count: int
    accelerator: str  # the catalog's name
    gpu_type_id: str  # RunPod's
    cloud_type: str  # SECURE | COMMUNITY


@cache
def gpu_type_ids() -> dict[str, str]:
    with open(Path(__file__).with_name("gpu_types.csv"), encoding="utf-8") as f:
        return {r["accelerator"]: r["gpu_type_id"] for r in csv.DictReader(f)}


def parse(instance_type: str) -> PodShape:
    """The pod shape of a catalog instance type. Raises InvalidRequestError."""
    m = _NAME.match(instance_type)
    if not m or int(m.group(1)) < 1:
        raise InvalidRequestError(
            f"{instance_type!r} is not a RunPod instance type (expected e.g. "
            "'1x_A100-80GB_SECURE' or '8x_H100-SXM_COMMUNITY')", cloud="runpod")
    acc = m.group(2)
    return PodShape(gpu_count=int(m.group(1)), accelerator=acc,
                    gpu_type_id=gpu_type_ids().get(acc, acc),
                    cloud_type=m.group(3) or "SECURE")
