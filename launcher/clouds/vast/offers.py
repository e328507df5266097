"""Catalog rows <-> Vast offers: the instance-type name, the search query, the region.

The catalog (SkyPilot's Vast layout) names a shape `<N>x-<GPU>-<cpus>-<memory MiB>`
(`8x-H100_SXM-32-65536`, GPU name with `_` for spaces) and a region
`<geolocation>, <continent>` (`Vietnam, VN, AS`). `search_body` asks
`POST /bundles/` for rentable, unrented offers of that GPU and count (interruptible
`type: bid` for spot), cheapest first; `in_region` keeps those whose `geolocation` is the
region's (an offer is one host: the region is where that host is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from launcher.clouds.base import InvalidRequestError

_SHAPE = re.compile(r"^(\d+)x-(.+)-(\d+)-(\d+)$")
SEARCH_LIMIT = 64


@dataclass(frozen=True)
class Shape:
    """What an instance type asks of an offer."""

    num_gpus: int
    gpu_name: str  # Vast's spelling ("H100 SXM")
    cpus: int
    memory_mib: int


def parse_shape(instance_type: str) -> Shape:
    """Raises InvalidRequestError for a name not in the catalog's form."""
    m = _SHAPE.match(instance_type)
    if not m:
        raise InvalidRequestError(f"{instance_type!r} is not a Vast shape "
                                  "(<N>x-<GPU>-<cpus>-<memory MiB>, e.g. 1x-RTX_4090-16-32768)",
                                  cloud="vast")
    return Shape(int(m.group(1)), m.group(2).replace("_", " "), int(m.group(3)), int(m.group(4)))


def search_body(shape: Shape, spot: bool, disk_gb: int) -> dict[str, Any]:
    """The `POST /bundles/` query for `shape`."""
    return {"gpu_name": {"eq": shape.gpu_name}, "num_gpus": {"eq": shape.num_gpus},
            "cpu_cores_effective": {"gte": shape.cpus}, "cpu_ram": {"gte": shape.memory_mib},
            "disk_space": {"gte": disk_gb}, "rentable": {"eq": True}, "rented": {"eq": False},
            "verified": {"eq": True}, "type": "bid" if spot else "on-demand",
            "order": [["dph_total", "asc"]], "limit": SEARCH_LIMIT}


def in_region(offer: dict[str, Any], region: str) -> bool:
    """Whether the offer's host is in the catalog region (geolocation, ignoring the
    continent suffix the catalog adds)."""
    geo = str(offer.get("geolocation") or "").strip()
    parts = [p.strip() for p in region.split(",")]
    wanted = ", ".join(parts[:-1]) if len(parts) >= 3 else region.strip()
    return geo == wanted or geo == region.strip()


def bid_price(offer: dict[str, Any]) -> float:
    """The bid for an interruptible instance: the offer's minimum bid (what its price
    as spot means in the catalog), per hour."""
    return float(offer.get("min_bid") or offer.get("dph_total") or 0.0)
