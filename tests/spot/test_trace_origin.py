"""What a trace records (cloud, zone, machine): from its metadata, else from the public
SkyPilot traces' file naming; and which catalog placement it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.spot.trace_origin import TraceOrigin, region_of
from launcher.spot.traces import TraceError, load_trace


def write(path: Path, meta: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600, **meta}, "data": [1, 0, 1]}))
    return path


def test_origin_from_metadata(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path / "anything.json", {
        "cloud": "aws", "region": "us-east-2", "zone": "use2-az2", "instance_type": "p5.48xlarge",
        "accelerator": "H100:8", "nodes": 1, "synthetic": "made up"}))
    assert t.zone == "use2-az2"
    assert t.origin == TraceOrigin("anything.json", "aws", "us-east-2", "use2-az2", "p5.48xlarge",
                                   "H100:8", 1, "made up", False)
    assert t.origin.describe() == "aws us-east-2 use2-az2 p5.48xlarge (H100:8), 1 node, synthetic"


def test_origin_from_the_public_traces_naming(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path / "aws-02-15-2023" / "us-west-2a_v100_8.json", {}))
    assert t.zone == "us-west-2a" and t.origin is not None
    o = t.origin
    assert (o.cloud, o.zone, o.accelerator, o.from_file_name) == ("aws", "us-west-2a", "V100:8", True)
    assert o.describe() == "aws us-west-2a V100:8, from the file name"


def test_metadata_wins_over_the_file_name(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path / "gcp-04-30-2023" / "us-east-1a_v100_1.json",
                         {"cloud": "aws", "zone": "use1-az1"}))
    assert t.origin is not None and (t.origin.cloud, t.origin.zone) == ("aws", "use1-az1")
    assert t.zone == "use1-az1" and t.origin.accelerator == "V100:1"


def test_nothing_known(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path / "z.json", {}))
    assert t.zone == "z" and t.origin is not None
    assert t.origin.describe() == "unknown cloud and machine"
    assert not t.origin.matches("aws", "us-east-1", "use1-az1", "p3.2xlarge", "V100")


@pytest.mark.parametrize(("meta", "field"), [({"cloud": 3}, "metadata.cloud"),
                                              ({"zone": ""}, "metadata.zone"),
                                              ({"nodes": 0}, "metadata.nodes")])
def test_bad_metadata_names_the_field(tmp_path: Path, meta: dict[str, object], field: str) -> None:
    with pytest.raises(TraceError, match=field):
        load_trace(write(tmp_path / "t.json", meta))


P5 = ("aws", "us-east-2", "use2-az1", "p5.48xlarge", "H100")


def test_matches_a_zone_id_exactly() -> None:
    o = TraceOrigin("f", cloud="aws", zone="use2-az1", instance_type="p5.48xlarge")
    assert o.matches(*P5)
    assert not o.matches("aws", "us-east-2", "use2-az2", "p5.48xlarge", "H100")
    assert not o.matches("gcp", "us-east-2", "use2-az1", "p5.48xlarge", "H100")
    assert not o.matches("aws", "us-east-2", "use2-az1", "p4d.24xlarge", "A100")


def test_an_aws_zone_name_stands_for_its_region() -> None:
    """Zone names map to zone IDs differently in every account: the region is what is known."""
    o = TraceOrigin("f", cloud="aws", zone="us-east-2b", accelerator="H100:8")
    assert o.matches(*P5) and o.matches("aws", "us-east-2", "use2-az3", "p5.48xlarge", "H100")
    assert not o.matches("aws", "us-west-2", "usw2-az1", "p5.48xlarge", "H100")
    # the device from the file name: the model must agree (a V100 trace is not an H100 zone)
    v100 = TraceOrigin("f", cloud="aws", zone="us-east-2a", accelerator="V100:1")
    assert not v100.matches(*P5)


def test_region_of_zone_names() -> None:
    assert region_of("aws", "us-west-2a") == "us-west-2"
    assert region_of(None, "us-central1-a") == "us-central1"
    assert region_of("aws", "use2-az1") is None
