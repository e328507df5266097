"""`launcher cost-report`: the cost ledger read at launch-time prices, clipped to the window.

Ledger rows are written through the state DB's own API (open_usage / close_usage, as
launch, stop and down do), at fixed times around a 1-day window ending at NOW."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.api.cost_report import cost_report
from launcher.errors import UsageError
from launcher.jobs.store import JobStore
from launcher.state.db import ClusterRecord, ClusterStatus, StateDB

NOW = 1_790_000_000.0  # in the past, so the CLI (real now) sees every row
H = 3600.0
D = 86400.0
REPO = Path(__file__).resolve().parents[2]


def _rec(name: str, hourly: float, nodes: int = 1, owner: str | None = None,
         it: str = "p5.48xlarge", spot: bool = False) -> ClusterRecord:  # fmt: skip
    return ClusterRecord(
        name=name, cloud="aws", region="us-east-1", zone="use1-az1", instance_type=it,
        num_nodes=nodes, use_spot=spot, accelerator="H100", accelerator_count=8.0,
        status=ClusterStatus.UP, hourly_cost=hourly, autostop_minutes=None,
        autostop_down=False, launched_at=NOW - 10 * D, status_changed_at=NOW - 10 * D,
        task_name=None, resources="", ssh_key_path=None, owner=owner,
    )  # fmt: skip


def _interval(db: StateDB, rec: ClusterRecord, start: float, end: float | None) -> None:
    db.open_usage(rec, started_at=start)
    if end is not None:
        db.close_usage(rec.name, "down", ended_at=end)


@pytest.fixture
def ledger(launcher_home: Path) -> Path:
    db = StateDB()
    try:
        # wholly before the window: not counted
        _interval(db, _rec("old", 100.0), NOW - 3 * D, NOW - 2 * D)
        # ends exactly where the window starts: nothing inside
        _interval(db, _rec("edge-touch", 100.0), NOW - D - H, NOW - D)
        # crosses the window's start: counted from it (1 h of 3 h), 2 nodes at $10/h
        _interval(db, _rec("edge-start", 10.0, nodes=2), NOW - D - 2 * H, NOW - D + H)
        # inside: 6 h at $3/h
        _interval(db, _rec("inside", 3.0, it="g5.xlarge"), NOW - 10 * H, NOW - 4 * H)
        # still running: counted until now, 2 h, 4 nodes at $8/h, spot
        _interval(db, _rec("running", 8.0, nodes=4, spot=True), NOW - 2 * H, None)
        # running since before the window: the whole day at $1/h
        _interval(db, _rec("spanning", 1.0), NOW - 2 * D, None)
        # stopped and started again: two intervals of 1 h at $2/h
        _interval(db, _rec("stop-start", 2.0), NOW - 5 * H, NOW - 4 * H)
        _interval(db, _rec("stop-start", 2.0), NOW - 2 * H, NOW - H)
        # a managed job's second attempt: 2 h, 2 nodes at $5/h
        _interval(db, _rec("mj-1-2", 5.0, nodes=2, owner="managed-job:1"), NOW - 3 * H, NOW - H)
    finally:
        db.close()
    store = JobStore()
    try:
        job = store.add_job(name="train", task_yaml="run: x", task_source=None,
                            strategy="failover", max_restarts_on_errors=0,
                            recover_on_exit_codes=())  # fmt: skip
        store.add_attempt(job.id, 1, "mj-1-1", "initial")
        store.add_attempt(job.id, 2, "mj-1-2", "preemption")
        assert job.id == 1  # the first job of this fresh DB, as the ledger's owner says
    finally:
        store.close()
    return launcher_home


def test_report_clips_to_the_window_and_uses_launch_prices(ledger: Path) -> None:
    r = cost_report(days=1, now=NOW)
    got = {ln.cluster: (ln.hours, ln.node_hours, ln.cost, ln.intervals, ln.running)
           for ln in r.lines}  # fmt: skip
    assert got == {
        "edge-start": (1.0, 2.0, 10.0, 1, False),
        "inside": (6.0, 6.0, 18.0, 1, False),
        "running": (2.0, 8.0, 16.0, 1, True),
        "spanning": (24.0, 24.0, 24.0, 1, True),
        "stop-start": (2.0, 2.0, 4.0, 2, False),
        "mj-1-2": (2.0, 4.0, 10.0, 1, False),
    }
    assert [ln.cluster for ln in r.lines][:2] == ["spanning", "inside"]  # most expensive first
    assert r.total_cost == 82.0 and r.total_node_hours == 46.0
    assert r.managed_jobs_cost == 10.0 and r.clusters_cost == 72.0
    assert r.by_cloud == {"aws": 82.0} and r.by_job == {1: 10.0}
    mj = next(ln for ln in r.lines if ln.cluster == "mj-1-2")
    assert (mj.owner, mj.job_id, mj.attempt) == ("managed-job:1", 1, 2)
    assert r.since == NOW - D and r.until == NOW


def test_a_wider_window_takes_in_older_rows(ledger: Path) -> None:
    r = cost_report(days=3, now=NOW)
    got = {ln.cluster: ln.cost for ln in r.lines}
    assert got["old"] == 2400.0  # 24 h at its own $100/h
    assert got["edge-touch"] == 100.0
    assert got["edge-start"] == 30.0
    assert got["spanning"] == 48.0


def test_prices_are_never_taken_from_the_catalog(ledger: Path) -> None:
    """The ledger says $10/h for 2 p5.48xlarge; the catalog says ~$98/h each."""
    from launcher.catalog import query

    catalog = {o.price for o in query.offers(["H100"], clouds=["aws"])
               if o.instance_type == "p5.48xlarge"}  # fmt: skip
    assert catalog and 10.0 not in catalog
    edge = next(ln for ln in cost_report(days=1, now=NOW).lines if ln.cluster == "edge-start")
    assert edge.hourly_cost == 10.0 and edge.cost == 10.0


def test_bad_days_is_a_usage_error(launcher_home: Path) -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(UsageError, match="--days"):
            cost_report(days=bad)


def test_cli_json_and_table(ledger: Path) -> None:
    env = {**os.environ, "LAUNCHER_HOME": str(ledger), "COLUMNS": "200", "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from launcher.cli import main; main()", "cost-report", *args],
            capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
        )  # fmt: skip

    proc = run("--days", "36500", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by = {ln["cluster"]: ln for ln in doc["lines"]}
    assert by["old"]["cost"] == 2400.0 and by["mj-1-2"]["attempt"] == 2
    table = run("--days", "36500")
    assert table.returncode == 0 and "job 1 #2" in table.stdout and "total $" in table.stdout
    bad = run("--days", "soon")
    assert bad.returncode == 2 and "--days" in bad.stderr and "Traceback" not in bad.stderr
