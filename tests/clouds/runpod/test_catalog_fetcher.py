"""RunPod's catalog fetcher on a `gpuTypes` answer in the GraphQL schema's shape
(data/gpu_types_response.json: RunPod's field names and types, representative prices),
and `catalog refresh --cloud runpod` through the API layer against the GraphQL fake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.catalog.query import offers
from launcher.clouds.runpod.catalog_fetcher import SOURCE, fetch_catalog
from tests.runpod_fake import RunPodFake

RECORDED = json.loads((Path(__file__).with_name("data") / "gpu_types_response.json")
                      .read_text())["data"]


def _query(text: str) -> dict[str, Any]:
    assert "securePrice" in text and "communitySpotPrice" in text
    return RECORDED


def _row(rows: Any, it: str, zone: str) -> Any:
    (row,) = [o for o in rows if o.instance_type == it and o.zone == zone]
    return row


def test_reprices_the_current_rows(launcher_home: Path) -> None:
    current = offers(clouds=["runpod"])
    got = fetch_catalog((), query=_query, current=current)
    assert got.cloud == "runpod" and got.offers
    one = _row(got.offers, "1x_A100-80GB_SECURE", "US-KS-2")
    assert (one.price, one.spot_price) == (1.64, 0.82)
    two = _row(got.offers, "2x_A100-80GB-SXM_SECURE", "US-KS-2")
    assert (two.price, two.spot_price) == (3.48, None)  # no secure spot price listed
    four = _row(got.offers, "4x_H100-SXM_SECURE", "US-KS-2")
    assert four.price == pytest.approx(10.76) and four.spot_price == 7.0
    assert all(o.source == SOURCE and o.max_nodes == 1 for o in got.offers)
    # H100 PCIe is not in the answer: its rows are left out, and said so
    assert not [o for o in got.offers if o.accelerator == "H100"]
    assert any("8x_H100_SECURE" in n for n in got.notes)
    assert any("NVIDIA H200" in n and "not added" in n for n in got.notes)
    only_us = fetch_catalog(("US",), query=_query, current=current)
    assert {o.region for o in only_us.offers} == {"US"}


def test_a_failed_query_raises(launcher_home: Path) -> None:
    from launcher.catalog.refreshed import CatalogFetchError

    def broken(text: str) -> dict[str, Any]:
        raise OSError("connection refused")

    with pytest.raises(CatalogFetchError):
        fetch_catalog((), query=broken, current=offers(clouds=["runpod"]))
    with pytest.raises(CatalogFetchError):
        fetch_catalog((), query=lambda t: {"gpuTypes": None}, current=[])


def test_catalog_refresh_through_the_api(runpod_fake: RunPodFake) -> None:
    from launcher.api.catalog_refresh import catalog_forget, catalog_refresh

    runpod_fake.gpu_types_listing = RECORDED["gpuTypes"]
    (result,) = catalog_refresh("runpod")
    assert result.rows > 0 and result.source == SOURCE
    row = _row(offers(clouds=["runpod"]), "1x_A100-80GB_SECURE", "US-KS-2")
    assert (row.price, row.spot_price, row.max_nodes) == (1.64, 0.82, 1)
    assert catalog_forget("runpod")
