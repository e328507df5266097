"""AWS's catalog rows, from AWS itself (what `launcher catalog refresh --cloud aws` runs).

Per region, four sources, all read before anything is returned:
- the public EC2 price list (catalog_price_list.py): on-demand Linux $/h per type;
- `describe_instance_types` (paged): vCPUs, memory, GPUs (`GpuInfo`) or Neuron devices
  (`NeuronInfo`), architecture, and the network: `NetworkInfo.EfaSupported` -> fabric
  `efa` (else `ethernet`: every current type has an ENA adapter, `EnaSupport`), Gbps
  from `NetworkPerformance` ("100 Gigabit", "8x 100 Gigabit"; for "Up to N" the
  network cards' `BaselineBandwidthInGbps`), never guessed;
- `describe_instance_type_offerings` with `LocationType=availability-zone-id` (paged):
  which zones (ids like `use1-az1`, as in the bundled catalog) have each type;
- `describe_spot_price_history` (`ProductDescriptions=["Linux/UNIX"]`, `StartTime` =
  now, paged with NextToken): the latest spot price per (zone, type); zone names are
  mapped to ids with `describe_availability_zones`.

One row per (region, zone id, type) where the type is offered and has an on-demand or a
spot price. `fetch_catalog` is blocking (minutes for every region on real AWS),
idempotent, writes nothing, and raises `CatalogFetchError` on any failure (no partial
result). Up to `REGION_WORKERS` regions are fetched at once. boto3 is imported here lazily, so importing this module costs nothing.
Credentials: the standard boto3 chain (env, profile, SSO, instance role);
`AWS_ENDPOINT_URL` is honoured by botocore.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError, FetchedCatalog
from launcher.clouds.aws.catalog_price_list import (
    DEFAULT_PRICE_LIST_URL,
    PriceListError,
    RegionPrices,
    fetch_region,
)

CLOUD = "aws"
REGION_WORKERS = 4  # regions fetched at once
SOURCE = "AWS EC2 API + price list (refreshed)"
# GPU names as the API reports them -> the catalog's names where they differ
# (SkyPilot's names, which tasks use): the 80 GB A100 and the 32 GB V100 are separate
# models in the catalog.
_A100_80GB_MIB = 70 * 1024
_V100_32GB_MIB = 30 * 1024
_GBPS = re.compile(r"^(?:(\d+)x )?(\d+(?:\.\d+)?) Gigabit$")

EC2ClientFactory = Callable[[str], Any]  # region -> a boto3 EC2 client
PriceFetcher = Callable[[str, str, str], RegionPrices]  # (base url, region, format)


@dataclass(frozen=True)
class FetchSettings:
    """What to read. `regions` empty = none (the API layer fills the default)."""

    regions: tuple[str, ...]
    price_list_url: str = DEFAULT_PRICE_LIST_URL
    price_list_format: str = "csv"
    # default regions (not named by the user): skip those the account has not enabled
    # (opt-in regions answer every EC2 call with an auth error) instead of failing
    skip_disabled_regions: bool = False


@dataclass(frozen=True)
class TypeFacts:
    """Hardware facts of one instance type, from describe_instance_types."""

    instance_type: str
    accelerator: str | None
    accelerator_count: float
    accelerator_memory_gib: float | None
    vcpus: float | None
    memory_gib: float | None
    fabric: str | None
    fabric_gbps: float | None
    arch: str


@dataclass
class _Progress:
    notes: list[str] = field(default_factory=list)


def default_client_factory(region: str) -> Any:
    """A boto3 EC2 client for `region` (standard credential chain and endpoint
    variables; adaptive retries for throttling)."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "adaptive", "max_attempts": 8}, connect_timeout=10, read_timeout=60
    )
    return boto3.session.Session().client("ec2", region_name=region, config=config)


# ------------------------------------------------------------------ parsing API shapes


