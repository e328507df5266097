"""The dashboard without a browser (these run where chromium is not installed): the
session and CSRF rules over HTTP, escaping, and the timeline's geometry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from launcher.api.server_store import ServerStore
from launcher.server.app import create_app
from launcher.server.dashboard import timeline
from launcher.server.dashboard.session import COOKIE, csrf_token


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, str]]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    with ServerStore() as store:
        token = store.create_user("alice", "user")
    with TestClient(create_app(run_controller=False), follow_redirects=False) as c:
        yield c, token


def test_no_session_gets_the_login_page_and_a_wrong_token_no_cookie(
        client: tuple[TestClient, str]) -> None:
    c, token = client
    for path in ("/", "/dashboard/", "/dashboard/jobs", "/dashboard/jobs/1", "/dashboard/cost",
                 "/dashboard/clusters?fragment=1", "/dashboard/jobs/1/log-stream"):
        r = c.get(path, follow_redirects=True)
        assert r.url.path == "/dashboard/login" and 'id="token"' in r.text, path
    bad = c.post("/dashboard/login", data={"token": token + "x"})
    assert bad.status_code == 401 and "not accepted" in bad.text and COOKIE not in bad.cookies
    c.cookies.set(COOKIE, "lk_forged")
    assert c.get("/dashboard/jobs").headers["location"] == "/dashboard/login"


def test_login_cookie_and_csrf(client: tuple[TestClient, str]) -> None:
    c, token = client
    r = c.post("/dashboard/login", data={"token": token})
    assert r.status_code == 303
    flags = r.headers["set-cookie"].lower()
    assert "httponly" in flags and "samesite=strict" in flags
    page = c.get("/dashboard/jobs")
    assert page.status_code == 200 and "No managed jobs." in page.text
    assert token not in page.text  # the session token is never in a page ...
    assert csrf_token(token) in page.text  # ... only the form token derived from it
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    # POSTs: no/forged form token, or another site's Origin -> 403 and nothing done
    assert c.post("/dashboard/logout").status_code == 403
    assert c.post("/dashboard/logout", data={"csrf": csrf_token("lk_other")}).status_code == 403
    assert c.post("/dashboard/logout", data={"csrf": csrf_token(token)},
                  headers={"Origin": "http://evil.example"}).status_code == 403
    assert c.get("/dashboard/jobs").status_code == 200
    out = c.post("/dashboard/logout", data={"csrf": csrf_token(token)},
                 headers={"Origin": "http://testserver"})
    assert out.status_code == 303 and out.headers["location"] == "/dashboard/login"


def test_not_found_pages_escape_what_they_echo(client: tuple[TestClient, str]) -> None:
    c, token = client
    c.post("/dashboard/login", data={"token": token})
    r = c.get("/dashboard/clusters/<img src=x onerror=alert(1)>")
    assert r.status_code == 404 and "does not exist" in r.text
    assert "<img" not in r.text and "&lt;img src=x onerror=alert(1)&gt;" in r.text
    assert c.get("/dashboard/jobs/7").status_code == 404
    down = c.post("/dashboard/clusters/nosuch/down", data={"csrf": csrf_token(token)})
    assert down.status_code == 404 and "does not exist" in down.text


def _attempt(n: int, start: float, running: float | None, end: float | None,
             outcome: str | None, cause: str = "initial") -> dict[str, Any]:
    return {"attempt": n, "cluster": f"c-{n}", "cause": cause, "where": "aws/us-east-1",
            "instance_type": "p5.48xlarge", "num_nodes": 2, "use_spot": True,
            "node_price": 12.5, "started_at": start, "running_at": running, "ended_at": end,
            "outcome": outcome, "reason": "spot reclaimed" if outcome else None,
            "exit_code": None, "recovery_s": None, "work_lost_s": None, "node_hours": 1.0,
            "cost": 25.0}


def test_timeline_marks_the_preemption_and_splits_the_recovery() -> None:
    t = timeline.build([_attempt(1, 100, 130, 1000, "PREEMPTED"),
                        _attempt(2, 1060, 1300, None, None, "preemption")], 100, 2000)
    one, two = t.bars
    assert (one.outcome, two.outcome) == ("PREEMPTED", "RUNNING")
    assert one.label.startswith("#1 aws/us-east-1 2x p5.48xlarge spot $12.50/h")
    assert one.x0 == timeline.LEFT and two.x1 == pytest.approx(timeline.WIDTH - timeline.RIGHT)
    assert one.x0 < (one.x_run or 0) < one.x1 < two.x0 < (two.x_run or 0) < two.x1
    (mark,) = t.preemptions
    assert mark.x == one.x1 and "spot reclaimed" in mark.title
    (gap,) = t.gaps
    assert (gap.x0, gap.x_ask, gap.x1) == (one.x1, two.x0, two.x_run)
    assert gap.label == "recovery 5m" and "deciding 60s, provisioning + setup 4m" in gap.title
    assert [label for _, label in t.ticks][-1] == "+32m"


def test_actions_on_someone_elses_or_no_cluster_are_refused(
        client: tuple[TestClient, str]) -> None:
    c, token = client
    c.post("/dashboard/login", data={"token": token})
    for verb in ("stop", "down"):
        r = c.post(f"/dashboard/clusters/nosuch/{verb}", data={"csrf": csrf_token(token)})
        assert r.status_code == 404 and "does not exist" in r.text, verb
        assert c.post(f"/dashboard/clusters/nosuch/{verb}").status_code == 403  # no form token
    assert c.post("/dashboard/jobs/3/cancel", data={"csrf": csrf_token(token)}).status_code == 404


def test_jobs_list_is_paginated_newest_first_and_shows_only_the_users_jobs(
        client: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.jobs.store import JobStore
    from launcher.server.dashboard import pages

    c, token = client
    store = JobStore()
    try:
        ids = [store.add_job(name=f"job{i}", task_yaml="run: echo\n", task_source=None,
                             strategy="FAILOVER", max_restarts_on_errors=0,
                             recover_on_exit_codes=()).id for i in range(5)]
    finally:
        store.close()
    with ServerStore() as s:
        s.create_user("bob", "user")
        for job_id in ids:
            s.set_job_launcher(job_id, "alice" if job_id % 2 else "bob")  # alice: 1, 3, 5
    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    c.post("/dashboard/login", data={"token": token})
    first = c.get("/dashboard/jobs").text
    assert "job4" in first and "job2" in first and "job0" not in first  # ids 5, 3
    assert first.index("job4") < first.index("job2") and "job1" not in first
    assert 'href="/dashboard/jobs?page=2"' in first and "3 jobs" in first
    second = c.get("/dashboard/jobs?page=2").text
    assert "job0" in second and "job4" not in second and "page=3" not in second
    assert "job3" not in second and "job1" not in second  # bob's, on no page


def test_users_page_for_admins_tokens_shown_once(client: tuple[TestClient, str]) -> None:
    import re

    c, alice = client
    with ServerStore() as s:
        admin = s.create_user("root", "admin")
    c.post("/dashboard/login", data={"token": alice})  # a user: no users page, no action
    assert c.get("/dashboard/users").status_code == 403
    assert c.post("/dashboard/users", data={"csrf": csrf_token(alice), "name": "eve"}
                  ).status_code == 403
    c.post("/dashboard/login", data={"token": admin})
    form = {"csrf": csrf_token(admin)}
    made = c.post("/dashboard/users", data={**form, "name": "carol", "role": "user"})
    (carol,) = re.findall(r"<code>(lk_[^<]+)</code>", made.text)
    assert made.status_code == 200 and "New token for carol" in made.text
    assert "New token" not in c.get("/dashboard/users").text  # shown once
    again = c.post("/dashboard/users", data={**form, "name": "carol"})
    assert again.status_code == 400 and "already exists" in again.text
    bad = c.post("/dashboard/users", data={**form, "name": "<b>x"})
    assert bad.status_code == 400 and "<b>x" not in bad.text and "&lt;b&gt;x" in bad.text
    with ServerStore() as s:
        assert s.authenticate(carol) is not None
        assert sorted(u.name for u in s.users()) == ["alice", "carol", "root"]
    rotated = c.post("/dashboard/users/carol/rotate", data=form)
    (fresh,) = re.findall(r"<code>(lk_[^<]+)</code>", rotated.text)
    with ServerStore() as s:
        now_carol = s.authenticate(fresh)
        assert s.authenticate(carol) is None and now_carol is not None
        assert now_carol.name == "carol"
    assert c.post("/dashboard/users/carol/delete", data=form).status_code == 200
    with ServerStore() as s:
        assert s.authenticate(fresh) is None and "carol" not in [u.name for u in s.users()]
        assert ("root", "users.delete", "carol") in [a[1:] for a in s.audit()]


def test_cost_view_per_user_and_per_day(client: tuple[TestClient, str]) -> None:
    from datetime import datetime

    from launcher.server.dashboard import costs
    from launcher.state.db import PlacementRecord, StateDB

    midnight = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    now = midnight + 6 * 3600
    with StateDB() as db:  # alice: yesterday 10:00-12:00 at $10/h; bob: today 01:00-03:00, $4/h
        for name, price, start in (("c-alice", 10.0, midnight - 14 * 3600),
                                   ("c-bob", 4.0, midnight + 3600)):
            rec = db.create_cluster(name, PlacementRecord("aws", "us-east-1", None, "m5.large",
                                                          1, False, hourly_cost=price))
            with db.transaction() as conn:  # launched just before its nodes were billed
                conn.execute("UPDATE clusters SET launched_at = ? WHERE name = ?",
                             (start - 60, name))
            db.open_usage(rec, started_at=start)
            db.close_usage(name, "down", ended_at=start + 7200)
    with ServerStore() as s:
        s.create_user("bob", "user")
        s.create_user("root", "admin")
        s.set_cluster_launcher("c-alice", "alice")
        s.set_cluster_launcher("c-bob", "bob")
        alice, root = s.user("alice"), s.user("root")
    mine = costs.view(alice, 7, now=now)
    assert [x.cluster for x in mine.lines] == ["c-alice"] and mine.total == pytest.approx(20)
    assert mine.by_user == []  # per-user totals are for admins
    assert [d.total for d in mine.days][-2:] == [pytest.approx(20), 0.0]
    every = costs.view(root, 7, now=now)
    assert every.total == pytest.approx(28) and every.by_cloud == [("aws", pytest.approx(28))]
    assert every.by_user == [("alice", pytest.approx(20)), ("bob", pytest.approx(8))]
    assert len(every.days) == 7 and [d.total for d in every.days][-2:] == [
        pytest.approx(20), pytest.approx(8)]
    (part,) = every.days[-2].parts  # the tallest day fills the chart's height
    assert part[0] == "aws" and part[3] == pytest.approx(110) and part[2] == pytest.approx(0)


def test_gpus_form_ranks_offers_and_marks_launchable(client: tuple[TestClient, str]) -> None:
    import re

    c, token = client
    c.post("/dashboard/login", data={"token": token})
    r = c.get("/dashboard/gpus", params={"accelerator": "h100", "count": "8", "nodes": "2"})
    assert r.status_code == 200
    rows = re.findall(r"<tr><td>(\d+)</td><td>([^<]+)</td><td><span[^>]*>(?:yes|no)</span></td>"
                      r"<td>([^<]+)</td><td>8x H100</td>", r.text)
    assert len(rows) >= 2 and [int(n) for n, _, _ in rows] == list(range(1, len(rows) + 1))
    same = c.get("/gpus", params={"accelerator": "h100", "count": 8},
                 headers={"Authorization": f"Bearer {token}"}).json()
    assert [(x["cloud"], x["instance_type"]) for x in same] == [(a, b) for _, a, b in rows]
    first = same[0]
    assert f"${first['price'] * 2:,.2f}" in r.text  # the $/h for 2 nodes
    enabled = {k for k, v in c.get("/info", headers={"Authorization": f"Bearer {token}"}
                                   ).json()["clouds"].items() if v["enabled"]}
    marks = re.findall(r'<td>(?:<span class="st st-UP">yes|<span class="st" title="no cred)',
                       r.text)
    assert len(marks) == len(rows)
    assert r.text.count('st-UP">yes') == sum(1 for _, cloud, _ in rows if cloud in enabled)
    bad = c.get("/dashboard/gpus", params={"accelerator": "<b>nosuchgpu"})
    assert bad.status_code == 400 and 'id="error"' in bad.text and "<b>nosuch" not in bad.text
    assert c.get("/dashboard/gpus", params={"accelerator": "h100", "count": "x"}
                 ).status_code == 400


def test_deadline_job_policy_switches_on_its_page(client: tuple[TestClient, str]) -> None:
    import time

    from launcher.api.jobs import jobs_detail
    from launcher.jobs import deadline_store as dl
    from launcher.jobs.store import JobStore

    c, token = client
    now = time.time()
    store = JobStore()
    try:
        job = store.add_job(name="dl", task_yaml="run: echo\n", task_source=None,
                            strategy="FAILOVER", max_restarts_on_errors=0,
                            recover_on_exit_codes=(),
                            deadline=dl.DeadlineSpec(deadline_at=now + 3600, work_s=600))
        for at, mode in ((now - 50, "spot"), (now - 40, "spot"), (now - 30, "on_demand"),
                         (now - 20, "on_demand"), (now - 10, "spot")):
            dl.add_log(store, job.id, at, "decision", f"slack says {mode}", mode=mode)
        dl.add_log(store, job.id, now - 5, "running", "attempt 1 up", mode="spot")
    finally:
        store.close()
    switches = jobs_detail(job.id).policy_switches
    assert [(round(now - s.at), s.mode) for s in switches] == [
        (50, "spot"), (30, "on_demand"), (10, "spot")]
    with ServerStore() as s:
        s.set_job_launcher(job.id, "alice")
    c.post("/dashboard/login", data={"token": token})
    page = c.get(f"/dashboard/jobs/{job.id}").text
    assert page.count('class="vline switch"') == 3 and "→ on-demand" in page
    assert 'class="vline deadline"' in page and "slack says on_demand" in page


def test_timeline_stretches_to_the_deadline_and_marks_a_late_projection() -> None:
    t = timeline.build([_attempt(1, 100, 110, None, None)], 100, 1100,
                       switches=[{"at": 100, "mode": "spot", "reason": "r"},
                                 {"at": 600, "mode": "on_demand", "reason": "slack gone"}],
                       deadline_at=3100, projected_at=4100)
    switch_a, switch_b, deadline, projected = t.lines
    assert (switch_b.label, switch_b.kind) == ("→ on-demand", "switch")
    assert switch_a.x < switch_b.x < t.bars[0].x1 < deadline.x < projected.x
    assert projected.kind == "projected-late" and "after the deadline" in projected.title
    assert projected.x == pytest.approx(timeline.WIDTH - timeline.RIGHT)


def test_timeline_gap_says_the_controllers_recovery_time_when_known() -> None:
    second = {**_attempt(2, 1060, 1300, None, None, "preemption"), "recovery_s": 4.25}
    (gap,) = timeline.build([_attempt(1, 100, 130, 1000, "PREEMPTED"), second], 100, 2000).gaps
    assert gap.label == "recovery 4.2s"  # as the attempts table says, not the drawn span


def _running_event(attempt: int, steps: dict[str, float], lost_at: float,
                   now: float) -> dict[str, Any]:
    """The RUNNING event the controller writes after a recovery, its breakdown made by
    the controller's own RecoverySteps from step stamps (`steps`: stamp -> epoch s)."""
    from launcher.jobs.controller.context import RecoverySteps

    rs = RecoverySteps()
    for key, at in steps.items():
        rs.mark(7, key, at)
    return {"attempt": attempt, "to_status": "RUNNING", "at": now,
            "reason": f"running on aws/us-east-1 (p5, cluster c-2) {now - lost_at:.1f} s after "
                      f"the preemption ({rs.breakdown(7, lost_at, now)})"}


