"""Vast's catalog rows, from Vast's own offer search (`launcher catalog refresh --cloud vast`).

One `POST /bundles/` (the marketplace search the CLI's `search offers` uses; rentable,
unrented, verified hosts, up to SEARCH_LIMIT offers, cheapest first) at the configured
API endpoint (`catalog.vast.price_list_url`, else `vast.api_endpoint` / VAST_API_ENDPOINT,
else console.vast.ai), with the API key when one is configured. Offers are grouped by
(region, shape): the region is the catalog region whose geolocation the host has (hosts
elsewhere are counted in a note), the shape `<N>x-<GPU>-<cpus>-<memory MiB>` as in the
snapshot; per group the lowest `dph_total` is the on-demand price and the lowest
`min_bid` the spot (interruptible) price. GPU models and memory come from the snapshot's
rows for the same GPU token (an unknown token: Vast's name, memory from `gpu_ram`).
Every row: zone None, fabric None (unknown), max_nodes 1 (one host). Blocking; raises
CatalogFetchError on any failure (no partial result).
"""

from __future__ import annotations

import datetime
import json
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError, FetchedCatalog
from launcher.clouds.vast.offers import in_region

CLOUD = "vast"
SOURCE = "Vast.ai offer search /bundles/ (refreshed)"
SEARCH_LIMIT = 3000
Post = Callable[[str, dict[str, Any]], dict[str, Any]]


def http_post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    from launcher.clouds.vast.api import api_key

    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    found = api_key()
    if found:
        headers["Authorization"] = f"Bearer {found[0]}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                 method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 (https by default)
        data = json.loads(resp.read())
    if not isinstance(data, dict):
        raise ValueError(f"{url}: expected a JSON object")
    return data


def snapshot_gpus() -> dict[str, tuple[str, float | None]]:
    """GPU token of the shape ("H100_SXM") -> (model, memory GiB), from the snapshot."""
    from launcher.catalog.query import offers

    out: dict[str, tuple[str, float | None]] = {}
    for o in offers(clouds=[CLOUD]):
        parts = o.instance_type.split("-")
        if o.accelerator and len(parts) >= 4:
            out.setdefault("-".join(parts[1:-2]), (o.accelerator, o.accelerator_memory_gib))
    return out


def rows_from_offers(found: list[dict[str, Any]], regions: Sequence[str],
                     gpus: dict[str, tuple[str, float | None]], stamp: str
                     ) -> tuple[list[Offer], list[str]]:
    """Catalog rows (cheapest per region and shape) and notes."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    outside = 0
    for o in found:
        region = next((r for r in regions if in_region(o, r)), None)
        if region is None:
            outside += 1
            continue
        try:
            token = str(o["gpu_name"]).replace(" ", "_")
            shape = (f"{int(o['num_gpus'])}x-{token}-{int(float(o['cpu_cores_effective']))}-"
                     f"{int(float(o['cpu_ram']))}")
            price = float(o["dph_total"])
            bid = float(o["min_bid"]) if o.get("min_bid") is not None else None
        except (KeyError, TypeError, ValueError) as e:
            raise CatalogFetchError(f"offer {o.get('id')}: unexpected shape ({e})") from None
        key = (region, shape)
        cur = best.setdefault(key, {"price": price, "bid": bid, "offer": o, "token": token})
        cur["price"] = min(cur["price"], price)
        if bid is not None:
            cur["bid"] = bid if cur["bid"] is None else min(cur["bid"], bid)
    rows = []
    for (region, shape), v in sorted(best.items()):
        o = v["offer"]
        model, mem = gpus.get(v["token"], (str(o["gpu_name"]), None))
        if mem is None and o.get("gpu_ram"):
            mem = round(float(o["gpu_ram"]) / 1024, 1)
        rows.append(Offer(cloud=CLOUD, region=region, zone=None, instance_type=shape,
                          accelerator=model, accelerator_count=float(o["num_gpus"]),
                          accelerator_memory_gib=mem,
                          vcpus=float(int(float(o["cpu_cores_effective"]))),
                          memory_gib=round(float(o["cpu_ram"]) / 1024, 1),
                          price=round(v["price"], 4),
                          spot_price=None if v["bid"] is None else round(v["bid"], 4),
                          fabric=None, fabric_gbps=None, nvlink=None, max_nodes=1,
                          arch="x86_64", source=SOURCE, fetched_at=stamp))
    notes = [f"{outside} offers on hosts outside the chosen regions left out"] if outside else []
    return rows, notes


def fetch_catalog(regions: Sequence[str], *, endpoint: str, post: Post = http_post,
                  gpus: dict[str, tuple[str, float | None]] | None = None,
                  now: datetime.datetime | None = None) -> FetchedCatalog:
    """All rows of `regions` (see the module docstring). Raises CatalogFetchError."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    url = f"{endpoint.rstrip('/')}/bundles/"
    body = {"rentable": {"eq": True}, "rented": {"eq": False}, "verified": {"eq": True},
            "type": "on-demand", "order": [["dph_total", "asc"]], "limit": SEARCH_LIMIT}
    try:
        found = post(url, body).get("offers")
    except Exception as e:  # noqa: BLE001 - network, HTTP, JSON: one typed failure
        raise CatalogFetchError(f"{url}: {type(e).__name__}: {e}") from None
    if not isinstance(found, list):
        raise CatalogFetchError(f"{url}: no 'offers' list in the answer")
    rows, notes = rows_from_offers(found, regions, snapshot_gpus() if gpus is None else gpus,
                                   stamp)
    return FetchedCatalog(cloud=CLOUD, offers=tuple(rows), source=SOURCE, upstream=url,
                          fetched_at=stamp, regions=tuple(regions), notes=tuple(notes))


def fetch(regions: Sequence[str], *, price_list_url: str | None = None,
          price_list_format: str | None = None, regions_are_defaults: bool = False,
          on_progress: Callable[[str], None] | None = None) -> FetchedCatalog:
    """The entry point the API layer calls (the same shape for every cloud's fetcher)."""
    del price_list_format, regions_are_defaults, on_progress
    from launcher.config.settings import load_config

    return fetch_catalog(regions, endpoint=price_list_url or load_config().vast.endpoint())