def network_gbps(info: Mapping[str, Any]) -> float | None:
    """Gbps of an instance's network from `NetworkInfo`: "3200 Gigabit" -> 3200,
    "8x 100 Gigabit" -> 800, "Up to 12.5 Gigabit" -> the cards' baseline (sum), else
    None ("Moderate", "High" and the like say no number)."""
    perf = str(info.get("NetworkPerformance", "")).strip()
    m = _GBPS.match(perf)
    if m:
        value = int(m.group(1) or 1) * float(m.group(2))
        return value
    if perf.startswith("Up to"):
        base = [
            c.get("BaselineBandwidthInGbps")
            for c in info.get("NetworkCards") or []
            if isinstance(c.get("BaselineBandwidthInGbps"), int | float)
        ]
        return float(sum(base)) if base else None
    return None


def _accelerator(t: Mapping[str, Any]) -> tuple[str | None, float, float | None]:
    """(name, count per node, GiB per device) from GpuInfo or NeuronInfo."""
    gpus = (t.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        g = gpus[0]
        name = str(g.get("Name") or "") or None
        mib = (g.get("MemoryInfo") or {}).get("SizeInMiB")
        count = float(g.get("Count") or 0)
        part = g.get("GpuPartitionSize")
        if isinstance(part, int | float) and 0 < part < 1:
            # a slice of one GPU (g6f, gr6f): the API counts 0 or 1 whole GPUs
            count = round(float(g.get("LogicalGpuCount") or 1) * part, 3)
        if name == "A100" and isinstance(mib, int | float) and mib >= _A100_80GB_MIB:
            name = "A100-80GB"
        elif name == "V100" and isinstance(mib, int | float) and mib >= _V100_32GB_MIB:
            name = "V100-32GB"
        gib = round(mib / 1024, 2) if isinstance(mib, int | float) and mib > 0 else None
        return (name, count, gib) if name and count > 0 else (None, 0.0, None)
    devices = (t.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if devices:
        d = devices[0]
        mib = (d.get("MemoryInfo") or {}).get("SizeInMiB")
        gib = round(mib / 1024, 2) if isinstance(mib, int | float) and mib > 0 else None
        name = str(d.get("Name") or "") or None
        count = float(d.get("Count") or 0)
        return (name, count, gib) if name and count > 0 else (None, 0.0, None)
    return None, 0.0, None


def type_facts(t: Mapping[str, Any]) -> TypeFacts:
    """One `InstanceTypes` entry of describe_instance_types -> TypeFacts."""
    name, count, gib = _accelerator(t)
    net = t.get("NetworkInfo") or {}
    if net.get("EfaSupported"):
        fabric: str | None = "efa"
    elif net.get("EnaSupport") in ("supported", "required"):
        fabric = "ethernet"
    else:
        fabric = None
    archs = (t.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    mem = (t.get("MemoryInfo") or {}).get("SizeInMiB")
    vcpus = (t.get("VCpuInfo") or {}).get("DefaultVCpus")
    return TypeFacts(
        instance_type=str(t["InstanceType"]),
        accelerator=name,
        accelerator_count=count,
        accelerator_memory_gib=gib,
        vcpus=float(vcpus) if isinstance(vcpus, int | float) else None,
        memory_gib=round(mem / 1024, 3) if isinstance(mem, int | float) else None,
        fabric=fabric,
        fabric_gbps=network_gbps(net) if fabric else None,
        arch="arm64" if "arm64" in archs else "x86_64",
    )


# ------------------------------------------------------------------ paged API calls


def _pages(call: Callable[..., dict[str, Any]], key: str, **kwargs: Any) -> Iterator[Any]:
    """Items under `key` of every page of `call(**kwargs)`, following NextToken."""
    token: str | None = None
    while True:
        page = call(**kwargs, **({"NextToken": token} if token else {}))
        yield from page.get(key) or []
        token = page.get("NextToken")
        if not token:
            return


def instance_types(ec2: Any) -> dict[str, TypeFacts]:
    return {
        f.instance_type: f
        for f in (type_facts(t) for t in _pages(ec2.describe_instance_types, "InstanceTypes"))
    }


def type_zones(ec2: Any) -> dict[str, list[str]]:
    """instance type -> zone ids that offer it (sorted)."""
    out: dict[str, set[str]] = {}
    for o in _pages(
        ec2.describe_instance_type_offerings,
        "InstanceTypeOfferings",
        LocationType="availability-zone-id",
    ):
        out.setdefault(str(o["InstanceType"]), set()).add(str(o["Location"]))
    return {k: sorted(v) for k, v in out.items()}


def zone_ids(ec2: Any) -> dict[str, str]:
    """zone name (us-east-1a) -> zone id (use1-az1)."""
    resp = ec2.describe_availability_zones()
    return {str(z["ZoneName"]): str(z["ZoneId"]) for z in resp.get("AvailabilityZones") or []}


def spot_prices(ec2: Any, now: datetime.datetime) -> dict[tuple[str, str], float]:
    """(instance type, zone name) -> the latest Linux/UNIX spot price."""
    latest: dict[tuple[str, str], tuple[datetime.datetime, float]] = {}
    for p in _pages(
        ec2.describe_spot_price_history,
        "SpotPriceHistory",
        ProductDescriptions=["Linux/UNIX"],
        StartTime=now,
    ):
        key = (str(p["InstanceType"]), str(p["AvailabilityZone"]))
        ts = p["Timestamp"]
        price = float(p["SpotPrice"])
        old = latest.get(key)
        if price > 0 and (old is None or ts > old[0]):
            latest[key] = (ts, price)
    return {k: v[1] for k, v in latest.items()}


# ------------------------------------------------------------------ one region, all regions


def region_offers(
    region: str,
    ec2: Any,
    spot_ec2: Any,
    prices: RegionPrices,
    now: datetime.datetime,
    fetched_at: str,
    progress: _Progress,
) -> list[Offer]:
    """Join one region's four sources into rows (sorted by type, zone)."""
    facts = instance_types(ec2)
    zones = type_zones(ec2)
    names = zone_ids(ec2)
    spot_by_name = spot_prices(spot_ec2, now)
    spot: dict[tuple[str, str], float] = {}
    for (it, zone_name), price in spot_by_name.items():
        zid = names.get(zone_name)
        if zid is not None:
            spot[(it, zid)] = price
    rows: list[Offer] = []
    unknown = 0
    for it in sorted(zones):
        f = facts.get(it)
        if f is None:
            unknown += 1
            continue
        on_demand = prices.prices.get(it)
        for zid in zones[it]:
            sp = spot.get((it, zid))
            if on_demand is None and sp is None:
                continue
            rows.append(
                Offer(
                    cloud=CLOUD,
                    region=region,
                    zone=zid,
                    instance_type=it,
                    accelerator=f.accelerator,
                    accelerator_count=f.accelerator_count,
                    accelerator_memory_gib=f.accelerator_memory_gib,
                    vcpus=f.vcpus,
                    memory_gib=f.memory_gib,
                    price=on_demand,
                    spot_price=sp,
                    fabric=f.fabric,
                    fabric_gbps=f.fabric_gbps,
                    nvlink=None,
                    max_nodes=None,
                    arch=f.arch,
                    source=SOURCE,
                    fetched_at=fetched_at,
                )
            )
    if unknown:
        progress.notes.append(f"{region}: {unknown} offered types not in describe_instance_types")
    return rows


def enabled_regions(clients: EC2ClientFactory, region: str) -> set[str]:
    """Regions enabled for the account (DescribeRegions without AllRegions)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        resp = clients(region).describe_regions()
    except ClientError as e:
        err = e.response.get("Error", {})
        raise CatalogFetchError(
            f"AWS DescribeRegions failed: {err.get('Code')}: {err.get('Message')}"
        ) from None
    except BotoCoreError as e:
        raise CatalogFetchError(f"AWS DescribeRegions: {type(e).__name__}: {e}") from None
    return {str(r["RegionName"]) for r in resp.get("Regions") or []}


def fetch_catalog(
    settings: FetchSettings,
    *,
    clients: EC2ClientFactory | None = None,
    spot_clients: EC2ClientFactory | None = None,
    price_fetcher: PriceFetcher = fetch_region,
    now: datetime.datetime | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> FetchedCatalog:
    """Every configured region's rows, or CatalogFetchError (nothing partial).

    `clients` makes the EC2 client of a region (default: boto3's); `spot_clients` the
    one used for spot price history (default: the same). Blocking; idempotent."""
    from botocore.exceptions import BotoCoreError, ClientError

    if not settings.regions:
        raise CatalogFetchError("no AWS regions to refresh")
    clients = clients or default_client_factory
    now = now or datetime.datetime.now(datetime.UTC)
    fetched_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    progress = _Progress()
    say = on_progress or (lambda _msg: None)
    if settings.skip_disabled_regions:
        enabled = enabled_regions(clients, settings.regions[0])
        skipped = [r for r in settings.regions if r not in enabled]
        if skipped:
            progress.notes.append(f"not enabled for this account, skipped: {', '.join(skipped)}")
        settings = dataclasses.replace(
            settings, regions=tuple(r for r in settings.regions if r in enabled)
        )
        if not settings.regions:
            raise CatalogFetchError("none of the catalog's AWS regions is enabled for this account")

    def one(region: str) -> tuple[list[Offer], str | None]:
        say(f"aws {region}: price list")
        try:
            prices = price_fetcher(settings.price_list_url, region, settings.price_list_format)
            say(f"aws {region}: {len(prices.prices)} on-demand prices; EC2 API")
            ec2 = clients(region)
            spot_ec2 = ec2 if spot_clients is None else spot_clients(region)
            got = region_offers(region, ec2, spot_ec2, prices, now, fetched_at, progress)
        except PriceListError as e:
            raise CatalogFetchError(f"AWS price list for {region}: {e}") from None
        except ClientError as e:
            err = e.response.get("Error", {})
            raise CatalogFetchError(
                f"AWS {region}: {e.operation_name} failed: {err.get('Code')}: {err.get('Message')}"
            ) from None
        except BotoCoreError as e:
            raise CatalogFetchError(f"AWS {region}: {type(e).__name__}: {e}") from None
        say(f"aws {region}: {len(got)} rows")
        return got, prices.publication_date

    # regions in parallel (downloads overlap); rows keep the regions' order
    workers = max(1, min(REGION_WORKERS, len(settings.regions)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aws-catalog")
    futures = [pool.submit(one, r) for r in settings.regions]
    try:
        done = [f.result() for f in futures]
    except BaseException:
        # the first failure decides; regions not started are dropped, those in flight
        # finish in the background (their results are discarded)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    rows = [o for got, _ in done for o in got]
    dates = {d for _, d in done if d}
    upstream = f"price list {settings.price_list_url} ({settings.price_list_format})"
    if dates:
        upstream += f", published {min(dates)}" + (f"..{max(dates)}" if len(dates) > 1 else "")
    return FetchedCatalog(
        cloud=CLOUD,
        offers=tuple(rows),
        source=SOURCE,
        upstream=upstream + "; EC2 DescribeInstanceTypes, DescribeInstanceTypeOfferings, "
        "DescribeSpotPriceHistory",
        fetched_at=fetched_at,
        regions=tuple(settings.regions),
        notes=tuple(progress.notes),
    )


def fetch(
    regions: Sequence[str],
    *,
    price_list_url: str | None = None,
    price_list_format: str | None = None,
    regions_are_defaults: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> FetchedCatalog:
    """The entry point the API layer calls (the same shape for every cloud's fetcher):
    the rows of `regions`, from the price list at `price_list_url` (default AWS's).
    `regions_are_defaults`: the user named no region, so regions the account has not
    enabled are skipped (noted) rather than failing the refresh."""
    settings = FetchSettings(
        regions=tuple(regions),
        price_list_url=price_list_url or DEFAULT_PRICE_LIST_URL,
        price_list_format=price_list_format or "csv",
        skip_disabled_regions=regions_are_defaults,
    )
    return fetch_catalog(settings, on_progress=on_progress)
