"""The Lambda catalog fetcher on a recorded `GET /instance-types` answer
(data/instance_types.json, Lambda's real shape), and through `catalog_refresh` against
the fake: one row per chosen region and type, price from price_cents_per_hour, no spot,
fabric unknown."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.catalog.refreshed import CatalogFetchError
from launcher.clouds.lambda_.catalog_fetcher import fetch_catalog
from tests.lambda_fake import LambdaFake

RECORDED = json.loads((Path(__file__).parent / "data" / "instance_types.json").read_text())
NOW = datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC)


def test_rows_from_a_recorded_answer() -> None:
    def get(endpoint: str) -> dict[str, Any]:
        assert endpoint == "https://lambda.invalid/api/v1"
        return dict(RECORDED["data"])

    got = fetch_catalog(("us-east-1", "us-west-1"), endpoint="https://lambda.invalid/api/v1",
                        get=get, gpus={"gpu_1x_a10": ("A10", 24.0)}, now=NOW)
    rows = {(o.region, o.instance_type): o for o in got.offers}
    assert len(rows) == 10  # 5 types x 2 regions, capacity or not
    h = rows[("us-west-1", "gpu_8x_h100_sxm5")]
    assert (h.accelerator, h.accelerator_count, h.accelerator_memory_gib) == ("H100", 8, 80)
    assert (h.price, h.spot_price, h.fabric, h.vcpus) == (23.92, None, None, 208)
    assert rows[("us-east-1", "gpu_1x_a10")].accelerator == "A10"  # from the snapshot
    assert rows[("us-east-1", "gpu_2x_b300_sxm6")].accelerator_memory_gib == 288
    cpu = rows[("us-east-1", "cpu_4x_general")]
    assert cpu.accelerator is None and cpu.price == 0.2


def test_failures_are_one_typed_error() -> None:
    def broken(endpoint: str) -> dict[str, Any]:
        raise OSError("unreachable")

    with pytest.raises(CatalogFetchError, match="unreachable"):
        fetch_catalog(("us-east-1",), endpoint="https://lambda.invalid", get=broken)
    with pytest.raises(CatalogFetchError, match="unexpected shape"):
        fetch_catalog(("us-east-1",), endpoint="https://lambda.invalid",
                      get=lambda e: {"x": {"nope": 1}})


def test_catalog_refresh_against_the_fake(lambda_fake: LambdaFake) -> None:
    from launcher.api.catalog_refresh import catalog_refresh
    from launcher.catalog import query

    (res,) = catalog_refresh(cloud="lambda", regions=["us-east-1"])
    assert res.rows == 3
    query.clear_process_cache()
    got = {o.instance_type: o.price for o in query.offers(clouds=["lambda"])}
    assert got == {"cpu_4x_general": 0.2, "gpu_1x_a10": 0.75, "gpu_8x_h100_sxm5": 23.92}