def test_recovery_gap_is_split_into_its_phases_from_the_running_event() -> None:
    lost, run = 1000.0, 1060.0  # detected +3, torn down +8, provisioned +40, running +60
    ev = _running_event(2, {"detected": 1003, "decided": 1003.5, "old_gone": 1008,
                            "attempt": 1008, "provisioned": 1040, "submitted": 1060}, lost, run)
    assert timeline.recovery_phases(ev["reason"]) == [
        ("detection", 3.5), ("teardown", 4.5), ("relaunch", 32.0), ("setup", 20.0)]
    t = timeline.build([_attempt(1, 100, 130, 1003.5, "PREEMPTED"),
                        _attempt(2, 1008, run, None, None, "preemption")], 100, 2000,
                       events=[{"attempt": 2, "to_status": "STARTING", "reason": "x", "at": 1},
                               ev])
    (gap,) = t.gaps
    names = [p.name for p in gap.phases]
    assert names == ["detection", "teardown", "relaunch", "setup"]
    xs = [p.x0 for p in gap.phases] + [gap.phases[-1].x1]
    assert xs == sorted(xs) and gap.phases[-1].x1 == pytest.approx(t.bars[1].x_run)
    start = timeline.LEFT + (lost - 100) / 1900 * (timeline.WIDTH - timeline.LEFT - timeline.RIGHT)
    assert gap.phases[0].x0 == pytest.approx(start)  # the detection starts at the loss
    assert "detection 3.5s · teardown 4.5s · relaunch 32s · setup 20s" in gap.label


