"""A user's cost includes clusters already taken down (issue 20): the server keeps who
launched each cluster after `down`, so the cost page (the user's own total, the admins'
per-user totals) and the users page's cost column count them, and a cluster name reused
by another user later splits between the two. Plain HTTP, no browser."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from launcher.api.server_store import ServerStore
from launcher.server.app import create_app
from launcher.server.dashboard import costs
from launcher.state.db import PlacementRecord, StateDB


@pytest.fixture
def tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    with ServerStore() as s:
        return {"alice": s.create_user("alice", "user"), "bob": s.create_user("bob", "user"),
                "root": s.create_user("root", "admin")}


@pytest.fixture
def client(tokens: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(run_controller=False), follow_redirects=False) as c:
        yield c


def _launch(name: str, user: str, price: float, start: float, hours: float,
            down: bool) -> None:
    """A cluster launched through the server by `user`, billed for `hours` from `start`."""
    with StateDB() as db:
        rec = db.create_cluster(name, PlacementRecord("aws", "us-east-1", None, "m5.large", 1,
                                                      False, hourly_cost=price))
        with db.transaction() as conn:  # launched a minute before its nodes were billed
            conn.execute("UPDATE clusters SET launched_at = ? WHERE name = ?", (start - 60, name))
        db.open_usage(rec, started_at=start)
        db.close_usage(name, "stop", ended_at=start + hours * 3600)
    with ServerStore() as s:
        s.set_cluster_launcher(name, user)
    if down:
        with StateDB() as db:
            db.delete_cluster(name)


def test_taken_down_clusters_count_for_who_launched_them(
        tokens: dict[str, str], client: TestClient) -> None:
    t0 = time.time() - 6 * 3600
    _launch("shared", "alice", 10.0, t0 + 1, 2, down=True)  # alice's: $20, then down
    _launch("shared", "bob", 4.0, t0 + 3 * 3600, 1, down=False)  # the name again, bob: $4
    _launch("gone", "alice", 1.0, t0 + 2, 3, down=True)  # another of alice's: $3
    now = t0 + 6 * 3600
    with ServerStore() as s:
        alice, bob, root = s.user("alice"), s.user("bob"), s.user("root")
    mine = costs.view(alice, 1, now=now)
    assert sorted((x.cluster, x.cost) for x in mine.lines) == [
        ("gone", pytest.approx(3)), ("shared", pytest.approx(20))]
    assert mine.total == pytest.approx(23)
    assert [(x.cluster, x.cost) for x in costs.view(bob, 1, now=now).lines] == [
        ("shared", pytest.approx(4))]
    every = costs.view(root, 1, now=now)
    assert every.by_user == [("alice", pytest.approx(23)), ("bob", pytest.approx(4))]
    assert costs.by_user(1, now=now) == {"alice": pytest.approx(23), "bob": pytest.approx(4)}

    # the users page (admins) shows each user's cost over the last 30 days
    client.post("/dashboard/login", data={"token": tokens["root"]})
    page = client.get("/dashboard/users").text
    cells = dict(re.findall(r'<tr\s+data-user="([^"]+)">.*?<td class="num cost">([^<]+)</td>',
                            page, re.S))
    assert cells == {"alice": "$23.00", "bob": "$4.00", "root": "$0.0000"}
    # and alice's own cost page counts her clusters that are gone
    client.post("/dashboard/login", data={"token": tokens["alice"]})
    assert '<span id="total">$23.00</span>' in client.get("/dashboard/cost?days=1").text


def test_clusters_launched_before_the_upgrade_keep_their_launcher(
        tokens: dict[str, str]) -> None:
    """Revision 0004 copies who launched each cluster still there into the kept table."""
    with StateDB() as db:
        db.create_cluster("old", PlacementRecord("aws", "us-east-1", None, "m5.large", 1,
                                                 False, hourly_cost=1.0))
        with db.transaction() as conn:  # as a server at revision 0003 recorded it
            conn.execute("UPDATE clusters SET launched_by = 'bob' WHERE name = 'old'")
            conn.execute("DROP TABLE api_cluster_launches")
            conn.execute("DROP TABLE node_state")
            conn.execute("UPDATE alembic_version SET version_num = '0003'")
    with ServerStore() as s:
        assert [u for _, u in s.cluster_launches()["old"]] == ["bob"]


def test_window_costs_match_the_reports_lines(tokens: dict[str, str]) -> None:
    """The chart's and the users page's sums (window_costs) are the report's figures."""
    from launcher.api.cost_report import cost_report, read_ledger, window_costs

    t0 = time.time() - 3 * 86400
    for i, (price, start, hours) in enumerate([(3.0, 0, 30), (5.0, 20, 2), (7.0, 50, 40)]):
        _launch(f"w{i}", "alice" if i else "bob", price, t0 + start * 3600, hours, down=i == 2)
    now = t0 + 3 * 86400
    windows = [(now - 86400 * (k + 1), now - 86400 * k) for k in range(3)]
    got = window_costs(read_ledger().entries, windows, lambda e: e.cluster)
    for (since, until), sums in zip(windows, got, strict=True):
        report = cost_report((until - since) / 86400, now=until)
        assert sums == pytest.approx({x.cluster: x.cost for x in report.lines if x.cost > 0})


def test_cost_lines_are_paginated(tokens: dict[str, str], client: TestClient,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.server.dashboard import pages

    t0 = time.time() - 3600
    for i in range(3):
        _launch(f"p{i}", "root", float(i + 1), t0 + i, 0.5, down=False)
    monkeypatch.setattr(pages, "COST_LINES_PER_PAGE", 2)
    client.post("/dashboard/login", data={"token": tokens["root"]})
    first = client.get("/dashboard/cost?days=1").text
    assert "<td>p2</td>" in first and "<td>p1</td>" in first and "<td>p0</td>" not in first
    assert 'href="/dashboard/cost?days=1&amp;page=2"' in first and "3 lines" in first
    second = client.get("/dashboard/cost?days=1&page=2").text
    assert "<td>p0</td>" in second and "<td>p2</td>" not in second and "page=3" not in second
