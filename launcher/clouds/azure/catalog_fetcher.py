"""Azure's catalog rows, from Azure itself (`launcher catalog refresh --cloud azure`).

Per region, two sources, both read completely before anything is returned:
- the public **Retail Prices API** (no auth; `prices.azure.com/api/retail/prices`,
  filter `serviceName eq 'Virtual Machines' and armRegionName eq '<region>' and
  priceType eq 'Consumption'`, paged by `NextPageLink`): Linux consumption meters
  (product names ending in ` Windows` are Windows), the `... Spot` meters as spot prices
  and the `... Low Priority` meters (Batch/VMSS low priority) left out; a zero price,
  an hourly unit other than `1 Hour`, or a meter whose `effectiveEndDate` has passed
  (retired) gives no price, nor does a non-primary meter (`isPrimaryMeterRegion`
  false: the 2023-01-01-preview version lists those too); of several meters for one (size, market) the newest
  `effectiveStartDate` wins;
- **resource SKUs** (`Microsoft.Compute/skus`, location filter, with the account's
  credentials): vCPUs, MemoryGB, GPUs, CpuArchitectureType and `RdmaEnabled` -> fabric
  `infiniband` (else `ethernet`), never guessed; sizes restricted for the subscription
  in the location (`restrictions` of type Location) are left out.
GPU model names and memory are not in either API: they come from the bundled catalog's
rows for the same size (a GPU size it does not know is left out, with a note). One row
per (region, size) with an on-demand or a spot price; zone None, as in the snapshot.
Blocking; raises CatalogFetchError on any failure (no partial result).
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError, FetchedCatalog

CLOUD = "azure"
RETAIL_PRICES_URL = "https://prices.azure.com/api/retail/prices"
RETAIL_API_VERSION = "2023-01-01-preview"
SOURCE = "Azure Retail Prices API + resource SKUs (refreshed)"
MAX_PAGES = 2000
HttpGet = Callable[[str], dict[str, Any]]
SkuLister = Callable[[str], list[dict[str, Any]]]  # region -> resource SKU JSON objects


def http_get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 (https by default)
        data = json.loads(resp.read())
    if not isinstance(data, dict):
        raise ValueError(f"{url}: expected a JSON object")
    return data


def retail_items(base_url: str, region: str, get: HttpGet = http_get) -> Iterator[dict[str, Any]]:
    """Every Retail Prices item of `region`'s VM consumption meters, page after page."""
    flt = (f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' "
           "and priceType eq 'Consumption'")
    url: str | None = (f"{base_url}?api-version={RETAIL_API_VERSION}&"
                       + urllib.parse.urlencode({"$filter": flt}))
    for _ in range(MAX_PAGES):
        if not url:
            return
        page = get(url)
        yield from page.get("Items") or []
        url = page.get("NextPageLink") or None
    raise CatalogFetchError(f"Retail Prices for {region}: more than {MAX_PAGES} pages")


def prices(items: Iterator[dict[str, Any]], now: datetime.datetime
           ) -> tuple[dict[str, float], dict[str, float]]:
    """(size -> on-demand $/h, size -> spot $/h) of Linux consumption meters."""
    best: dict[tuple[str, bool], tuple[str, float]] = {}
    for it in items:
        size = str(it.get("armSkuName") or "")
        sku_name = str(it.get("skuName") or "") + " " + str(it.get("meterName") or "")
        if (not size.startswith("Standard_") or it.get("type", "Consumption") != "Consumption"
                or it.get("unitOfMeasure") != "1 Hour"
                or str(it.get("productName") or "").endswith("Windows")
                or "Low Priority" in sku_name
                or it.get("isPrimaryMeterRegion") is False):
            continue
        end = it.get("effectiveEndDate")
        if end and _date(str(end)) <= now:
            continue  # a retired meter
        price = float(it.get("retailPrice") or 0)
        if price <= 0:
            continue
        key = (size, "Spot" in sku_name)
        start = str(it.get("effectiveStartDate") or "")
        if key not in best or start > best[key][0]:
            best[key] = (start, price)
    on_demand = {k[0]: v[1] for k, v in best.items() if not k[1]}
    spot = {k[0]: v[1] for k, v in best.items() if k[1]}
    return on_demand, spot


