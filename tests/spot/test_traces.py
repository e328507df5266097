"""Loading spot traces: the public format, and clear errors naming the file and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.spot.traces import SpotTrace, TraceError, load_trace, load_traces, parse_trace


def write(tmp_path: Path, name: str, doc: object) -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_load_with_prices_and_zone_from_file_name(tmp_path: Path) -> None:
    p = write(tmp_path, "us-east-1a_v100_1.json",
              {"metadata": {"gap_seconds": 300}, "data": [0, 1, 1], "prices": [0.9, 0.91, 0.92]})
    t = load_trace(p)
    assert t.zone == "us-east-1a" and t.gap_s == 300 and t.availability == (0, 1, 1)
    assert t.prices == (0.9, 0.91, 0.92)
    assert not t.available(0) and t.available(1)


def test_gang_needs_all_nodes() -> None:
    t = parse_trace(json.dumps({"metadata": {"gap_seconds": 60}, "data": [4, 3, 16]}), "x")
    assert [t.available(i, 4) for i in range(3)] == [True, False, True]
    assert t.available(2, 16) and not t.available(0, 16)


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ("{not json", "not a JSON file"),
        ({"metadata": {"gap_seconds": 60}}, "missing or empty 'data'"),
        ({"data": [1, 0]}, "missing 'metadata.gap_seconds'"),
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, "must be a number > 0"),
        ({"metadata": {"gap_seconds": -5}, "data": [1]}, "must be a number > 0"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 0], "prices": [1.0]}, "'prices' has 1 entries but 'data' has 2"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, "x"]}, "'data[1]' must be a count"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, doc: object, problem: str) -> None:
    p = write(tmp_path, "bad_trace.json", doc)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(p) in str(e.value) and problem in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="trace file not found"):
        load_trace(tmp_path / "nope.json")


def test_different_gaps_are_refused_naming_the_files(tmp_path: Path) -> None:
    a = write(tmp_path, "a_x.json", {"metadata": {"gap_seconds": 60}, "data": [1, 1]})
    b = write(tmp_path, "b_x.json", {"metadata": {"gap_seconds": 30}, "data": [1, 1]})
    with pytest.raises(TraceError, match="different tick lengths") as e:
        load_traces([a, b])
    assert "a_x.json (60 s)" in str(e.value) and "b_x.json (30 s)" in str(e.value)


def test_several_zones_are_cut_to_the_shortest(tmp_path: Path) -> None:
    a = write(tmp_path, "a_x.json", {"metadata": {"gap_seconds": 60}, "data": [1, 1, 0]})
    b = write(tmp_path, "b_x.json", {"metadata": {"gap_seconds": 60}, "data": [0, 1]})
    ta, tb = load_traces([a, b])
    assert ta.n_ticks == tb.n_ticks == 2


def test_coarsen_keeps_a_tick_only_when_all_its_ticks_are_up() -> None:
    t = SpotTrace("z", 30, (1, 1, 1, 0, 4, 2, 1), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0))
    c = t.coarsen(2)
    assert c.gap_s == 60 and c.availability == (1, 0, 2) and c.prices == (1.5, 3.5, 5.5)
