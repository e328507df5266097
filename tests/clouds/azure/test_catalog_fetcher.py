"""The Azure fetcher on recorded pages of the real shapes: Retail Prices items (fields
as the API returns them, two pages joined by NextPageLink) and resource SKUs; exact rows
asserted. Covers Windows meters, Low Priority meters, spot meters, zero prices, a
retired meter, a non-primary meter, a missing field, a size restricted for the
subscription, and a GPU size the snapshot does not know."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError
from launcher.clouds.azure.catalog_fetcher import SOURCE, fetch_catalog

NOW = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)
BASE = "https://prices.example.test/api/retail/prices"


def item(sku: str, meter: str, price: float, product: str, **kw: Any) -> dict[str, Any]:
    out = {
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price,
        "unitPrice": price, "armRegionName": "eastus", "location": "US East",
        "effectiveStartDate": "2024-01-01T00:00:00Z", "meterId": f"m-{sku}-{meter}",
        "meterName": meter, "productId": "DZH318Z0BQ4B", "skuId": "DZH318Z0BQ4B/00TG",
        "productName": product, "skuName": meter, "serviceName": "Virtual Machines",
        "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour",
        "type": "Consumption", "isPrimaryMeterRegion": True, "armSkuName": sku,
    }
    out.update(kw)
    return out


DSV5 = "Virtual Machines Dsv5 Series"
PAGE1 = {"BillingCurrency": "USD", "CustomerEntityId": "Default",
         "CustomerEntityType": "Retail", "Count": 6, "Items": [
    item("Standard_D2s_v5", "D2s v5", 0.096, DSV5),
    item("Standard_D2s_v5", "D2s v5 Spot", 0.0192, DSV5),
    item("Standard_D2s_v5", "D2s v5", 0.188, DSV5 + " Windows"),
    item("Standard_D2s_v5", "D2s v5 Low Priority", 0.0192, DSV5),
    item("Standard_D2s_v5", "D2s v5", 0.09, DSV5, effectiveStartDate="2022-01-01T00:00:00Z"),
    item("Standard_D4s_v5", "D4s v5", 0.0, DSV5),  # a zero price: no on-demand price
], "NextPageLink": BASE + "?page=2"}
PAGE2 = {"BillingCurrency": "USD", "Count": 6, "Items": [
    item("Standard_D4s_v5", "D4s v5 Spot", 0.0384, DSV5),
    item("Standard_ND96asr_v4", "ND96asr v4", 27.197, "Virtual Machines NDasrA100v4 Series"),
    item("Standard_ND96asr_v4", "ND96asr v4 Spot", 5.98, "Virtual Machines NDasrA100v4 Series"),
    item("Standard_NC4_old", "NC4 old", 1.0, "Virtual Machines NC Series",
         effectiveEndDate="2025-01-01T00:00:00Z"),  # retired
    item("Standard_E2s_v5", "E2s v5", 0.126, "Virtual Machines Esv5 Series",
         isPrimaryMeterRegion=False),
    {k: v for k, v in item("Standard_F2s_v2", "F2s v2", 0.0846,
                          "Virtual Machines FSv2 Series").items() if k != "effectiveStartDate"},
    item("Standard_NV6ads_A10_v5", "NV6ads A10 v5", 0.454, "Virtual Machines NVadsA10v5"),
], "NextPageLink": None}


def sku(name: str, vcpus: int, mem: float, gpus: int = 0, rdma: bool = False,
        restricted: bool = False) -> dict[str, Any]:
    caps = [{"name": "vCPUs", "value": str(vcpus)}, {"name": "MemoryGB", "value": str(mem)},
            {"name": "CpuArchitectureType", "value": "x64"}]
    if gpus:
        caps.append({"name": "GPUs", "value": str(gpus)})
    if rdma:
        caps.append({"name": "RdmaEnabled", "value": "True"})
    return {"resourceType": "virtualMachines", "name": name, "tier": "Standard",
            "size": name[len("Standard_"):], "locations": ["eastus"],
            "locationInfo": [{"location": "eastus", "zones": ["1", "2", "3"]}],
            "capabilities": caps,
            "restrictions": [{"type": "Location", "values": ["eastus"],
                              "reasonCode": "NotAvailableForSubscription"}] if restricted else []}


SKUS = [sku("Standard_D2s_v5", 2, 8), sku("Standard_D4s_v5", 4, 16),
        sku("Standard_ND96asr_v4", 96, 900, gpus=8, rdma=True),
        sku("Standard_E2s_v5", 2, 16), sku("Standard_F2s_v2", 2, 4, restricted=True),
        sku("Standard_NV6ads_A10_v5", 6, 55, gpus=1),
        {"resourceType": "disks", "name": "Premium_LRS", "locations": ["eastus"]}]


def _get(pages: list[dict[str, Any]]) -> Any:
    seen: list[str] = []

    def get(url: str) -> dict[str, Any]:
        seen.append(url)
        return pages[len(seen) - 1]
    get.seen = seen  # type: ignore[attr-defined]
    return get


def row(size: str, price: float | None, spot: float | None, vcpus: float, mem: float,
        acc: str | None = None, count: float = 0.0, acc_mem: float | None = None,
        fabric: str = "ethernet") -> Offer:
    return Offer(cloud="azure", region="eastus", zone=None, instance_type=size,
                 accelerator=acc, accelerator_count=count, accelerator_memory_gib=acc_mem,
                 vcpus=vcpus, memory_gib=mem, price=price, spot_price=spot, fabric=fabric,
                 fabric_gbps=None, nvlink=None, max_nodes=None, arch="x86_64", source=SOURCE,
                 fetched_at="2026-05-01T00:00:00Z")


def test_rows_from_recorded_pages() -> None:
    get = _get([PAGE1, PAGE2])
    got = fetch_catalog(["eastus"], base_url=BASE, get=get, list_skus=lambda r: SKUS,
                        gpus={"Standard_ND96asr_v4": ("A100", 40.0)}, now=NOW)
    assert len(get.seen) == 2 and get.seen[1] == BASE + "?page=2"
    assert "armRegionName+eq+%27eastus%27" in get.seen[0]
    assert list(got.offers) == [
        row("Standard_D2s_v5", 0.096, 0.0192, 2, 8),
        row("Standard_D4s_v5", None, 0.0384, 4, 16),
        row("Standard_ND96asr_v4", 27.197, 5.98, 96, 900, "A100", 8.0, 40.0, "infiniband"),
    ]
    assert got.notes == ("eastus: GPU sizes with no known GPU model left out: "
                         "Standard_NV6ads_A10_v5",)


def test_a_failing_page_fails_the_whole_fetch() -> None:
    def get(url: str) -> dict[str, Any]:
        if "page=2" in url:
            raise OSError("connection reset")
        return PAGE1

    with pytest.raises(CatalogFetchError, match="connection reset"):
        fetch_catalog(["eastus"], base_url=BASE, get=get, list_skus=lambda r: SKUS,
                      gpus={}, now=NOW)


def test_catalog_refresh_azure_through_the_api(azure_fake: Any, launcher_home: Any) -> None:
    """`catalog refresh --cloud azure`: Retail Prices from the configured URL
    (`catalog.azure.price_list_url`) and resource SKUs through the SDK (ARM fake)."""
    import yaml

    from launcher.api.catalog_refresh import catalog_refresh
    from launcher.catalog.query import offers

    url = azure_fake.endpoint + "/api/retail/prices"
    p2 = dict(PAGE2, NextPageLink=None)
    azure_fake.retail_pages = [dict(PAGE1, NextPageLink=url + "?page=1"), p2]
    azure_fake.skus = SKUS
    config = launcher_home / "config.yaml"
    body = yaml.safe_load(config.read_text())
    body["catalog"] = {"azure": {"price_list_url": url}}
    config.write_text(yaml.safe_dump(body))
    (result,) = catalog_refresh("azure", ["eastus"])
    assert result.rows == 4 and result.regions == ("eastus",)  # the snapshot knows the A10 size
    rows = {o.instance_type: o for o in offers(clouds=["azure"]) if o.region == "eastus"
            and o.source == SOURCE}
    assert set(rows) == {"Standard_D2s_v5", "Standard_D4s_v5", "Standard_ND96asr_v4",
                         "Standard_NV6ads_A10_v5"}
    assert rows["Standard_NV6ads_A10_v5"].accelerator_count == 1
    assert rows["Standard_ND96asr_v4"].fabric == "infiniband"
    assert rows["Standard_ND96asr_v4"].accelerator == "A100"