def _date(text: str) -> datetime.datetime:
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def sku_facts(skus: list[dict[str, Any]], region: str) -> dict[str, dict[str, Any]]:
    """size -> {vcpus, memory_gib, gpus, rdma, arch} of the VM SKUs usable in `region`."""
    out: dict[str, dict[str, Any]] = {}
    for sku in skus:
        if sku.get("resourceType") != "virtualMachines":
            continue
        if [loc for loc in sku.get("locations") or [] if loc.lower() == region.lower()] == []:
            continue
        if any(r.get("type") == "Location" and region.lower() in
               [v.lower() for v in r.get("values") or []] for r in sku.get("restrictions") or []):
            continue
        caps = {c.get("name"): c.get("value") for c in sku.get("capabilities") or []}
        out[str(sku["name"])] = {
            "vcpus": _num(caps.get("vCPUs")), "memory_gib": _num(caps.get("MemoryGB")),
            "gpus": _num(caps.get("GPUs")) or 0.0,
            "rdma": str(caps.get("RdmaEnabled", "False")).lower() == "true",
            "arch": "arm64" if str(caps.get("CpuArchitectureType", "")).lower() == "arm64"
            else "x86_64",
        }
    return out


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def default_sku_lister(region: str) -> list[dict[str, Any]]:
    from launcher.clouds.azure.session import Clients
    from launcher.config.settings import load_config

    compute = Clients(load_config().azure).compute()
    return [s.as_dict() for s in compute.resource_skus.list(filter=f"location eq '{region}'")]


def snapshot_gpus() -> dict[str, tuple[str, float | None]]:
    """size -> (GPU model, GPU memory GiB) from the bundled catalog's Azure rows."""
    from launcher.catalog.query import offers

    out: dict[str, tuple[str, float | None]] = {}
    for o in offers(clouds=[CLOUD]):
        if o.accelerator and o.instance_type not in out:
            out[o.instance_type] = (o.accelerator, o.accelerator_memory_gib)
    return out


def fetch_catalog(regions: Sequence[str], *, base_url: str = RETAIL_PRICES_URL,
                  get: HttpGet = http_get, list_skus: SkuLister | None = None,
                  gpus: dict[str, tuple[str, float | None]] | None = None,
                  now: datetime.datetime | None = None,
                  on_progress: Callable[[str], None] | None = None) -> FetchedCatalog:
    """All rows of `regions` (see the module docstring). Raises CatalogFetchError."""
    now = now or datetime.datetime.now(datetime.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    lister = list_skus or default_sku_lister
    known = snapshot_gpus() if gpus is None else gpus
    rows: list[Offer] = []
    notes: list[str] = []
    for region in regions:
        try:
            on_demand, spot = prices(retail_items(base_url, region, get), now)
            facts = sku_facts(lister(region), region)
        except CatalogFetchError:
            raise
        except Exception as exc:
            raise CatalogFetchError(f"{region}: {type(exc).__name__}: {exc}") from exc
        unknown = []
        for size in sorted(set(on_demand) | set(spot)):
            f = facts.get(size)
            if f is None:
                continue  # not offered (or restricted) in this region for the subscription
            acc, acc_mem = None, None
            if f["gpus"]:
                if size not in known:
                    unknown.append(size)
                    continue
                acc, acc_mem = known[size]
            rows.append(Offer(
                cloud=CLOUD, region=region, zone=None, instance_type=size, accelerator=acc,
                accelerator_count=float(f["gpus"]) if acc else 0.0,
                accelerator_memory_gib=acc_mem, vcpus=f["vcpus"], memory_gib=f["memory_gib"],
                price=on_demand.get(size), spot_price=spot.get(size),
                fabric="infiniband" if f["rdma"] else "ethernet", fabric_gbps=None,
                nvlink=None, max_nodes=None, arch=f["arch"], source=SOURCE, fetched_at=stamp))
        if unknown:
            notes.append(f"{region}: GPU sizes with no known GPU model left out: "
                         f"{', '.join(unknown)}")
        if on_progress:
            on_progress(f"{region}: {sum(1 for r in rows if r.region == region)} rows")
    return FetchedCatalog(cloud=CLOUD, offers=tuple(rows), source=SOURCE,
                          upstream=f"{base_url} + Microsoft.Compute/skus", fetched_at=stamp,
                          regions=tuple(regions), notes=tuple(notes))


def fetch(regions: Sequence[str], *, price_list_url: str | None = None,
          price_list_format: str | None = None, regions_are_defaults: bool = False,
          on_progress: Callable[[str], None] | None = None) -> FetchedCatalog:
    """The entry point the API layer calls (the same shape for every cloud's fetcher);
    `price_list_url` overrides the Retail Prices endpoint (`catalog.azure.price_list_url`)."""
    del price_list_format, regions_are_defaults
    return fetch_catalog(regions, base_url=price_list_url or RETAIL_PRICES_URL,
                         on_progress=on_progress)
