"""`launcher catalog refresh --cloud aws` end to end through the API and the CLI.

The price list is served by a local HTTP server (recorded offer files) configured through
the documented `catalog.aws.price_list_url` setting; the EC2 API answers come from
recorded pages of the real shapes through botocore Stubber (see
tests/clouds/aws/ec2_pages.py: describe_instance_types entries are moto's recorded
data, spot price history pages are written in the API's shape), installed as the
fetcher's client factory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.api import catalog_refresh as refresh_api
from launcher.catalog import local, query, refreshed
from launcher.clouds.aws import catalog_fetcher
from tests.clouds.aws import ec2_pages
from tests.clouds.aws.price_list_server import PriceListServer, serve_price_list


@pytest.fixture(autouse=True)
def _isolated(launcher_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "none")
    monkeypatch.delenv("LAUNCHER_CATALOG_DIR", raising=False)
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    query.clear_process_cache()
    local.reset_cache()
    yield
    query.clear_process_cache()
    local.reset_cache()


@pytest.fixture
def price_list(launcher_home: Path) -> Iterator[PriceListServer]:
    with serve_price_list() as server:
        (launcher_home / "config.yaml").write_text(
            "catalog:\n"
            "  aws:\n"
            f"    price_list_url: {server.base_url}\n"
            "    regions: [us-east-1]\n"
        )
        yield server


def _use_pages(
    monkeypatch: pytest.MonkeyPatch, fail_spot_at: dict[str, int] | None = None
) -> list[str]:
    """Install recorded EC2 pages as the fetcher's clients; returns the regions asked."""
    asked: list[str] = []
    fails = fail_spot_at or {}

    def factory(region: str) -> Any:
        asked.append(region)
        return ec2_pages.stubbed_ec2(region, fail_spot_at=fails.get(region))

    monkeypatch.setattr(catalog_fetcher, "default_client_factory", factory)
    return asked


def _json_format(monkeypatch: pytest.MonkeyPatch, launcher_home: Path, server: PriceListServer) -> None:
    (launcher_home / "config.yaml").write_text(
        "catalog:\n  aws:\n"
        f"    price_list_url: {server.base_url}\n"
        "    price_list_format: json\n"
        "    regions: [us-west-2]\n"
    )


def _aws_rows(acc: str | None = None) -> list[Any]:
    return query.offers([acc] if acc else None, clouds=["aws"])


