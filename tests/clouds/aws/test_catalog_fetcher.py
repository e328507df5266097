"""The AWS catalog fetcher on recorded responses in the real shapes.

- Price list: recorded offer files (CSV with the real header, JSON with the real
  products/terms layout) served over HTTP by a local stdlib server on 127.0.0.1.
- describe_instance_types / describe_instance_type_offerings / describe_availability_zones:
  moto's server (its instance-type and offering data are recorded from the real API).
- describe_spot_price_history: botocore Stubber pages (moto's spot history is constant
  junk), three pages joined by NextToken.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from launcher.catalog.offer import Offer
from launcher.catalog.refreshed import CatalogFetchError
from launcher.clouds.aws import catalog_fetcher as cf
from launcher.clouds.aws.catalog_price_list import PriceListError, fetch_region
from tests.clouds.aws import ec2_pages
from tests.clouds.aws.price_list_server import PriceListServer, serve_price_list


@pytest.fixture
def price_list() -> Iterator[PriceListServer]:
    with serve_price_list() as server:
        yield server


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


# ---------------------------------------------------------------- price list


def test_csv_offer_file_keeps_only_plain_on_demand_linux(price_list: PriceListServer) -> None:
    got = fetch_region(price_list.base_url, "us-east-1", "csv")
    # Windows, dedicated tenancy, a reservation term, an unused capacity reservation,
    # SQL Web pre-installed, an allocated reservation at $0, a Local Zone (Boston) price
    # and EBS storage are all skipped
    assert got.prices == {
        "p5.48xlarge": 98.32,
        "g5.xlarge": 1.006,
        "t3.micro": 0.0104,
        "inf2.xlarge": 0.7582,
        "c7i.48xlarge": 8.568,
        "c7i.metal-48xl": 8.568,
    }
    assert got.publication_date == "2026-11-20T18:02:11Z"
    assert price_list.requests == ["/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv"]


def test_json_offer_file_follows_the_same_rules(price_list: PriceListServer) -> None:
    got = fetch_region(price_list.base_url, "us-west-2", "json")
    assert got.prices == {"g5.xlarge": 1.006, "p5.48xlarge": 98.32}
    assert got.publication_date == "2026-11-20T18:02:11Z"


def test_price_list_http_errors_are_typed(price_list: PriceListServer) -> None:
    with pytest.raises(PriceListError, match="HTTP 404"):
        fetch_region(price_list.base_url, "eu-west-9", "csv")
    price_list.failing.add("us-east-1")
    with pytest.raises(PriceListError, match="HTTP 500"):
        fetch_region(price_list.base_url, "us-east-1", "csv")


def test_price_list_with_a_conflicting_price_is_refused(tmp_path: Any) -> None:
    import io

    from launcher.clouds.aws.catalog_price_list import parse_csv

    header = ('"SKU","TermType","Product Family","Instance Type","Operating System","Tenancy",'
              '"Pre Installed S/W","CapacityStatus","Unit","PricePerUnit","Currency"\n')  # fmt: skip
    row = '"S{n}","OnDemand","Compute Instance","g5.xlarge","Linux","Shared","NA","Used","Hrs","{p}","USD"\n'
    text = '"FormatVersion","v1.0"\n' + header + row.format(n=1, p="1.0") + row.format(n=2, p="2.0")
    with pytest.raises(PriceListError, match="two on-demand Linux prices for g5.xlarge"):
        parse_csv(io.StringIO(text), "test")
    with pytest.raises(PriceListError, match="no header"):
        parse_csv(io.StringIO('"FormatVersion","v1.0"\n'), "test")


# ---------------------------------------------------------------- API shapes


@pytest.mark.parametrize(
    ("info", "gbps"),
    [
        ({"NetworkPerformance": "3200 Gigabit"}, 3200),
        ({"NetworkPerformance": "8x 100 Gigabit"}, 800),
        ({"NetworkPerformance": "Up to 12.5 Gigabit",
          "NetworkCards": [{"BaselineBandwidthInGbps": 0.75}]}, 0.75),  # fmt: skip
        ({"NetworkPerformance": "Up to 10 Gigabit"}, None),  # no card figures: unknown
        ({"NetworkPerformance": "Moderate"}, None),
    ],
)
def test_network_gbps_comes_from_the_api(info: dict[str, Any], gbps: float | None) -> None:
    assert cf.network_gbps(info) == gbps


# ---------------------------------------------------------------- the whole fetch


def _row(it: str, zone: str, price: float | None, spot: float | None) -> Offer:
    facts = {
        "p5.48xlarge": ("H100", 8.0, 80.0, 192.0, 2048.0, "efa", 3200.0),
        "g5.xlarge": ("A10G", 1.0, 22.35, 4.0, 16.0, "ethernet", 2.5),
        "t3.micro": (None, 0.0, None, 2.0, 1.0, "ethernet", 0.064),
        "inf2.xlarge": ("Inferentia2", 1.0, 32.0, 4.0, 16.0, "ethernet", 2.083),
        "c7i.48xlarge": (None, 0.0, None, 192.0, 384.0, "efa", 50.0),
        "c7i.metal-48xl": (None, 0.0, None, 192.0, 384.0, "efa", 50.0),
    }[it]
    acc, count, mem, vcpus, ram, fabric, gbps = facts
    return Offer(
        cloud="aws", region="us-east-1", zone=zone, instance_type=it, accelerator=acc,
        accelerator_count=count, accelerator_memory_gib=mem, vcpus=vcpus, memory_gib=ram,
        price=price, spot_price=spot, fabric=fabric, fabric_gbps=gbps, nvlink=None,
        max_nodes=None, arch="x86_64", source=cf.SOURCE, fetched_at="2026-11-23T12:00:00Z",
    )  # fmt: skip


def _expected_us_east_1() -> list[Offer]:
    spot = {
        ("g5.xlarge", "use1-az1"): 0.379,  # the newest of three history entries
        ("g5.xlarge", "use1-az2"): 0.402,
        ("p5.48xlarge", "use1-az6"): 31.4,
        ("p5.48xlarge", "use1-az3"): 29.9,
        ("t3.micro", "use1-az4"): 0.0036,
        ("inf2.xlarge", "use1-az5"): 0.0911,
    }
    zones = {
        "c7i.48xlarge": ["use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6"],
        "c7i.metal-48xl": ["use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6"],
        "g5.xlarge": ["use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6"],
        "inf2.xlarge": ["use1-az2", "use1-az4", "use1-az5", "use1-az6"],
        "p5.48xlarge": ["use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6"],
        "t3.micro": ["use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6"],
    }
    prices = {"p5.48xlarge": 98.32, "g5.xlarge": 1.006, "t3.micro": 0.0104,
              "inf2.xlarge": 0.7582, "c7i.48xlarge": 8.568, "c7i.metal-48xl": 8.568}  # fmt: skip
    return [
        _row(it, z, prices[it], spot.get((it, z))) for it in sorted(zones) for z in zones[it]
    ]


def test_fetch_joins_price_list_moto_types_and_spot_pages_into_exact_rows(
    price_list: PriceListServer, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    settings = cf.FetchSettings(regions=("us-east-1",), price_list_url=price_list.base_url)
    got = cf.fetch_catalog(
        settings, spot_clients=ec2_pages.spot_only_client, now=ec2_pages.NOW
    )
    assert list(got.offers) == _expected_us_east_1()
    assert got.cloud == "aws" and got.regions == ("us-east-1",)
    assert got.fetched_at == "2026-11-23T12:00:00Z"
    assert "published 2026-11-20T18:02:11Z" in got.upstream


def test_fetch_interrupted_after_spot_page_2_returns_nothing(
    price_list: PriceListServer, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    settings = cf.FetchSettings(regions=("us-east-1",), price_list_url=price_list.base_url)
    with pytest.raises(CatalogFetchError, match="DescribeSpotPriceHistory failed: RequestLimitExceeded"):
        cf.fetch_catalog(
            settings,
            spot_clients=lambda region: ec2_pages.spot_only_client(region, fail_at=3),
            now=ec2_pages.NOW,
        )


def test_fetch_without_credentials_is_a_typed_error(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask an instance role
    settings = cf.FetchSettings(regions=("us-east-1",), price_list_url=price_list.base_url)
    with pytest.raises(CatalogFetchError, match="NoCredentialsError"):
        cf.fetch_catalog(settings, now=ec2_pages.NOW)
    assert os.environ.get("AWS_ENDPOINT_URL") is None


def test_regions_are_fetched_together_and_kept_in_order(price_list: PriceListServer) -> None:
    """Two regions (fetched in parallel), each from recorded EC2 pages; rows come out
    region by region in the configured order. us-west-2's offer file is the JSON one."""

    def prices(base: str, region: str, fmt: str) -> Any:
        return fetch_region(base, region, "csv" if region == "us-east-1" else "json")

    settings = cf.FetchSettings(regions=("us-west-2", "us-east-1"), price_list_url=price_list.base_url)
    got = cf.fetch_catalog(
        settings, clients=ec2_pages.stubbed_ec2, price_fetcher=prices, now=ec2_pages.NOW
    )
    regions = [o.region for o in got.offers]
    assert regions == sorted(regions, reverse=True) and set(regions) == {"us-west-2", "us-east-1"}
    west = [(o.instance_type, o.zone, o.price, o.spot_price) for o in got.offers
            if o.region == "us-west-2"]  # fmt: skip
    assert west == [
        ("g5.xlarge", "usw2-az1", 1.006, 0.42),
        ("g5.xlarge", "usw2-az2", 1.006, None),
        ("g5.xlarge", "usw2-az3", 1.006, None),
        ("p5.48xlarge", "usw2-az1", 98.32, None),
        ("p5.48xlarge", "usw2-az2", 98.32, 33.0),
        ("p5.48xlarge", "usw2-az3", 98.32, None),
        ("p5.48xlarge", "usw2-az4", 98.32, None),
    ]
    east = [o for o in got.offers if o.region == "us-east-1"]
    assert east == [
        o for o in _expected_us_east_1() if o.instance_type != "c7i.metal-48xl"
    ]  # the recorded pages hold five types; c7i.metal-48xl is not among them


