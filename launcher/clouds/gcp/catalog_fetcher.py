"""GCP's catalog rows from GCP itself (what `launcher catalog refresh --cloud gcp` runs).

Three sources, all read before anything is returned (any failure: CatalogFetchError,
nothing replaced):
- the Cloud Billing Catalog API, SKUs of the Compute Engine service
  (`GET {billing}/v1/services/6F81-5844-456A/skus?currencyCode=USD`, paged by
  `nextPageToken`): per region, $/h of one vCPU (`<FAMILY> Instance Core running in
  ...`, N1's are `N1 Predefined Instance Core`), of one GiB of memory (`... Instance
  Ram ...`, unit `GiBy.h`) and of one GPU (`Nvidia <MODEL> GPU running in ...`);
  `usageType` OnDemand -> the on-demand price, Preemptible (Spot) -> the spot price;
  commitments and other SKUs are ignored. A SKU's rate is its last tier (the free tier
  of a few SKUs is tier 0);
- `machineTypes.aggregatedList` (paged): vCPUs, memory and fixed GPUs per zone;
  shared-core types (`isSharedCpu`) and deprecated ones are left out;
- `acceleratorTypes.aggregatedList` (paged): which GPUs each zone offers and the most
  one VM may attach.

GCP bills an accelerator-optimized machine (a2, a3, a4, g2) the way it bills an N1
with attached GPUs: host (vCPUs x core price + GiB x RAM price of the family) plus
GPUs (count x GPU price). The rows are then joined exactly as the bundled snapshot's
(launcher/catalog/gcp_join.py): fixed-GPU machines with their GPU add-on in the same
zone, T4/V100/P100/P4 add-ons with the cheapest fitting N1 host, CPU machines alone.
A market without a price (no SKU for the family in that region) is None; a row with
neither price is dropped.

Fabric, from the machine family (GCP's GPU machine-type documentation): a3-highgpu /
a3-edgegpu -> `tcpx` (GPUDirect-TCPX), a3-megagpu -> `tcpx` (TCPXO), a3-ultragpu and
a4-highgpu -> `roce` (GPUDirect RDMA over RoCE); every other type's fabric is left
unknown (None), as in the snapshot. NVLink and gang-size limits are filled by the API
layer from the snapshot. Credentials: ADC (session.py); the billing endpoint is
`catalog.gcp.price_list_url` in config.yaml when set, the Compute endpoint the one the
provisioner uses. google-auth is imported only when a refresh runs (not compute_v1).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError, FetchedCatalog

CLOUD = "gcp"
BILLING_URL = "https://cloudbilling.googleapis.com"
COMPUTE_URL = "https://compute.googleapis.com"
COMPUTE_SERVICE = "6F81-5844-456A"
SOURCE = "GCP Cloud Billing Catalog + Compute API (refreshed)"
GetJson = Callable[[str, dict[str, str]], dict[str, Any]]

_CORE_RAM = re.compile(r"^(?:Spot Preemptible |Preemptible )?(?P<fam>[A-Z][A-Za-z0-9]*)"
                       r"(?: Predefined| AMD| Arm)? Instance (?P<kind>Core|Ram) running in ")
_GPU = re.compile(r"^(?:Spot Preemptible |Preemptible )?Nvidia (?P<gpu>.+?) GPU"
                  r"(?: attached to (?:Spot )?Preemptible VMs)? running in ")
# SKU GPU names (after "Tesla ") -> the catalog's names
SKU_GPUS = {"T4": "T4", "V100": "V100", "P100": "P100", "P4": "P4", "A100": "A100",
            "A100 80GB": "A100-80GB", "H100 80GB": "H100", "H100 80GB Mega": "H100-MEGA",
            "H100 Mega 80GB": "H100-MEGA", "L4": "L4", "H200 141GB": "H200", "B200": "B200"}
# acceleratorTypes names -> the catalog's names
API_GPUS = {"nvidia-tesla-t4": "T4", "nvidia-tesla-v100": "V100", "nvidia-tesla-p100": "P100",
            "nvidia-tesla-p4": "P4", "nvidia-tesla-a100": "A100", "nvidia-a100-80gb": "A100-80GB",
            "nvidia-h100-80gb": "H100", "nvidia-h100-mega-80gb": "H100-MEGA", "nvidia-l4": "L4",
            "nvidia-h200-141gb": "H200", "nvidia-b200": "B200"}
GPU_MEMORY_GIB = {"T4": 16, "V100": 16, "P100": 16, "P4": 8, "A100": 40, "A100-80GB": 80,
                  "H100": 80, "H100-MEGA": 80, "L4": 24, "H200": 141, "B200": 180}
FABRICS = (("a3-highgpu", "tcpx"), ("a3-edgegpu", "tcpx"), ("a3-megagpu", "tcpx"),
           ("a3-ultragpu", "roce"), ("a4-highgpu", "roce"))


@dataclasses.dataclass
class Prices:
    """region -> key -> $/h; keys ("core", family), ("ram", family), ("gpu", name)."""

    on_demand: dict[str, dict[tuple[str, str], float]] = dataclasses.field(default_factory=dict)
    spot: dict[str, dict[tuple[str, str], float]] = dataclasses.field(default_factory=dict)


def _rate(sku: dict[str, Any]) -> float | None:
    try:
        tiers = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"]
        price = tiers[-1]["unitPrice"]
    except (KeyError, IndexError, TypeError):
        return None
    return int(price.get("units") or 0) + int(price.get("nanos") or 0) / 1e9


def parse_skus(skus: Sequence[dict[str, Any]]) -> Prices:
    """The per-region unit prices in Compute Engine SKUs (see the module docstring)."""
    out = Prices()
    for sku in skus:
        usage = (sku.get("category") or {}).get("usageType")
        if usage not in ("OnDemand", "Preemptible"):
            continue
        desc = str(sku.get("description") or "")
        key: tuple[str, str] | None = None
        m = _CORE_RAM.match(desc)
        if m:
            key = ("core" if m["kind"] == "Core" else "ram", m["fam"].lower())
        else:
            g = _GPU.match(desc)
            name = SKU_GPUS.get(g["gpu"].removeprefix("Tesla ")) if g else None
            if name:
                key = ("gpu", name)
        rate = _rate(sku)
        if key is None or rate is None:
            continue
        table = out.on_demand if usage == "OnDemand" else out.spot
        for region in sku.get("serviceRegions") or []:
            table.setdefault(str(region), {})[key] = rate
    return out


def _host_price(table: Mapping[tuple[str, str], float], family: str, vcpus: float,
                mem_gib: float) -> float | None:
    core, ram = table.get(("core", family)), table.get(("ram", family))
    if core is None or ram is None:
        return None
    return round(vcpus * core + mem_gib * ram, 6)


def _fmt(x: float | None) -> str:
    return "" if x is None else repr(x)


def vm_rows(prices: Prices, machine_types: Mapping[str, Sequence[dict[str, Any]]],
            accelerator_types: Mapping[str, Sequence[dict[str, Any]]],
            regions: Sequence[str]) -> list[dict[str, str]]:
    """Rows in the snapshot's vms.csv shape (hosts, and GPU add-ons priced for N GPUs)."""
    wanted = set(regions)
    rows: list[dict[str, str]] = []
    empty = {"AcceleratorName": "", "AcceleratorCount": "", "GpuInfo": ""}
    for zone, types in sorted(machine_types.items()):
        region = zone.rsplit("-", 1)[0]
        if region not in wanted:
            continue
        od, sp = prices.on_demand.get(region, {}), prices.spot.get(region, {})
        for mt in types:
            if mt.get("isSharedCpu") or (mt.get("deprecated") or {}).get("state"):
                continue
            name = str(mt["name"])
            vcpus, mem = float(mt["guestCpus"]), float(mt["memoryMb"]) / 1024
            family = name.split("-", 1)[0]
            rows.append({"InstanceType": name, "Region": region, "AvailabilityZone": zone,
                         "vCPUs": repr(vcpus), "MemoryGiB": repr(round(mem, 3)),
                         "Price": _fmt(_host_price(od, family, vcpus, mem)),
                         "SpotPrice": _fmt(_host_price(sp, family, vcpus, mem)), **empty})
        for at in accelerator_types.get(zone, ()):
            acc = API_GPUS.get(str(at.get("name")))
            if acc is None:
                continue
            most = int(at.get("maximumCardsPerInstance") or 8)
            for count in (1, 2, 4, 8, 16):
                if count > most:
                    break
                unit, unit_spot = od.get(("gpu", acc)), sp.get(("gpu", acc))
                rows.append({"InstanceType": "", "Region": region, "AvailabilityZone": zone,
                             "vCPUs": "", "MemoryGiB": "", "AcceleratorName": acc,
                             "AcceleratorCount": str(count), "GpuInfo": "",
                             "Price": _fmt(None if unit is None else round(unit * count, 6)),
                             "SpotPrice": _fmt(None if unit_spot is None
                                               else round(unit_spot * count, 6))})
    return rows