def _key(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((o.instance_type, o.region, o.zone or "", o.price or 0, o.spot_price or 0,
                   o.source, o.fetched_at) for o in rows)  # fmt: skip


def test_refresh_replaces_the_aws_rows_in_one_piece(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert {o.source for o in _aws_rows("A10G")} == {
        "anycloud-sh/catalog (SkyPilot v8 layout) aws/vms-extra.csv"
    }
    assert _aws_rows("T4")
    gcp_before = query.offers(["H100"], clouds=["gcp"])
    asked = _use_pages(monkeypatch)

    results = refresh_api.catalog_refresh("aws")

    assert asked == ["us-east-1"]  # the configured regions
    assert [(r.cloud, r.regions) for r in results] == [("aws", ("us-east-1",))]
    a10g = _aws_rows("A10G")
    assert sorted((o.zone, o.price, o.spot_price, o.fabric, o.fabric_gbps) for o in a10g) == [
        ("use1-az1", 1.006, 0.379, "ethernet", 2.5),
        ("use1-az2", 1.006, 0.402, "ethernet", 2.5),
        ("use1-az4", 1.006, None, "ethernet", 2.5),
        ("use1-az5", 1.006, None, "ethernet", 2.5),
        ("use1-az6", 1.006, None, "ethernet", 2.5),
    ]
    assert {(o.source, o.fetched_at) for o in a10g} == {
        (catalog_fetcher.SOURCE, results[0].fetched_at)
    }
    # the whole cloud was replaced: no bundled AWS row is left (T4 was not fetched)
    every = _aws_rows()
    assert every and {o.source for o in every} == {catalog_fetcher.SOURCE}
    assert len(every) == results[0].rows
    assert _aws_rows("T4") == []
    # NVLink is not in the EC2 API: filled from the snapshot's interconnect sources
    assert {o.nvlink for o in _aws_rows("H100")} == {True}
    assert query.offers(["H100"], clouds=["gcp"]) == gcp_before  # other clouds untouched
    # CPU-only rows of the refreshed cloud count too
    assert "aws" in query.cpu_only_clouds()
    assert query.locations("aws") == {"us-east-1": tuple(f"use1-az{i}" for i in range(1, 7))}

    st = {c.cloud: c for c in query.status().clouds}
    assert st["aws"].origin == "refreshed" and st["aws"].fetched_at_exact
    assert st["aws"].fetched_at == results[0].fetched_at and st["aws"].rows == len(every)
    assert st["aws"].age_days is not None and st["aws"].age_days < 0.01
    assert st["gcp"].origin == "snapshot"


def test_json_offer_files_through_the_format_setting(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch, launcher_home: Path
) -> None:
    _json_format(monkeypatch, launcher_home, price_list)
    _use_pages(monkeypatch)
    refresh_api.catalog_refresh("aws")
    assert price_list.requests == ["/offers/v1.0/aws/AmazonEC2/current/us-west-2/index.json"]
    assert sorted((o.zone, o.price, o.spot_price) for o in _aws_rows("A10G")) == [
        ("usw2-az1", 1.006, 0.42),
        ("usw2-az2", 1.006, None),
        ("usw2-az3", 1.006, None),
    ]


def test_refresh_interrupted_after_page_2_keeps_the_previous_rows(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_pages(monkeypatch)
    first = refresh_api.catalog_refresh("aws")[0]
    before = _key(_aws_rows())
    status_before = {c.cloud: c for c in query.status().clouds}["aws"]

    _use_pages(monkeypatch, fail_spot_at={"us-east-1": 3})  # fault after spot page 2
    with pytest.raises(refresh_api.CatalogRefreshError, match="previous aws rows are kept"):
        refresh_api.catalog_refresh("aws")

    query.clear_process_cache()
    assert _key(_aws_rows()) == before
    status_after = {c.cloud: c for c in query.status().clouds}["aws"]
    assert status_after == status_before and status_after.fetched_at == first.fetched_at


def test_a_failed_first_refresh_keeps_the_bundled_rows(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _key(_aws_rows("L4"))
    asked = _use_pages(monkeypatch)
    price_list.failing.add("us-east-1")
    with pytest.raises(refresh_api.CatalogRefreshError, match="HTTP 500"):
        refresh_api.catalog_refresh("aws")
    assert asked == []  # the price list is read first; EC2 was never asked
    assert _key(_aws_rows("L4")) == before
    assert {c.cloud: c.origin for c in query.status().clouds}["aws"] == "snapshot"
    assert refreshed.infos() == {}


def test_forget_goes_back_to_the_snapshot(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _key(_aws_rows("T4"))
    _use_pages(monkeypatch)
    refresh_api.catalog_refresh("aws")
    assert _aws_rows("T4") == []
    assert refresh_api.catalog_forget("aws") is True
    assert _key(_aws_rows("T4")) == before
    assert refresh_api.catalog_forget("aws") is False


def test_a_refresh_by_another_process_is_seen_without_a_restart(
    price_list: PriceListServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived process (the jobs controller) picks up a refresh committed elsewhere:
    the store is reopened when its file changes."""
    assert _aws_rows("A10G")[0].source != catalog_fetcher.SOURCE
    fetched = catalog_fetcher.fetch_catalog(
        catalog_fetcher.FetchSettings(regions=("us-east-1",), price_list_url=price_list.base_url),
        clients=ec2_pages.stubbed_ec2,
        now=ec2_pages.NOW,
    )
    refreshed.replace_cloud(fetched)  # as another process would: no cache clearing here
    rows = _aws_rows("A10G")
    assert {o.source for o in rows} == {catalog_fetcher.SOURCE} and len(rows) == 5


def test_a_cloud_without_a_fetcher_is_a_usage_error() -> None:
    from launcher.errors import UsageError

    with pytest.raises(UsageError, match="no price fetcher for this cloud yet"):
        refresh_api.catalog_refresh("nebius")


@pytest.mark.parametrize("name,hint", [("bogus", ""), ("amazon", " — did you mean 'aws'?")])
def test_an_unknown_cloud_is_named_unknown_with_the_known_ones(name: str, hint: str) -> None:
    from launcher.errors import UsageError

    with pytest.raises(UsageError) as err:
        refresh_api.catalog_refresh(name)
    text = str(err.value)
    assert text.startswith(f"--cloud {name}: unknown cloud{hint} (known: aws, azure, gcp, ")
    assert "refreshable: aws, azure, gcp" in text and "fetcher" not in text


def test_store_written_by_another_version_is_ignored(launcher_home: Path) -> None:
    import sqlite3

    path = Path(refreshed.store_path())
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO info VALUES ('schema', '999')")
    conn.commit()
    conn.close()
    assert refreshed.open_reader() is None
    assert {o.source for o in _aws_rows("A10G")} != {catalog_fetcher.SOURCE}

