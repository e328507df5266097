"""`launcher gpus`, `launcher cost`, `launcher catalog status` and `launch --dryrun`,
run as real subprocesses over the bundled catalog: output shapes, JSON contracts,
and bad input (non-zero exit, one message, never a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from launcher.catalog.offer import Offer

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "task_examples"
OFFER_FIELDS = {f.name for f in fields(Offer)}


def run(*args: str, home: Path, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAUNCHER_HOME": str(home), "COLUMNS": str(columns), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def run_json(*args: str, home: Path) -> Any:
    proc = run(*args, home=home)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


# ---------------------------------------------------------------- gpus


def test_gpus_json_lists_offer_rows_sorted_by_price(home: Path) -> None:
    rows = run_json("gpus", "H100:8", "--json", home=home)
    assert rows, "the bundled catalog has H100:8 offers"
    for r in rows:
        assert set(r) >= OFFER_FIELDS
        assert (r["accelerator"], r["accelerator_count"]) == ("H100", 8)
        assert type(r["accelerator_count"]) is int, "whole counts print as 8, not 8.0"
        assert r["cloud"] != "local"
    per_gpu = [r["price_per_gpu_hour"] for r in rows if r["price_per_gpu_hour"] is not None]
    assert per_gpu == sorted(per_gpu)
    assert per_gpu[0] == pytest.approx(rows[0]["price"] / 8)
    keys = [(r["cloud"], r["instance_type"]) for r in rows]
    assert len(keys) == len(set(keys)), "one row per (cloud, instance type)"


def test_gpus_all_regions_and_filters(home: Path) -> None:
    cheapest = run_json("gpus", "H100:8", "--cloud", "aws", "--json", home=home)
    every = run_json("gpus", "h100:8", "--cloud", "aws", "--all-regions", "--json", home=home)
    assert {r["cloud"] for r in every} == {"aws"}
    assert len(every) > len(cheapest) >= 1
    spot = run_json("gpus", "H100", "--spot", "--json", home=home)
    assert spot and all(r["spot_price"] is not None for r in spot)
    rdma = run_json("gpus", "H100:8", "--fabric", "rdma", "--json", home=home)
    assert rdma and {r["fabric"] for r in rdma} <= {"infiniband", "efa", "roce"}
    fast = run_json("gpus", "H100:8", "--min-gbps", "3200", "--json", home=home)
    assert fast and all(r["fabric_gbps"] >= 3200 for r in fast)


def test_gpus_without_argument_json_is_offer_rows_of_every_model(home: Path) -> None:
    rows = run_json("gpus", "--json", home=home)
    assert set(rows[0]) >= OFFER_FIELDS
    assert len({r["accelerator"] for r in rows}) > 10
    summary = run_json("gpus", "--summary", "--json", home=home)
    models = {r["accelerator"]: r for r in summary}
    assert "H100" in models and "aws" in models["H100"]["clouds"]
    assert models["H100"]["min_price_per_gpu_hour"] > 0


def test_gpus_footer_never_presents_a_copy_date_as_a_price_date(home: Path) -> None:
    status = run_json("catalog", "status", "--json", home=home)
    copied = [c["cloud"] for c in status["clouds"] if c["fetched_at_exact"] is False]
    exact = [c["cloud"] for c in status["clouds"] if c["fetched_at_exact"] and c["cloud"] != "local"]
    assert "aws" in copied and "gcp" in exact, "the bundled snapshot's provenance"
    aws = run("gpus", "H100:8", "--cloud", "aws", home=home).stdout
    assert "prices copied on" in aws and "upstream date unknown" in aws
    assert "prices as of" not in aws and " h old" not in aws
    gcp = run("gpus", "H100:8", "--cloud", "gcp", home=home).stdout
    assert "prices as of 2026-05-20" in gcp and "copied" not in gcp
    both = run("gpus", home=home).stdout
    assert "prices as of" in both and "some prices copied on" in both


def test_gpus_cloud_and_region_match_case_insensitively(home: Path) -> None:
    rows = run_json("gpus", "H100:8", "--cloud", "AWS", "--region", "US-EAST-1", "--json", home=home)
    assert rows and {(r["cloud"], r["region"]) for r in rows} == {("aws", "us-east-1")}


def test_gpus_tables_show_catalog_age(home: Path) -> None:
    proc = run("gpus", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "H100" in proc.stdout and "BEST FABRIC" in proc.stdout
    assert "catalog: prices as of" in proc.stdout
    proc = run("gpus", "H100:8", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "p5.48xlarge" in proc.stdout and "$/GPU-H" in proc.stdout
    assert "catalog: prices as of" in proc.stdout and "old" in proc.stdout


def test_gpus_hides_offers_without_a_price_unless_asked(home: Path) -> None:
    """The catalog lists mithril's H100:8 with no price: a row of dashes helps nobody."""
    out = run("gpus", "H100:8", home=home).stdout
    assert "mithril" not in table_of(out)
    assert "1 offer without a price in the catalog not shown (mithril); --unpriced lists it." in out
    assert "mithril" not in {r["cloud"] for r in run_json("gpus", "H100:8", "--json", home=home)}
    rows = run_json("gpus", "H100:8", "--unpriced", "--json", home=home)
    unpriced = [r for r in rows if r["cloud"] == "mithril"]
    assert unpriced and unpriced[0]["price"] is None and rows[-1]["cloud"] == "mithril"
    out = run("gpus", "H100:8", "--unpriced", home=home).stdout
    assert "mithril" in table_of(out) and "--unpriced lists" not in out