def test_default_regions_the_account_has_not_enabled_are_skipped(price_list: PriceListServer) -> None:
    """Opt-in regions answer every EC2 call with an auth error: with the default region
    list they are skipped (and noted), found through DescribeRegions (recorded page)."""
    import boto3
    from botocore.stub import Stubber

    lookup = boto3.client("ec2", region_name="af-south-1")
    stub = Stubber(lookup)
    stub.add_response("describe_regions", {"Regions": [
        {"RegionName": "us-east-1", "Endpoint": "ec2.us-east-1.amazonaws.com",
         "OptInStatus": "opt-in-not-required"},
    ]}, {})  # fmt: skip
    stub.activate()
    made: list[str] = []

    def clients(region: str) -> Any:
        made.append(region)
        return lookup if len(made) == 1 else ec2_pages.stubbed_ec2(region)

    settings = cf.FetchSettings(
        regions=("af-south-1", "us-east-1"),
        price_list_url=price_list.base_url,
        skip_disabled_regions=True,
    )
    got = cf.fetch_catalog(settings, clients=clients, now=ec2_pages.NOW)
    assert made == ["af-south-1", "us-east-1"] and got.regions == ("us-east-1",)
    assert {o.region for o in got.offers} == {"us-east-1"}
    assert got.notes == ("not enabled for this account, skipped: af-south-1",)
    assert price_list.requests == ["/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv"]