def fabric_of(instance_type: str) -> str | None:
    return next((f for prefix, f in FABRICS if instance_type.startswith(prefix)), None)


def build_offers(prices: Prices, machine_types: Mapping[str, Sequence[dict[str, Any]]],
                 accelerator_types: Mapping[str, Sequence[dict[str, Any]]],
                 regions: Sequence[str], fetched_at: str) -> tuple[list[Offer], Counter[str]]:
    """The catalog rows (pure: tested on recorded responses), and what was dropped why."""
    import os

    from launcher.catalog.gcp_join import join_gcp, load_gpu_machines, load_n1_rules
    from launcher.catalog.skypilot_csv import read_csv
    from launcher.catalog.snapshot import bundled_dir

    machines, _ = read_csv(os.path.join(bundled_dir(), "gcp_gpu_machines.csv"))
    rules, _ = read_csv(os.path.join(bundled_dir(), "gcp_n1_gpu_hosts.csv"))
    dropped: Counter[str] = Counter()
    joined = join_gcp(vm_rows(prices, machine_types, accelerator_types, regions),
                      load_gpu_machines(machines), load_n1_rules(rules), {}, dropped)
    offers = [Offer(cloud=CLOUD, region=r.region, zone=r.zone, instance_type=r.instance_type,
                    accelerator=r.accelerator, accelerator_count=r.accelerator_count,
                    accelerator_memory_gib=(GPU_MEMORY_GIB.get(r.accelerator)
                                            if r.accelerator else None),
                    vcpus=r.vcpus, memory_gib=r.memory_gib, price=r.price,
                    spot_price=r.spot_price, fabric=fabric_of(r.instance_type),
                    fabric_gbps=None, nvlink=None, max_nodes=None, arch=r.arch, source=SOURCE,
                    fetched_at=fetched_at)
              for r in joined]
    return sorted(offers, key=lambda o: (o.region, o.zone or "", o.instance_type,
                                         o.accelerator or "", o.accelerator_count)), dropped