def table_of(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if not line.startswith(
        ("catalog:", "(not shown", "  ")) and "without a price" not in line)


def test_gpus_price_columns_say_their_market(home: Path) -> None:
    header = run("gpus", "H100:8", home=home).stdout.splitlines()[0]
    assert "OD $/H" in header and "SPOT $/H" in header and "OD $/GPU-H" in header
    out = run("gpus", "H100:8", "--spot", home=home).stdout
    header = out.splitlines()[0]
    assert "SPOT $/GPU-H" in header and "OD $/GPU-H" not in header
    row = run_json("gpus", "H100:8", "--spot", "--json", home=home)[0]
    first = out.splitlines()[1]
    cells = first.split()
    assert f"${row['spot_price'] / 8:.2f}" in cells  # per GPU: the spot price
    summary = run("gpus", home=home).stdout.splitlines()[0]
    assert "OD $/GPU-H" in summary and "SPOT $/GPU-H" in summary


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("args", [("gpus",), ("gpus", "H100:8"), ("gpus", "H100", "--spot"),
                                  ("gpus", "A100", "--all-regions")])
def test_gpus_tables_fit_the_terminal(home: Path, columns: int, args: tuple[str, ...]) -> None:
    proc = run(*args, home=home, columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    header = lines[0].split()
    keys = (["GPU", "SPOT $/GPU-H"] if args == ("gpus",)
            else ["CLOUD", "INSTANCE", "SPOT $/H" if "--spot" in args else "OD $/H"])
    for key in keys:
        assert key.split()[0] in header and key in lines[0]
    assert "$/GPU-H" in lines[0]
    if columns == 200 and args != ("gpus", "A100", "--all-regions"):
        assert "(not shown" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("gpus", "H10:8"), "did you mean H100?"),
        (("gpus", "nvidia-h100"), "did you mean H100"),
        (("gpus", "H100-80GB:8"), "did you mean H100"),
        (("gpus", "A100-40G"), "did you mean A100"),
        (("gpus", "H100:x"), "count"),
        (("gpus", "H100:0"), "positive"),
        (("gpus", "H100", "--fabric", "nvlink"), "Unknown fabric"),
        (("gpus", "H100", "--cloud", "awz"), "Unknown cloud"),
        (("gpus", "H100", "--cloud", "gpc"), "did you mean gcp?"),
        (("gpus", "H100", "--region", "us-east-99"), "Unknown region 'us-east-99'"),
        (("gpus", "H100", "--cloud", "aws", "--region", "us-east1"),
         "Unknown region 'us-east1' for aws; did you mean us-east-1?"),
        (("gpus", "H100", "--min-gbps", "-5"), "min-gbps"),
        (("gpus", "H100", "--min-gbps", "abc"), "min-gbps"),
        (("gpus", "H100", "--summary"), "--summary"),
    ],
)  # fmt: skip
def test_gpus_bad_input(home: Path, args: tuple[str, ...], needle: str) -> None:
    proc = run(*args, home=home)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert proc.stdout == ""


# ---------------------------------------------------------------- cost / launch --dryrun


PLACEMENT_KEYS = {
    "cloud",
    "region",
    "zone",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "num_nodes",
    "use_spot",
    "node_price",
    "hourly_cost",
    "fabric",
    "fabric_gbps",
    "enabled",
    "launchable",
    "reason",
}


def check_plan_json(data: dict[str, Any]) -> None:
    assert {"placements", "chosen", "rejected"} <= set(data)
    assert data["placements"]
    for p in data["placements"]:
        assert set(p) >= PLACEMENT_KEYS
        assert isinstance(p["launchable"], bool) and p["enabled"] is p["launchable"]
        assert (p["reason"] is None) is p["launchable"]
    flags = [p["launchable"] for p in data["placements"]]
    assert flags == sorted(flags, reverse=True), "launchable rows come first"
    for part in (True, False):  # each part cheapest first
        costs = [p["hourly_cost"] for p in data["placements"] if p["launchable"] is part]
        assert costs == sorted(costs)
    assert data["chosen"] == (0 if flags[0] else None)
    for r in data["rejected"]:
        assert {"cloud", "instance_type", "region", "reason"} <= set(r)


