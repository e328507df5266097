"""Recorded EC2 API pages in the real response shapes, for the catalog fetcher's tests.

- describe_instance_types: entries taken verbatim from moto's `instance_types.json.gz`
  (moto records the real API's answers), split into pages joined by NextToken.
- describe_instance_type_offerings (LocationType availability-zone-id) and
  describe_availability_zones: moto's real per-region data for the same types.
- describe_spot_price_history: moto's spot history is constant junk, so these pages are
  written here, in the API's shape (AvailabilityZone is a zone NAME, SpotPrice a
  string, Timestamp a datetime), three pages joined by NextToken.

`stubbed_ec2(region, ...)` returns a real boto3 EC2 client with a botocore Stubber
queued with these pages in the order the fetcher calls them; `fail_spot_at` injects a
fault (a ClientError the real API returns) instead of that spot page.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
from typing import Any

import boto3
from botocore.stub import ANY, Stubber

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)
TYPES = ("p5.48xlarge", "g5.xlarge", "t3.micro", "inf2.xlarge", "c7i.48xlarge")

ZONES = {
    "us-east-1": {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1", "us-east-1c": "use1-az2",
                  "us-east-1d": "use1-az4", "us-east-1e": "use1-az3", "us-east-1f": "use1-az5"},
    "us-west-2": {"us-west-2a": "usw2-az2", "us-west-2b": "usw2-az1", "us-west-2c": "usw2-az3",
                  "us-west-2d": "usw2-az4"},
}  # fmt: skip


def _moto_resource(*parts: str) -> Any:
    import moto

    path = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources", *parts)
    with gzip.open(path) as f:
        return json.load(f)


def instance_type_pages(types: tuple[str, ...] = TYPES, per_page: int = 2) -> list[dict[str, Any]]:
    data = _moto_resource("instance_types.json.gz")
    entries = [data[t] for t in types]
    pages = []
    for i in range(0, len(entries), per_page):
        page: dict[str, Any] = {"InstanceTypes": entries[i : i + per_page]}
        if i + per_page < len(entries):
            page["NextToken"] = f"types-{i + per_page}"
        pages.append(page)
    return pages


def offering_pages(region: str, types: tuple[str, ...] = TYPES) -> list[dict[str, Any]]:
    data = _moto_resource("instance_type_offerings", "availability-zone-id", f"{region}.json.gz")
    rows = [
        {"InstanceType": o["InstanceType"], "LocationType": "availability-zone-id",
         "Location": o["Location"]}
        for o in data
        if o["InstanceType"] in types
    ]  # fmt: skip
    half = len(rows) // 2
    return [
        {"InstanceTypeOfferings": rows[:half], "NextToken": "offerings-2"},
        {"InstanceTypeOfferings": rows[half:]},
    ]


def zones_response(region: str) -> dict[str, Any]:
    return {
        "AvailabilityZones": [
            {"ZoneName": name, "ZoneId": zid, "RegionName": region, "State": "available",
             "ZoneType": "availability-zone"}
            for name, zid in ZONES[region].items()
        ]
    }  # fmt: skip


def _spot(it: str, zone: str, price: str, minutes_ago: int) -> dict[str, Any]:
    return {
        "AvailabilityZone": zone,
        "InstanceType": it,
        "ProductDescription": "Linux/UNIX",
        "SpotPrice": price,
        "Timestamp": NOW - datetime.timedelta(minutes=minutes_ago),
    }


def spot_pages(region: str) -> list[dict[str, Any]]:
    if region == "us-east-1":
        return [
            {"SpotPriceHistory": [
                _spot("g5.xlarge", "us-east-1b", "0.361200", 120),
                _spot("g5.xlarge", "us-east-1b", "0.379000", 60),  # newer: this one
                _spot("p5.48xlarge", "us-east-1a", "31.400000", 30),
            ], "NextToken": "spot-2"},
            {"SpotPriceHistory": [
                _spot("g5.xlarge", "us-east-1c", "0.402000", 10),
                _spot("t3.micro", "us-east-1d", "0.003600", 5),
                _spot("g5.xlarge", "us-east-1b", "0.350000", 180),  # older: ignored
            ], "NextToken": "spot-3"},
            {"SpotPriceHistory": [
                _spot("inf2.xlarge", "us-east-1f", "0.091100", 15),
                _spot("p5.48xlarge", "us-east-1e", "29.900000", 40),
            ]},
        ]  # fmt: skip
    return [
        {"SpotPriceHistory": [_spot("g5.xlarge", "us-west-2b", "0.420000", 20)],
         "NextToken": "spot-2"},
        {"SpotPriceHistory": [_spot("p5.48xlarge", "us-west-2a", "33.000000", 25)],
         "NextToken": "spot-3"},
        {"SpotPriceHistory": []},
    ]  # fmt: skip


def _spot_params(token: str | None, start: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"ProductDescriptions": ["Linux/UNIX"], "StartTime": start}
    if token:
        params["NextToken"] = token
    return params


def queue_spot(stub: Stubber, region: str, start: Any = ANY, fail_at: int | None = None) -> None:
    """Queue the spot pages (1-based `fail_at`: that page is a fault instead)."""
    token = None
    for i, page in enumerate(spot_pages(region), start=1):
        if fail_at == i:
            stub.add_client_error(
                "describe_spot_price_history",
                service_error_code="RequestLimitExceeded",
                service_message="Request limit exceeded.",
                http_status_code=503,
                expected_params=_spot_params(token, start),
            )
            return
        stub.add_response("describe_spot_price_history", page, _spot_params(token, start))
        token = page.get("NextToken")


def spot_only_client(region: str, fail_at: int | None = None) -> Any:
    client = boto3.client("ec2", region_name=region)
    stub = Stubber(client)
    queue_spot(stub, region, start=NOW, fail_at=fail_at)
    stub.activate()
    return client


def stubbed_ec2(region: str, fail_spot_at: int | None = None) -> Any:
    """Every call the fetcher makes for `region`, in order, from recorded pages."""
    client = boto3.client("ec2", region_name=region)
    stub = Stubber(client)
    token = None
    for page in instance_type_pages():
        stub.add_response(
            "describe_instance_types", page, {"NextToken": token} if token else {}
        )
        token = page.get("NextToken")
    token = None
    for page in offering_pages(region):
        params: dict[str, Any] = {"LocationType": "availability-zone-id"}
        if token:
            params["NextToken"] = token
        stub.add_response("describe_instance_type_offerings", page, params)
        token = page.get("NextToken")
    stub.add_response("describe_availability_zones", zones_response(region), {})
    queue_spot(stub, region, fail_at=fail_spot_at)
    stub.activate()
    return client