def test_recovery_without_a_provision_stamp_merges_relaunch_and_setup() -> None:
    ev = _running_event(2, {"detected": 10, "decided": 10, "old_gone": 12, "attempt": 12,
                            "submitted": 30}, 9.0, 30.0)
    assert timeline.recovery_phases(ev["reason"]) == [
        ("detection", 1.0), ("teardown", 2.0), ("relaunch + setup", 18.0)]
    assert timeline.recovery_phases("running on aws (p5, cluster c-1)") == []


def test_job_page_draws_the_phases(client: tuple[TestClient, str]) -> None:
    import time

    from launcher.jobs.state_machine import ManagedJobStatus as S
    from launcher.jobs.store import JobStore

    c, token = client
    now = time.time()
    store = JobStore()
    try:
        job = store.add_job(name="ph", task_yaml="run: echo\n", task_source=None,
                            strategy="FAILOVER", max_restarts_on_errors=0,
                            recover_on_exit_codes=())
        store.add_attempt(job.id, 1, "mj-1-1", "initial", "spot")
        store.update_attempt(job.id, 1, cloud="aws", region="us-east-1", instance_type="p5",
                             num_nodes=1, use_spot=True, node_price=2.0, running_at=now - 300,
                             ended_at=now - 100, outcome="PREEMPTED", preempted_at=now - 102)
        store.add_attempt(job.id, 2, "mj-1-2", "preemption", "spot")
        store.update_attempt(job.id, 2, cloud="aws", region="us-east-2", instance_type="p5",
                             num_nodes=1, use_spot=True, node_price=2.0, running_at=now - 50)
        ev = _running_event(2, {"detected": now - 100, "decided": now - 100,
                                "old_gone": now - 90, "attempt": now - 90,
                                "provisioned": now - 70, "submitted": now - 50},
                            now - 102, now - 50)
        for target in (S.STARTING, S.RUNNING, S.RECOVERING):
            store.transition(job.id, target, "t", attempt=1)
        store.transition(job.id, S.RUNNING, ev["reason"], attempt=2)
    finally:
        store.close()
    with ServerStore() as s:
        s.set_job_launcher(job.id, "alice")
    c.post("/dashboard/login", data={"token": token})
    page = c.get(f"/dashboard/jobs/{job.id}").text
    import re

    got = re.findall(r'<rect class="phase" data-phase="([^"]+)" data-seconds="([^"]+)"', page)
    assert got == [("detection", "2.0"), ("teardown", "10.0"), ("relaunch", "20.0"),
                   ("setup", "20.0")]


