"""The AWS Spot Advisor feed parser and refresh (launcher.catalog.fetchers.aws_spot_advisor),
on a recorded excerpt of the real feed's shape (a few entries of the June 2025 feed)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.catalog import interruption
from launcher.catalog.fetchers.aws_spot_advisor import (
    AdvisorFeedError,
    AdvisorRow,
    parse_feed,
    refresh_table,
    refreshed_table_path,
    table_text,
)

EXCERPT = {
    "global_rate": "<10%",
    "instance_types": {"p5.48xlarge": {"emr": False, "cores": 192, "ram_gb": 2048.0},
                       "p3.2xlarge": {"emr": True, "cores": 8, "ram_gb": 61.0}},
    "ranges": [
        {"index": 0, "label": "<5%", "dots": 0, "max": 5},
        {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
        {"index": 2, "label": "10-15%", "dots": 2, "max": 16},
        {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
        {"index": 4, "label": ">20%", "dots": 4, "max": 100},
    ],
    "spot_advisor": {
        "us-east-2": {"Linux": {"p5.48xlarge": {"s": 61, "r": 1}, "p3.2xlarge": {"s": 85, "r": 4}},
                      "Windows": {"p3.2xlarge": {"s": 50, "r": 0}}},
        "us-east-1": {"Linux": {"p5.48xlarge": {"s": 52, "r": 4},
                                "p4d.24xlarge": {"s": 67, "r": 2}}},
    },
}


def test_parse_keeps_linux_facts_sorted_and_filters_types() -> None:
    assert parse_feed(EXCERPT) == [
        AdvisorRow("us-east-1", "p4d.24xlarge", 2),
        AdvisorRow("us-east-1", "p5.48xlarge", 4),
        AdvisorRow("us-east-2", "p3.2xlarge", 4),  # Linux, not the Windows band 0
        AdvisorRow("us-east-2", "p5.48xlarge", 1),
    ]
    assert parse_feed(EXCERPT, {"p5.48xlarge"}) == [
        AdvisorRow("us-east-1", "p5.48xlarge", 4), AdvisorRow("us-east-2", "p5.48xlarge", 1)]
    assert table_text(parse_feed(EXCERPT, {"p3.2xlarge"})) == (
        "region,instance_type,band\nus-east-2,p3.2xlarge,4\n")


def test_foreign_shapes_are_refused_naming_the_field() -> None:
    with pytest.raises(AdvisorFeedError, match="no 'spot_advisor'"):
        parse_feed({"prices": []})
    bad = json.loads(json.dumps(EXCERPT))
    bad["spot_advisor"]["us-east-1"]["Linux"]["p5.48xlarge"]["r"] = 9
    with pytest.raises(AdvisorFeedError, match=r"us-east-1\.Linux\.p5\.48xlarge\.r is 9"):
        parse_feed(bad)
    relabeled = json.loads(json.dumps(EXCERPT))
    relabeled["ranges"][4]["label"] = ">25%"
    with pytest.raises(AdvisorFeedError, match="bands changed"):
        parse_feed(relabeled)


@pytest.fixture()
def feed_server() -> Iterator[str]:
    body = json.dumps(EXCERPT).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/spot-advisor-data.json":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_refresh_writes_the_users_table_and_the_rates_follow(feed_server: str) -> None:
    interruption.clear_cache()
    assert interruption.load_table().band("us-east-2", "p5.48xlarge") == 1  # bundled
    note = refresh_table(f"{feed_server}/spot-advisor-data.json")
    assert note == "spot interruption bands: 4 rows from the AWS Spot Advisor feed"
    assert Path(refreshed_table_path()).read_text().startswith("region,instance_type,band\n")
    table = interruption.load_table()
    assert len(table) == 4 and table.band("us-east-1", "p4d.24xlarge") == 2


def test_a_failed_refresh_keeps_the_previous_table(feed_server: str) -> None:
    interruption.clear_cache()
    before = len(interruption.load_table())
    note = refresh_table(f"{feed_server}/missing.json")
    assert "not usable" in note and "keeping the previous table" in note
    assert not Path(refreshed_table_path()).exists()
    assert len(interruption.load_table()) == before


def test_catalog_refresh_fetches_the_feed_unless_prices_come_from_a_mirror(
        feed_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.catalog.fetchers.aws_spot_advisor import refresh_for_catalog

    monkeypatch.delenv("LAUNCHER_SPOT_ADVISOR_URL", raising=False)
    (note,) = refresh_for_catalog("http://127.0.0.1:9/mirror")
    assert "not fetched" in note and not Path(refreshed_table_path()).exists()
    monkeypatch.setenv("LAUNCHER_SPOT_ADVISOR_URL", f"{feed_server}/spot-advisor-data.json")
    assert refresh_for_catalog("http://127.0.0.1:9/mirror") == (
        "spot interruption bands: 4 rows from the AWS Spot Advisor feed",)
    assert Path(refreshed_table_path()).exists()


def test_catalog_status_shows_which_bands_are_in_use_and_their_age(feed_server: str) -> None:
    from launcher.catalog import query

    interruption.clear_cache()
    bundled = query.status().spot_interruption
    assert bundled is not None and bundled.origin == "bundled" and bundled.rows > 1000
    assert bundled.fetched_at == "2025-06-28" and bundled.stale  # a June 2025 copy of the feed
    url = f"{feed_server}/spot-advisor-data.json"
    refresh_table(url)
    fresh = query.status().spot_interruption
    assert fresh is not None and (fresh.origin, fresh.rows, fresh.source) == ("refreshed", 4, url)
    assert fresh.age_days is not None and fresh.age_days < 1 and not fresh.stale
