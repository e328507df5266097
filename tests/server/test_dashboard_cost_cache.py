"""The cost page's figures are `launcher cost-report`'s, while the page reads the ledger
through the server's in-memory cache (launcher.api.ledger_cache), which follows new
intervals, intervals that close, and a different state DB. Plain HTTP, no browser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from launcher.api import ledger_cache
from launcher.api.cost_report import cost_report, read_ledger
from launcher.api.server_store import ServerStore
from launcher.catalog.money import format_money
from launcher.server.app import create_app
from launcher.server.dashboard import costs
from launcher.state.db import PlacementRecord, StateDB

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    with ServerStore() as s:
        s.create_user("alice", "user")
        return s.create_user("root", "admin")


@pytest.fixture
def client(root: str) -> Iterator[TestClient]:
    with TestClient(create_app(run_controller=False), follow_redirects=False) as c:
        c.post("/dashboard/login", data={"token": root})
        yield c


def _open(name: str, cloud: str, price: float, start: float, user: str | None = "alice",
          owner: str | None = None) -> None:
    with StateDB() as db:
        if db.get_cluster(name) is not None:  # a restart: the same cluster, a new interval
            db.delete_cluster(name)
        rec = db.create_cluster(name, PlacementRecord(cloud, "r1", None, "m5.large", 2,
                                                      False, hourly_cost=price))
        if owner:
            with db.transaction() as conn:
                conn.execute("UPDATE clusters SET owner = ? WHERE name = ?", (owner, name))
            rec = db.require_cluster(name)
        db.open_usage(rec, started_at=start)
    if user:
        with ServerStore() as s:
            s.set_cluster_launcher(name, user)


def _close(name: str, at: float) -> None:
    with StateDB() as db:
        db.close_usage(name, "stop", ended_at=at)


def _cli_report(days: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", "cost-report",
         "--days", days, "--json"],
        capture_output=True, text=True, env=dict(os.environ), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


def _page_figures(client: TestClient, days: str) -> dict[str, str]:
    page = client.get(f"/dashboard/cost?days={days}").text
    facts = dict(re.findall(r"<div><b>([^<]+)</b>\s*(?:<span id=\"total\">)?([^<\s]+)",
                            page.split("<h2>", 1)[0]))
    facts["lines"] = re.search(r"(\d+) lines</span>", page).group(1)  # type: ignore[union-attr]
    return facts


def _expected(doc: dict[str, object]) -> dict[str, str]:
    by_cloud = doc["by_cloud"]
    assert isinstance(by_cloud, dict)
    return {"Total": format_money(float(doc["total_cost"])),  # type: ignore[arg-type]
            "Node-hours": f"{float(doc['total_node_hours']):.2f}",  # type: ignore[arg-type]
            **{c: format_money(v) for c, v in by_cloud.items()},
            "lines": str(len(doc["lines"]))}  # type: ignore[arg-type]


def test_cost_page_totals_are_the_cost_reports(client: TestClient) -> None:
    t0 = time.time() - 20 * 3600
    _open("a", "aws", 3.0, t0)
    _close("a", t0 + 2 * 3600)
    _open("a", "aws", 3.5, t0 + 3 * 3600)  # stop/start: a second interval, same line
    _close("a", t0 + 4 * 3600)
    _open("g", "gcp", 1.25, t0 + 600)
    _close("g", t0 + 5 * 3600)
    _open("mj-7-1", "aws", 8.0, t0 + 3600, user=None, owner="managed-job:7")
    _close("mj-7-1", t0 + 3 * 3600)
    _open("live", "gcp", 2.0, t0 + 3600)  # still open: the page reads (and caches) it open
    first = _page_figures(client, "2")
    assert first["lines"] == "4"

    # it closes, and a new interval comes: the next page view sees both (cache refreshed)
    _close("live", t0 + 10 * 3600)
    _open("new", "azure", 4.0, t0 + 11 * 3600)
    _close("new", t0 + 12 * 3600)
    got = _page_figures(client, "2")
    want = _expected(_cli_report("2"))
    assert got == want
    assert want["Total"] == format_money(3 * 2 + 3.5 + 1.25 * (5 - 1 / 6) + 8 * 2 + 2 * 9 + 4)

    # the lines themselves are the report's, line for line, in its order
    with ServerStore() as s:
        admin = s.user("root")
    now = time.time()
    assert costs.view(admin, 2, now=now).lines == list(cost_report(2, now=now).lines)


def test_ledger_cache_follows_the_ledger(root: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.time() - 3600
    _open("x", "aws", 1.0, t0)
    assert ledger_cache.read() == read_ledger()
    _open("y", "aws", 2.0, t0 + 60)
    _close("x", t0 + 120)
    got = ledger_cache.read()
    assert got == read_ledger()
    assert [(e.cluster, e.ended_at) for e in got.entries] == [("x", t0 + 120), ("y", None)]

    # another state DB (another home): read in full, nothing of the first one kept
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("LAUNCHER_HOME", str(other))
    _open("z", "gcp", 5.0, t0, user=None)
    assert [e.cluster for e in ledger_cache.read().entries] == ["z"]

    # the same path, a new DB: its ids start over; the cache notices and starts over too
    for f in other.glob("state.db*"):
        f.unlink()
    _open("w", "gcp", 6.0, t0, user=None)
    assert [(e.cluster, e.hourly_cost) for e in ledger_cache.read().entries] == [("w", 6.0)]