def test_clusters_list_shows_market_and_fabric(client: tuple[TestClient, str],
                                               tmp_path: Path) -> None:
    import re

    from launcher.clouds.base import NodeInfo
    from launcher.state.db import ClusterStatus, PlacementRecord, StateDB

    c, token = client
    with StateDB() as db:
        db.create_cluster("gpu", PlacementRecord("aws", "us-east-1", "us-east-1a", "p5.48xlarge",
                                                 2, True, "H100", 8, 98.3, "2x p5.48xlarge"))
        db.create_cluster("cpu", PlacementRecord("aws", "us-east-1", None, "m5.large", 1, False,
                                                 hourly_cost=0.1, resources="1x m5.large"))
        (tmp_path / "no-agent").mkdir()
        for name in ("gpu", "cpu"):  # (no agent: an empty node home of this test's)
            db.set_nodes(name, [NodeInfo(0, f"{name}-0", "10.0.0.1",
                                         local_root=str(tmp_path / "no-agent"))])
            db.set_status(name, ClusterStatus.UP, "test")
    with ServerStore() as s:
        for name in ("gpu", "cpu"):
            s.set_cluster_launcher(name, "alice")
    c.post("/dashboard/login", data={"token": token})
    page = c.get("/dashboard/clusters").text
    found = re.findall(r'<a href="/dashboard/clusters/(\w+)">.*?<td class="num">\d+</td>'
                       r'<td>([^<]+)</td>\s*<td>([^<]+)</td>', page, re.S)
    cells = {name: (market.strip(), fabric.strip()) for name, market, fabric in found}
    assert cells == {"gpu": ("spot", "efa 3200 Gb/s"), "cpu": ("on-demand", "-")}
    one = c.get("/dashboard/clusters/gpu").text
    assert "<b>Market</b>spot" in one and "efa 3200 Gb/s" in one


