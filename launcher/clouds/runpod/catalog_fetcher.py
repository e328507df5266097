"""RunPod's catalog rows, from RunPod itself (`launcher catalog refresh --cloud runpod`).

One GraphQL query (the API key's account; `runpod.api_endpoint`):
`gpuTypes { id displayName memoryInGb maxGpuCount secureCloud communityCloud securePrice
communityPrice secureSpotPrice communitySpotPrice }` — per-GPU hourly prices of each GPU
type in Secure and Community Cloud, on demand and interruptible (spot).
RunPod prices a GPU type the same in every data center, and the API gives no per-pod
vCPU/memory shape nor a data-center list without per-location queries; so the refresh
**re-prices the current RunPod rows** (the bundled snapshot's, or a previous refresh's:
instance type `<n>x_<GPU>_<SECURE|COMMUNITY>`, region, zone = data center, vCPUs,
memory): price = n x the cloud type's price, spot_price = n x its spot price (None
when RunPod lists none). A row whose GPU type RunPod no longer lists, or no longer
prices in that cloud type, is left out (with a note); a GPU type RunPod lists that no
row has (no known shape or data centers) is noted, not added. `regions` limits the rows
to those regions. Blocking; raises CatalogFetchError on any failure (no partial result).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Sequence
from typing import Any

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError, FetchedCatalog

CLOUD = "runpod"
SOURCE = "RunPod GraphQL gpuTypes (refreshed)"
GPU_TYPES_QUERY = ("query GpuTypes { gpuTypes { id displayName memoryInGb maxGpuCount "
                   "secureCloud communityCloud securePrice communityPrice secureSpotPrice "
                   "communitySpotPrice } }")
Query = Callable[[str], dict[str, Any]]  # GraphQL query text -> `data`


def default_query(text: str) -> dict[str, Any]:
    from launcher.clouds.runpod.cloud import RunPodCloud

    cloud = RunPodCloud()
    return cloud._client().call(text, action="read GPU prices")


def _price(value: Any) -> float | None:
    try:
        price = float(value)
    except (TypeError, ValueError):
        return None
    return price if price > 0 else None


def fetch_catalog(regions: Sequence[str], *, query: Query = default_query,
                  current: Sequence[Offer] | None = None,
                  now: datetime.datetime | None = None) -> FetchedCatalog:
    """Every re-priced RunPod row of `regions` (see the module docstring)."""
    from launcher.clouds.runpod.instance_types import gpu_type_ids, parse

    now = now or datetime.datetime.now(datetime.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        data = query(GPU_TYPES_QUERY)
    except Exception as exc:
        raise CatalogFetchError(f"gpuTypes: {type(exc).__name__}: {exc}") from exc
    types = data.get("gpuTypes")
    if not isinstance(types, list):
        raise CatalogFetchError("gpuTypes: the answer has no gpuTypes list")
    by_id = {str(t.get("id")): t for t in types if isinstance(t, dict) and t.get("id")}
    if current is None:
        from launcher.catalog.query import offers

        current = offers(clouds=[CLOUD])
    wanted = set(regions)
    rows: list[Offer] = []
    gone: set[str] = set()
    shaped: set[str] = set()
    for o in current:
        if o.cloud != CLOUD or (wanted and o.region not in wanted):
            continue
        try:
            shape = parse(o.instance_type)
        except Exception:
            continue
        shaped.add(shape.gpu_type_id)
        t = by_id.get(shape.gpu_type_id)
        kind = "secure" if shape.cloud_type == "SECURE" else "community"
        price = _price(t.get(f"{kind}Price")) if t else None
        if t is None or price is None or t.get(f"{kind}Cloud") is False:
            gone.add(o.instance_type)
            continue
        spot = _price(t.get(f"{kind}SpotPrice"))
        n = shape.gpu_count
        rows.append(dataclasses.replace(
            o, price=round(price * n, 4), spot_price=round(spot * n, 4) if spot else None,
            accelerator_memory_gib=float(t.get("memoryInGb") or o.accelerator_memory_gib or 0)
            or None, source=SOURCE, fetched_at=stamp))
    notes: list[str] = []
    if gone:
        notes.append(f"no longer priced by RunPod, left out: {', '.join(sorted(gone))}")
    known = set(gpu_type_ids().values())
    new = sorted(i for i in by_id if i not in shaped and i in known)
    if new:
        notes.append(f"listed by RunPod with no known pod shape, not added: {', '.join(new)}")
    return FetchedCatalog(cloud=CLOUD, offers=tuple(rows), source=SOURCE,
                          upstream="RunPod GraphQL API (gpuTypes)", fetched_at=stamp,
                          regions=tuple(sorted({o.region for o in rows})), notes=tuple(notes))


def fetch(regions: Sequence[str], *, price_list_url: str | None = None,
          price_list_format: str | None = None, regions_are_defaults: bool = False,
          on_progress: Callable[[str], None] | None = None) -> FetchedCatalog:
    """The entry point the API layer calls (the same shape for every cloud's fetcher);
    the endpoint is `runpod.api_endpoint` (a `catalog.runpod.price_list_url` is a
    GraphQL endpoint too)."""
    del price_list_format, on_progress
    if price_list_url:
        from launcher.clouds.runpod.api import GraphQL
        from launcher.clouds.runpod.credentials import api_key

        key, why = api_key()
        if key is None:
            raise CatalogFetchError(f"RunPod: {why}")
        client = GraphQL(price_list_url, key)
        return fetch_catalog(() if regions_are_defaults else regions,
                             query=lambda text: client.call(text, action="read GPU prices"))
    return fetch_catalog(() if regions_are_defaults else regions)