# ---- reading the APIs ----------------------------------------------------------------


def pages(get: GetJson, url: str, params: dict[str, str], key: str) -> Iterator[Any]:
    """Every item under `key` of every page (`nextPageToken` paging)."""
    token = ""
    while True:
        page = get(url, {**params, **({"pageToken": token} if token else {})})
        items = page.get(key) or []
        yield from (items.items() if isinstance(items, dict) else items)
        token = str(page.get("nextPageToken") or "")
        if not token:
            return


def _aggregated(get: GetJson, base: str, project: str, what: str,
                field: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    url = f"{base}/compute/v1/projects/{project}/aggregated/{what}"
    for scope, scoped in pages(get, url, {"maxResults": "500"}, "items"):
        items = (scoped or {}).get(field) or []
        if items:
            out.setdefault(str(scope).rsplit("/", 1)[-1], []).extend(items)
    return out


def _session_get() -> tuple[GetJson, str, str]:
    """An authorized GET (ADC), the Compute endpoint and the project."""
    from launcher.clouds.gcp.session import SCOPES, api_endpoint, local_credentials
    from launcher.config.settings import load_config

    settings = load_config().gcp
    project = local_credentials(settings).project
    if not project:
        raise CatalogFetchError("no GCP project (gcp.project, GOOGLE_CLOUD_PROJECT or gcloud)")
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    creds, _ = google.auth.default(scopes=list(SCOPES))
    session = AuthorizedSession(creds)

    def get(url: str, params: dict[str, str]) -> dict[str, Any]:
        resp = session.get(url, params=params, timeout=60)
        if resp.status_code != 200:
            raise CatalogFetchError(f"GET {url}: HTTP {resp.status_code}: {resp.text[:300]}")
        data: dict[str, Any] = resp.json()
        return data

    return get, api_endpoint(settings) or COMPUTE_URL, project


def fetch(regions: Sequence[str], *, price_list_url: str | None = None,
          price_list_format: str | None = None, regions_are_defaults: bool = False,
          on_progress: Callable[[str], None] | None = None,
          get: GetJson | None = None, compute_url: str | None = None,
          project: str | None = None) -> FetchedCatalog:
    """The entry point the API layer calls (the shape every fetcher has): every row of
    `regions`. `price_list_url`: the Cloud Billing API base URL (default Google's).
    Tests inject `get`, `compute_url`, `project`. Raises CatalogFetchError."""
    fetched_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    billing = (price_list_url or BILLING_URL).rstrip("/")
    say = on_progress or (lambda _m: None)
    try:
        if get is None:
            get, compute_url, project = _session_get()
        assert compute_url is not None and project is not None
        say("gcp: Cloud Billing SKUs of Compute Engine")
        skus = list(pages(get, f"{billing}/v1/services/{COMPUTE_SERVICE}/skus",
                          {"currencyCode": "USD", "pageSize": "5000"}, "skus"))
        say("gcp: machine types and accelerator types per zone")
        machine_types = _aggregated(get, compute_url, project, "machineTypes", "machineTypes")
        accelerators = _aggregated(get, compute_url, project, "acceleratorTypes",
                                   "acceleratorTypes")
    except CatalogFetchError:
        raise
    except Exception as exc:  # network, credentials, a page that is not JSON
        raise CatalogFetchError(f"{type(exc).__name__}: {exc}") from exc
    offers, dropped = build_offers(parse_skus(skus), machine_types, accelerators, regions,
                                   fetched_at)
    covered = {o.region for o in offers}
    notes = tuple(f"{r}: no rows (no machine types or prices listed)"
                  for r in regions if r not in covered)
    notes += tuple(f"dropped {n}: {why}" for why, n in sorted(dropped.items()))
    return FetchedCatalog(cloud=CLOUD, offers=tuple(offers), source=SOURCE,
                          upstream=f"{billing}/v1/services/{COMPUTE_SERVICE}/skus; {compute_url}",
                          fetched_at=fetched_at, regions=tuple(r for r in regions if r in covered),
                          notes=notes)
