"""The Vast catalog fetcher on a recorded `POST /bundles/` answer (data/bundles.json:
the marketplace search's real offer objects, trimmed to seven), and through
`catalog_refresh` against the fake: rows per region and shape with the cheapest
on-demand and bid prices, max_nodes 1, fabric unknown."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.catalog.refreshed import CatalogFetchError
from launcher.clouds.vast.catalog_fetcher import fetch_catalog
from tests.vast_fake import VastFake

RECORDED = json.loads((Path(__file__).parent / "data" / "bundles.json").read_text())
REGIONS = ("Florida, US, NA", "Vietnam, VN, AS", "Bulgaria, BG, EU")
NOW = datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC)


def test_rows_from_a_recorded_search() -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        asked.append((url, body))
        return dict(RECORDED)

    got = fetch_catalog(REGIONS, endpoint="https://vast.invalid/api/v0", post=post, now=NOW)
    assert asked[0][0] == "https://vast.invalid/api/v0/bundles/"
    assert asked[0][1]["rentable"] == {"eq": True} and asked[0][1]["type"] == "on-demand"
    rows = {(o.region, o.instance_type): o for o in got.offers}
    fl = rows[("Florida, US, NA", "1x-H100_SXM-32-65536")]
    assert (fl.price, fl.spot_price) == (1.802, 0.95)  # cheapest of two hosts
    assert fl.accelerator == "H100" and fl.accelerator_count == 1 and fl.max_nodes == 1
    assert fl.fabric is None and fl.zone is None and fl.fetched_at == "2026-11-25T00:00:00Z"
    assert rows[("Vietnam, VN, AS", "8x-H100_SXM-256-2063954")].price == 14.941
    assert rows[("Bulgaria, BG, EU", "1x-H100_NVL-32-65536")].spot_price is None
    assert rows[("Florida, US, NA", "1x-RTX_4090-16-32112")].accelerator == "RTX4090"
    assert len(rows) == 5 and got.notes == ("1 offers on hosts outside the chosen regions left out",)


def test_a_bad_answer_is_one_typed_failure() -> None:
    with pytest.raises(CatalogFetchError, match="no 'offers'"):
        fetch_catalog(REGIONS, endpoint="https://vast.invalid", post=lambda u, b: {"x": 1})

    def broken(url: str, body: dict[str, Any]) -> dict[str, Any]:
        raise OSError("connection refused")

    with pytest.raises(CatalogFetchError, match="connection refused"):
        fetch_catalog(REGIONS, endpoint="https://vast.invalid", post=broken)


def test_catalog_refresh_against_the_fake(vast_fake: VastFake) -> None:
    from launcher.api.catalog_refresh import catalog_refresh
    from launcher.catalog import query

    (res,) = catalog_refresh(cloud="vast")
    assert res.rows == 3
    query.clear_process_cache()
    got = {(o.region, o.instance_type): (o.price, o.spot_price)
           for o in query.offers(clouds=["vast"])}
    assert got[("Florida, US, NA", "1x-H100_SXM-32-65536")] == (1.80, 0.90)
    assert got[("Vietnam, VN, AS", "1x-H100_SXM-32-65536")] == (2.10, 1.20)
