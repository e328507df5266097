"""GCP's catalog fetcher on recorded responses in the real shapes: Cloud Billing Catalog
SKU pages (paged by nextPageToken; commitments, a zero-priced SKU, a SKU without
pricingInfo, spot GPU SKUs "attached to Spot Preemptible VMs"), machineTypes and
acceleratorTypes aggregatedList pages (shared-core and deprecated types). Served by
the Compute fake over HTTP and read through the product's real path (ADC token,
CLOUDSDK endpoint override, `catalog.gcp.price_list_url`), asserting exact rows; a
refresh whose second page fails keeps the previous rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.api import catalog_refresh
from launcher.clouds.gcp.catalog_fetcher import fetch
from tests.gcp_fake import GCPFake

R = ["us-central1"]


def sku(desc: str, usage: str, price: float, unit: str = "h",
        regions: tuple[str, ...] = ("us-central1",), free_tier: bool = False) -> dict[str, Any]:
    units, nanos = int(price), round((price - int(price)) * 1e9)
    tiers = [{"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": str(units),
                                                   "nanos": nanos}}]
    if free_tier:
        tiers.insert(0, {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD",
                                                              "units": "0", "nanos": 0}})
        tiers[1]["startUsageAmount"] = 720
    return {"name": f"services/6F81-5844-456A/skus/{abs(hash(desc + usage)) % 10**8:08X}",
            "skuId": "0000-0000-0000", "description": desc,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                         "resourceGroup": "CPU", "usageType": usage},
            "serviceRegions": list(regions),
            "pricingInfo": [{"effectiveTime": "2026-11-01T00:00:00Z", "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1, "tieredRates": tiers}}]}


SKUS = [
    {"skus": [
        sku("N2 Instance Core running in Americas", "OnDemand", 0.031611),
        sku("N2 Instance Ram running in Americas", "OnDemand", 0.004237, "GiBy.h"),
        sku("Spot Preemptible N2 Instance Core running in Americas", "Preemptible", 0.007),
        sku("Spot Preemptible N2 Instance Ram running in Americas", "Preemptible", 0.001,
            "GiBy.h"),
        sku("Commitment v1: N2 Cpu in Americas for 1 Year", "Commit1Yr", 0.019915),
        {"name": "services/6F81-5844-456A/skus/NOPRICE", "description":
         "N2D AMD Instance Core running in Americas", "category": {"usageType": "OnDemand"},
         "serviceRegions": ["us-central1"]},  # no pricingInfo: ignored
     ], "nextPageToken": "p1"},
    {"skus": [
        sku("N1 Predefined Instance Core running in Americas", "OnDemand", 0.031611,
            free_tier=True),
        sku("N1 Predefined Instance Ram running in Americas", "OnDemand", 0.004237, "GiBy.h"),
        sku("Nvidia Tesla T4 GPU running in Americas", "OnDemand", 0.35),
        sku("Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible", 0.14),
        sku("A2 Instance Core running in Americas", "OnDemand", 0.0327),
        sku("A2 Instance Ram running in Americas", "OnDemand", 0.0044, "GiBy.h"),
        sku("Nvidia Tesla A100 GPU running in Americas", "OnDemand", 2.933908),
        sku("E2 Instance Core running in Americas", "OnDemand", 0.0),  # zero: no price
        sku("E2 Instance Ram running in Americas", "OnDemand", 0.0, "GiBy.h"),
        sku("N2 Instance Core running in Frankfurt", "OnDemand", 0.038, regions=("europe-west3",)),
     ]},  # last page: no nextPageToken
]


def mt(name: str, cpus: int, mem_mb: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "compute#machineType", "id": "1", "name": name, "guestCpus": cpus,
            "memoryMb": mem_mb, "zone": "us-central1-a", **extra}


MACHINE_TYPES = [
    {"items": {"zones/us-central1-a": {"machineTypes": [
        mt("n2-standard-2", 2, 8192), mt("n1-standard-4", 4, 15360),
        mt("e2-micro", 2, 1024, isSharedCpu=True)]},
        "zones/asia-east1-a": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}},
     "nextPageToken": "p1"},
    {"items": {"zones/us-central1-a": {"machineTypes": [
        mt("n1-highmem-4", 4, 26624), mt("e2-standard-2", 2, 8192),
        mt("n2-old-2", 2, 8192, deprecated={"state": "OBSOLETE"}),
        mt("a2-highgpu-1g", 12, 87040, accelerators=[
            {"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}])]},
        "zones/europe-west3-a": {"machineTypes": [mt("n2-standard-2", 2, 8192)]}}},
]
ACCELERATOR_TYPES = [{"items": {"zones/us-central1-a": {"acceleratorTypes": [
    {"name": "nvidia-tesla-t4", "maximumCardsPerInstance": 4},
    {"name": "nvidia-tesla-a100", "maximumCardsPerInstance": 16},
    {"name": "nvidia-future-x1", "maximumCardsPerInstance": 8}]}}}]

EXPECTED = [  # (type, accelerator, count, price, spot price, fabric)
    ("a2-highgpu-1g", "A100", 1, 12 * 0.0327 + 85 * 0.0044 + 2.933908, None, None),
    ("n1-highmem-4", "T4", 1, 4 * 0.031611 + 26 * 0.004237 + 0.35, None, None),
    ("n1-highmem-4", None, 0, 4 * 0.031611 + 26 * 0.004237, None, None),
    ("n1-standard-4", None, 0, 4 * 0.031611 + 15 * 0.004237, None, None),
    ("n2-standard-2", None, 0, 2 * 0.031611 + 8 * 0.004237, 2 * 0.007 + 8 * 0.001, None),
]


@pytest.fixture
def recorded(gcp_env: GCPFake, launcher_home: Path) -> GCPFake:
    gcp_env.recorded.update(skus=list(SKUS), machineTypes=list(MACHINE_TYPES),
                            acceleratorTypes=list(ACCELERATOR_TYPES))
    config = launcher_home / "config.yaml"
    body = yaml.safe_load(config.read_text())
    body["catalog"] = {"gcp": {"price_list_url": gcp_env.endpoint}}
    config.write_text(yaml.safe_dump(body))
    return gcp_env


def _rows(offers: Any) -> list[tuple[Any, ...]]:
    return [(o.instance_type, o.accelerator, o.accelerator_count, o.price, o.spot_price,
             o.fabric) for o in offers]


def test_rows_from_recorded_pages_are_exact(recorded: GCPFake) -> None:
    got = fetch(R, price_list_url=recorded.endpoint)
    rows = sorted(_rows(got.offers), key=lambda r: (r[0], r[1] or ""))
    assert len(rows) == len(EXPECTED)
    for row, want in zip(rows, sorted(EXPECTED, key=lambda r: (r[0], r[1] or "")), strict=True):
        assert row[:3] == want[:3] and row[5] == want[5]
        assert row[3] == pytest.approx(want[3], abs=2e-6) and (
            row[4] == want[4] or row[4] == pytest.approx(want[4], abs=2e-6)), (row, want)
    a2 = next(o for o in got.offers if o.instance_type == "a2-highgpu-1g")
    assert (a2.vcpus, a2.memory_gib, a2.accelerator_memory_gib, a2.zone) == (
        12.0, 85.0, 40, "us-central1-a")
    assert got.regions == ("us-central1",) and got.cloud == "gcp"
    assert any("no price" in n for n in got.notes)  # e2-standard-2 at $0
    kinds = [c.kind for c in recorded.calls]
    assert kinds.count("billing.skus") == 2 and kinds.count("recorded.aggregated") == 3


def test_fabric_of_gpudirect_families() -> None:
    from launcher.clouds.gcp.catalog_fetcher import fabric_of

    assert [fabric_of(t) for t in ("a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g",
                                   "a4-highgpu-8g", "a2-highgpu-8g", "n2-standard-2")] == [
        "tcpx", "tcpx", "roce", "roce", None, None]


def test_refresh_through_the_api_then_a_failed_page_keeps_the_rows(recorded: GCPFake) -> None:
    (result,) = catalog_refresh.catalog_refresh("gcp", regions=R)
    assert result.rows == len(EXPECTED)
    recorded.recorded["skus"] = [SKUS[0], 503]  # page 2 fails
    with pytest.raises(catalog_refresh.CatalogRefreshError, match="previous gcp rows are kept"):
        catalog_refresh.catalog_refresh("gcp", regions=R)
    from launcher.catalog import refreshed

    assert refreshed.infos()["gcp"].rows == len(EXPECTED)
