"""Spot interruption rates: the bundled AWS Spot Advisor table, the band -> rate rule and
the per-cloud defaults (launcher.catalog.interruption)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from launcher.catalog import interruption
from launcher.catalog.interruption import (
    BAND_LABELS,
    HOURS_PER_MONTH,
    InterruptionTable,
    band_rate,
    load_table,
    monthly_to_hourly,
    read_aws_table,
    read_defaults,
)


@pytest.fixture(autouse=True)
def _fresh_table() -> None:
    interruption.clear_cache()


def test_band_rule_is_the_midpoint_as_a_monthly_probability() -> None:
    # 5-10%: midpoint 7.5% of instances interrupted within a month of running
    r = band_rate(1)
    assert r.per_hour == pytest.approx(-math.log(1 - 0.075) / HOURS_PER_MONTH)
    assert r.source == "aws spot advisor band 5-10%"
    assert band_rate(4).per_hour == pytest.approx(-math.log(0.7) / 730)  # >20%: 30% assumed
    assert [band_rate(b).per_hour for b in range(5)] == sorted(band_rate(b).per_hour for b in range(5))
    with pytest.raises(ValueError):
        band_rate(5)
    with pytest.raises(ValueError):
        monthly_to_hourly(1.0)


def test_bundled_table_loads_small_and_maps_bands() -> None:
    path = Path(interruption.data_dir()) / interruption.AWS_TABLE
    assert path.stat().st_size < 300_000  # small: only the AWS catalog's instance types
    table = load_table()
    assert len(table) > 1000
    assert load_table() is table  # parsed once per process
    # facts of the June 2025 feed (see ../shared/spot-traces/README.md)
    assert table.band("us-east-1", "p5.48xlarge") == 4
    assert table.band("us-east-2", "p5.48xlarge") == 1
    assert table.rate("aws", "us-east-1", "p5.48xlarge").source == "aws spot advisor band >20%"
    assert table.rate("aws", "us-east-2", "p5.48xlarge") == band_rate(1)


def test_defaults_per_cloud_with_their_source() -> None:
    table = load_table()
    gcp = table.rate("gcp", "us-central1", "a3-highgpu-8g")
    assert gcp.per_hour == pytest.approx(-math.log(0.9) / 24, rel=1e-3)
    assert gcp.source.startswith("default for gcp")
    assert table.rate("runpod", "US", "x").source == "default for runpod (assumption)"
    # an AWS type/region the feed lacks: AWS's global rate, not a band
    missing = table.rate("aws", "mars-north-1", "p5.48xlarge")
    assert missing.source.startswith("default for aws") and missing.per_hour == pytest.approx(
        monthly_to_hourly(0.05))
    assert table.rate("someothercloud", "r", "t").source == "default (assumption)"
    assert table.rate("local", "local", "local").per_hour == 0.0
    clouds = {d.cloud for d in table.defaults()}
    assert {"aws", "gcp", "azure", "runpod", "vast", "nebius", "*"} <= clouds
    assert all(d.basis for d in table.defaults())  # every default says where it comes from


def test_bad_rows_are_refused_with_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("region,instance_type,band\nus-east-1,p5.48xlarge,7\n")
    with pytest.raises(ValueError, match=r"t.csv:2: band 7"):
        read_aws_table(str(bad))
    d = tmp_path / "d.csv"
    d.write_text("cloud,monthly_fraction,rate_per_hour,source,basis\ngcp,,,x,y\n")
    with pytest.raises(ValueError, match="d.csv:2"):
        read_defaults(str(d))
    with pytest.raises(ValueError, match="'\\*' row"):
        InterruptionTable({}, {})


def test_a_refreshed_table_in_launcher_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    (home / "catalog").mkdir(parents=True)
    (home / "catalog" / interruption.AWS_TABLE).write_text(
        "region,instance_type,band\nus-east-1,p5.48xlarge,0\n")
    assert load_table().band("us-east-1", "p5.48xlarge") == 0
    # a broken refreshed table falls back to the bundled one
    (home / "catalog" / interruption.AWS_TABLE).write_text("region,instance_type,band\nx,y,9\n")
    interruption.clear_cache()
    assert load_table().band("us-east-1", "p5.48xlarge") == 4


def test_labels_match_the_fetcher() -> None:
    from launcher.catalog.fetchers import aws_spot_advisor

    assert aws_spot_advisor.BAND_LABELS == BAND_LABELS