def test_dryrun_json_contract_two_nodes_rdma(home: Path) -> None:
    data = run_json(
        "launch", str(EXAMPLES / "train-2node-rdma.yaml"), "--dryrun", "--json", home=home
    )
    check_plan_json(data)
    for p in data["placements"]:
        assert (p["accelerator"], p["accelerator_count"], p["num_nodes"]) == ("H100", 8, 2)
        assert type(p["accelerator_count"]) is int
        assert p["fabric"] in {"infiniband", "efa", "roce"}
        assert p["hourly_cost"] == pytest.approx(2 * p["node_price"])
    reasons = {r["reason"] for r in data["rejected"]}
    assert any(r.startswith("max 1 node < 2") for r in reasons)
    assert "fabric unknown (no source)" in reasons


def test_dryrun_table(home: Path) -> None:
    proc = run("launch", str(EXAMPLES / "train-2node-rdma.yaml"), "--dryrun", home=home)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "LAUNCHABLE" in out and "chosen:" in out
    assert "rejected:" in out and "max 1 node < 2" in out  # RunPod pods, Vast offers


def test_cost_json_totals(home: Path) -> None:
    data = run_json(
        "cost", str(EXAMPLES / "any-of-gpus.yaml"), "--hours", "10", "--json", home=home
    )
    check_plan_json(data)
    assert data["hours"] == 10
    assert {p["accelerator"] for p in data["placements"]} <= {"A100-80GB", "H100", "H200"}
    for p in data["placements"]:
        assert p["total_cost"] == pytest.approx(p["hourly_cost"] * 10)


def test_cost_table(home: Path) -> None:
    proc = run("cost", str(EXAMPLES / "any-of-gpus.yaml"), "--hours", "3", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "TOTAL" in proc.stdout and "rejected:" in proc.stdout


def test_cost_local_task_chooses_local(home: Path) -> None:
    data = run_json("cost", str(EXAMPLES / "hello.yaml"), "--json", home=home)
    check_plan_json(data)
    assert data["chosen"] == 0 and data["placements"][0]["cloud"] == "local"


def test_unsatisfiable_task_explains_per_constraint(home: Path, tmp_path: Path) -> None:
    task = tmp_path / "t.yaml"
    task.write_text(
        "num_nodes: 3\nresources:\n  accelerators: H100:8\n  cloud: vast\n"
        "  network: {fabric: infiniband}\n"
    )
    proc = run("cost", str(task), home=home)
    assert proc.returncode == 3
    assert (
        "No offer with 3 nodes of H100:8 on vast with infiniband: vast offers max 1 node"
        in proc.stderr
    )
    assert "max 1 node" in proc.stderr


@pytest.mark.parametrize("cmd", [("cost",), ("cost", "--hours", "2"), ("launch", "--dryrun")])
def test_unsatisfiable_task_json_still_prints_the_plan_shape(
    home: Path, tmp_path: Path, cmd: tuple[str, ...]
) -> None:
    task = tmp_path / "t.yaml"
    task.write_text(
        "num_nodes: 3\nresources:\n  accelerators: H100:8\n  cloud: vast\n"
        "  network: {fabric: infiniband}\n"
    )
    proc = run(cmd[0], str(task), *cmd[1:], "--json", home=home)
    assert proc.returncode == 3
    data = json.loads(proc.stdout)
    assert data["placements"] == [] and data["chosen"] is None
    vast = [r for r in data["rejected"] if r["cloud"] == "vast"]
    assert vast and all(r["reason"] for r in vast)
    assert data["error"].startswith("No offer with 3 nodes of H100:8 on vast")
    assert data["hours"] == (2.0 if "--hours" in cmd else None)
    assert data["error"] in proc.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("resources: [oops\n", "line"),
        ("resources:\n  accelerators: H10:8\n", "H100"),
        ("num_nodes: 0\n", "num_nodes"),
        ("resources:\n  network: {fabric: nvlink}\n", "fabric"),
    ],
)
def test_cost_bad_task(home: Path, tmp_path: Path, text: str, needle: str) -> None:
    task = tmp_path / "bad.yaml"
    task.write_text(text)
    proc = run("cost", str(task), home=home)
    assert proc.returncode != 0
    assert needle in proc.stderr


def test_cost_bad_arguments(home: Path, tmp_path: Path) -> None:
    proc = run("cost", str(tmp_path / "missing.yaml"), home=home)
    assert proc.returncode != 0 and "missing.yaml" in proc.stderr
    proc = run("cost", str(EXAMPLES / "train-2node-rdma.yaml"), "--hours", "-1", home=home)
    assert proc.returncode == 2 and "hours" in proc.stderr
    proc = run("cost", str(EXAMPLES / "train-2node-rdma.yaml"), "--hours", "abc", home=home)
    assert proc.returncode == 2


# ---------------------------------------------------------------- catalog status


def test_catalog_status(home: Path) -> None:
    data = run_json("catalog", "status", "--json", home=home)
    assert isinstance(data, dict)
    proc = run("catalog", "status", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "aws" in proc.stdout and "ROWS" in proc.stdout
