"""Lambda's catalog rows, from Lambda itself (`launcher catalog refresh --cloud lambda`).

One `GET /instance-types` with the account's API key (Lambda has no anonymous price
API) at `catalog.lambda.price_list_url`, else `lambda.api_endpoint` /
LAMBDA_API_ENDPOINT, else Lambda's public API. Each type's `price_cents_per_hour` is the
on-demand price, the same in every region: one row per (chosen region, type). Regions
come from the refresh (default: the snapshot's Lambda regions, since
`regions_with_capacity_available` only lists where capacity is free right now, which
is a launch-time fact, not a price fact). GPU models and memory come from the
snapshot's rows for the same type, else from `gpu_description` ("H100 (80 GB SXM5)");
vCPUs and memory from `specs`. No spot (Lambda sells none), fabric unknown (no source
says InfiniBand), max_nodes unknown. Blocking; raises CatalogFetchError on any failure.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from typing import Any

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError, FetchedCatalog

CLOUD = "lambda"
SOURCE = "Lambda Cloud API /instance-types (refreshed)"
_GPU = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9 .-]*?)\s*\((\d+)\s*GB")
Get = Callable[[str], dict[str, Any]]


def api_get(endpoint: str) -> dict[str, Any]:
    from launcher.clouds.lambda_.api import LambdaAPI, api_key

    found = api_key()
    if found is None:
        raise CatalogFetchError("no Lambda API key (LAMBDA_API_KEY or ~/.lambda_cloud/lambda_keys)")
    data = LambdaAPI(found[0], endpoint).call("GET", "instance-types", action="list instance types")
    if not isinstance(data, dict):
        raise CatalogFetchError("instance-types: expected an object in 'data'")
    return data


def snapshot_gpus() -> dict[str, tuple[str, float | None]]:
    from launcher.catalog.query import offers

    out: dict[str, tuple[str, float | None]] = {}
    for o in offers(clouds=[CLOUD]):
        if o.accelerator:
            out.setdefault(o.instance_type, (o.accelerator, o.accelerator_memory_gib))
    return out


def rows_from_types(types: dict[str, Any], regions: Sequence[str],
                    gpus: dict[str, tuple[str, float | None]], stamp: str
                    ) -> tuple[list[Offer], list[str]]:
    rows: list[Offer] = []
    notes: list[str] = []
    for name, entry in sorted(types.items()):
        try:
            it = entry["instance_type"]
            price = float(it["price_cents_per_hour"]) / 100
            specs = it.get("specs") or {}
            count = int(specs.get("gpus") or 0)
        except (KeyError, TypeError, ValueError) as e:
            raise CatalogFetchError(f"instance type {name}: unexpected shape ({e})") from None
        model: str | None = None
        mem: float | None = None
        if count:
            if name in gpus:
                model, mem = gpus[name]
            else:
                m = _GPU.match(str(it.get("gpu_description") or ""))
                if not m:
                    notes.append(f"{name}: GPU model unknown, left out")
                    continue
                model, mem = m.group(1).replace(" ", ""), float(m.group(2))
        for region in regions:
            rows.append(Offer(cloud=CLOUD, region=region, zone=None, instance_type=name,
                              accelerator=model, accelerator_count=float(count),
                              accelerator_memory_gib=mem,
                              vcpus=float(specs["vcpus"]) if specs.get("vcpus") else None,
                              memory_gib=(float(specs["memory_gib"]) if specs.get("memory_gib")
                                          else None),
                              price=round(price, 4), spot_price=None, fabric=None,
                              fabric_gbps=None, nvlink=None, max_nodes=None, arch="x86_64",
                              source=SOURCE, fetched_at=stamp))
    return rows, notes


def fetch_catalog(regions: Sequence[str], *, endpoint: str, get: Get = api_get,
                  gpus: dict[str, tuple[str, float | None]] | None = None,
                  now: datetime.datetime | None = None) -> FetchedCatalog:
    """All rows of `regions` (see the module docstring). Raises CatalogFetchError."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        types = get(endpoint)
    except CatalogFetchError:
        raise
    except Exception as e:  # noqa: BLE001 - auth, network, HTTP: one typed failure
        raise CatalogFetchError(f"{endpoint}/instance-types: {type(e).__name__}: {e}") from None
    rows, notes = rows_from_types(types, regions, snapshot_gpus() if gpus is None else gpus,
                                  stamp)
    return FetchedCatalog(cloud=CLOUD, offers=tuple(rows), source=SOURCE,
                          upstream=f"{endpoint}/instance-types", fetched_at=stamp,
                          regions=tuple(regions), notes=tuple(notes))


def fetch(regions: Sequence[str], *, price_list_url: str | None = None,
          price_list_format: str | None = None, regions_are_defaults: bool = False,
          on_progress: Callable[[str], None] | None = None) -> FetchedCatalog:
    """The entry point the API layer calls (the same shape for every cloud's fetcher)."""
    del price_list_format, regions_are_defaults, on_progress
    from launcher.config.settings import load_config

    return fetch_catalog(regions, endpoint=price_list_url or load_config().lambda_.endpoint())