def test_preemption_marks_say_whether_a_notice_came_first() -> None:
    noticed = {**_attempt(1, 100, 130, 500, "PREEMPTED"),
               "reason": "interruption notice for i-1 (grace 120 s)"}
    cut = {**_attempt(2, 510, 520, 900, "PREEMPTED", "preemption"),
           "reason": "cloud reports i-2 preempted"}
    t = timeline.build([noticed, cut, _attempt(3, 910, 920, None, None, "preemption")], 100, 1000)
    assert [m.label for m in t.preemptions] == ["preempted, with notice", "preempted, no notice"]
    assert "grace 120 s" in t.preemptions[0].title


def test_cost_view_totals_per_managed_job(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from launcher.server.dashboard import costs
    from launcher.state.db import PlacementRecord, StateDB

    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    now = time.time()
    with StateDB() as db:  # job 1: two attempts ($2 + $3); job 2: one ($4)
        for name, job, price in (("mj-1-1", 1, 2.0), ("mj-1-2", 1, 3.0), ("mj-2-1", 2, 4.0)):
            rec = db.create_cluster(name, PlacementRecord(
                "aws", "us-east-1", None, "p5", 1, True, hourly_cost=price),
                owner=f"managed-job:{job}")
            db.open_usage(rec, started_at=now - 3600)
            db.close_usage(name, "down", ended_at=now)
    with ServerStore() as s:
        s.create_user("root", "admin")
        root = s.user("root")
    v = costs.view(root, 1, now=now)
    assert v.by_job == [(1, pytest.approx(5.0)), (2, pytest.approx(4.0))]


def test_cluster_page_shows_the_health_watch_record_escaped() -> None:
    import time as _time

    from launcher.server.dashboard.templates import render

    c = {"name": "pc", "status": "DEGRADED", "cloud": "ssh", "region": "lab", "zone": None,
         "resources": "2x", "num_nodes": 2, "hourly_cost": 0.0, "launched_at": _time.time()}
    health = {"job_id": 3, "events": [{"ts": _time.time(), "kind": "health-fail",
                                       "detail": "node 1: Xid 79 | <b>raw</b>"}],
              "rows": [{"t": _time.time(), "rank": 1, "util": 93.5, "mem_used": 40960,
                        "power": 300.0, "temp": 71, "throttle": ["hw thermal"],
                        "progress": 0.4}]}
    page = render("cluster", p="/dashboard", user=None, csrf="", now=_time.time(), c=c,
                  queue=[], nodes=[], cost=0.0, log_job=None, health=health)
    assert "Health watch (job 3)" in page
    assert "health-fail: node 1: Xid 79 | &lt;b&gt;raw&lt;/b&gt;" in page
    assert "<td>93.5</td>" in page and "<td>hw thermal</td>" in page
    without = render("cluster", p="/dashboard", user=None, csrf="", now=_time.time(), c=c,
                     queue=[], nodes=[], cost=0.0, log_job=None, health=None)
    assert "Health watch" not in without
