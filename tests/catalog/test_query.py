"""The query API contract: filters, names, status, and what importing it costs."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.catalog import query
from launcher.catalog.build import PLACEHOLDER_PRICES
from launcher.catalog.snapshot import bundled_dir, read_meta


def test_accelerator_filter_is_exact_but_case_insensitive() -> None:
    rows = query.offers(["h100"])
    assert rows and {o.accelerator for o in rows} == {"H100"}  # not H100-MEGA, not H100-SXM
    clouds = {o.cloud for o in rows}
    assert {"aws", "gcp", "azure", "lambda"} <= clouds
    both = query.offers(["H100", "A100-80GB", "H100"])
    assert {o.accelerator for o in both} == {"H100", "A100-80GB"}
    assert len(both) == len(rows) + len(query.offers(["A100-80GB"]))


def test_cloud_filter_and_local() -> None:
    gcp = query.offers(["H100"], clouds=["GCP"])
    assert gcp and {o.cloud for o in gcp} == {"gcp"}
    aws_gcp = query.offers(["H100"], clouds=["aws", "gcp"])
    assert {o.cloud for o in aws_gcp} == {"aws", "gcp"}
    assert query.offers(["H100"], clouds=["nosuchcloud"]) == []
    assert query.offers([]) == [] and query.offers(clouds=[]) == []
    # CPU rows (accelerator None) only come without an accelerator filter
    cpu = query.offers(clouds=["aws", "local"])
    assert any(o.accelerator is None for o in cpu)
    assert cpu[-1].cloud == "local" and cpu[-1].accelerator is None  # local offers come last


def test_results_are_stable_and_sorted() -> None:
    a = query.offers(["A100"])
    query.clear_process_cache()
    b = query.offers(["A100"])
    assert a == b
    keys = [(o.cloud, o.instance_type) for o in a if o.cloud != "local"]
    assert keys == sorted(keys)


def test_accelerator_names() -> None:
    names = query.accelerator_names()
    assert names == sorted(names)
    for n in (
        "H100",
        "H100-MEGA",
        "A100",
        "A100-80GB",
        "H200",
        "B200",
        "L4",
        "T4",
        "V100",
        "RTX6000-Ada",
    ):
        assert n in names
    assert "K80" in names  # known from SkyPilot's accelerator table, no offer here
    assert "RTX-6000-Ada" not in names  # verda's spelling is mapped to the canonical one
    conn, _ = query._connection()
    offered = {a for (a,) in conn.execute("SELECT DISTINCT accelerator FROM offers") if a}
    assert offered <= set(names)


def test_status_shows_age_and_staleness() -> None:
    now = datetime.datetime(2026, 6, 19, 4, 50, 10, tzinfo=datetime.UTC)
    st = query.status(now=now)
    meta = read_meta(bundled_dir())
    assert st.snapshot_hash == meta.snapshot_hash and st.bundled
    by = {c.cloud: c for c in st.clouds}
    assert set(by) == {c.cloud for c in meta.clouds} | {"local"}
    assert by["gcp"].fetched_at == "2026-05-20T04:50:10Z" and by["gcp"].fetched_at_exact
    assert by["gcp"].age_days == 30.0 and not by["gcp"].stale
    assert by["aws"].rows == 6112 and not by["aws"].fetched_at_exact  # upstream date unknown
    later = query.status(now=now + datetime.timedelta(days=1))
    assert {c.cloud: c.stale for c in later.clouds}["gcp"] is True and later.any_stale
    assert by["local"].rows == 1 and by["local"].completeness == "live"
    json.dumps(st.to_dict())  # plain data, ready for --json


_PROBE = """
import json, sys, time
t = time.perf_counter()
from launcher.catalog import query
rows = query.offers(["H100"])
names = query.accelerator_names()
query.status()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in
               ("pydantic", "boto3", "botocore", "google", "azure", "paramiko", "rich", "yaml", "typer", "requests"))
print(json.dumps({"rows": len(rows), "heavy": heavy}))
"""


def test_query_imports_nothing_heavy(_isolated_catalog: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={
            "PATH": "/usr/bin:/bin",
            "LAUNCHER_HOME": str(_isolated_catalog),
            "LAUNCHER_LOCAL_GPUS": "none",
        },
    )
    result = json.loads(out.stdout)
    assert result["rows"] > 100
    assert result["heavy"] == []


@pytest.mark.parametrize("accs", [["H100"], ["T4", "L4"]])
def test_every_offer_is_well_formed(accs: list[str]) -> None:
    placeholder = {c.cloud for c in query.status().clouds if c.completeness == PLACEHOLDER_PRICES}
    for o in query.offers(accs):
        assert o.accelerator in accs and o.accelerator_count > 0
        if o.cloud in placeholder:
            # a source with made-up prices keeps its hardware facts but no price
            assert o.price is None and o.spot_price is None
        else:
            assert o.price is not None or o.spot_price is not None
        assert o.nvlink is None or type(o.nvlink) is bool  # not SQLite's 0/1
