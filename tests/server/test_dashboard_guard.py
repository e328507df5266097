"""Guards over the whole dashboard (issue 20): every route needs a session (and the
users routes an admin), and no page puts data into HTML unescaped. Both walk what the
app serves, so a page or route added later is covered without listing it here."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from launcher.api.server_store import ServerStore
from launcher.clouds.base import NodeInfo, NodeState
from launcher.server.app import create_app
from launcher.server.dashboard.session import csrf_token
from launcher.state import node_state
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB

X = "<script>window.pwned=1</script>"
OPEN = {"/dashboard/login"}  # the only page without a session


@pytest.fixture
def app_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    monkeypatch.setenv("LAUNCHER_API_AUTH_FAILURES", "1000")  # a forged token per route
    with TestClient(create_app(run_controller=False), follow_redirects=False) as c:
        yield c


def _dashboard_routes(c: TestClient) -> list[tuple[str, str]]:
    """(method, path with sample parameters) of every dashboard route."""
    from launcher.server.dashboard.pages import router

    out = []
    for r in router.routes:
        if isinstance(r, APIRoute):
            path = r.path.replace("{name}", "lab").replace("{job_id}", "1")
            out += [(m, path) for m in sorted(r.methods or ())]
    return out


def test_every_dashboard_route_needs_a_session(app_client: TestClient) -> None:
    c = app_client
    routes = _dashboard_routes(c)
    assert len(routes) >= 20  # pages, fragments, streams, actions
    for method, path in routes:
        if path in OPEN:
            continue
        r = c.request(method, path, data={"csrf": "x"})
        # no session: the login page (GET and POST alike), never data, never a 2xx
        assert r.status_code in (303, 403), (method, path, r.status_code)
        if r.status_code == 303:
            assert r.headers["location"] == "/dashboard/login", (method, path)
        c.cookies.set("launcher_session", "lk_forged")  # a token that is no user's
        r = c.request(method, path, data={"csrf": csrf_token("lk_forged")})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/login", (
            method, path)
        c.cookies.clear()


def test_users_routes_are_for_admins_only(app_client: TestClient) -> None:
    c = app_client
    with ServerStore() as s:
        token = s.create_user("alice", "user")
        s.create_user("bob", "user")
    c.post("/dashboard/login", data={"token": token})
    users = [(m, p) for m, p in _dashboard_routes(c) if p.startswith("/dashboard/users")]
    assert len(users) >= 4
    for method, path in users:
        r = c.request(method, path.replace("lab", "bob"), data={"csrf": csrf_token(token)})
        assert r.status_code == 403, (method, path)
    with ServerStore() as s:
        assert "bob" in [u.name for u in s.users()]


def test_no_page_renders_data_as_markup(app_client: TestClient) -> None:
    """Every field a page shows, from every source (cluster rows, nodes and their reports,
    managed jobs, attempts, events, the cost ledger, users, query strings), set to markup:
    the pages carry it escaped only."""
    from launcher.jobs.state_machine import ManagedJobStatus as S
    from launcher.jobs.store import JobStore

    c = app_client
    with ServerStore() as s:
        token = s.create_user("root", "admin")
    with StateDB() as db:
        rec = db.create_cluster("lab", PlacementRecord(
            "aws", f"r{X}", f"z{X}", f"i{X}", 1, True, f"A{X}", 1, 2.0, f"res{X}"),
            task_name=f"t{X}")
        db.set_nodes("lab", [NodeInfo(0, f"n{X}", f"ip{X}", f"ex{X}", f"u{X}", 1)])  # port 1:
        # refused at once (the cluster page asks its agent for the queue)
        db.set_status("lab", ClusterStatus.UP, f"up{X}")
        db.open_usage(db.require_cluster("lab"))
        rec = db.require_cluster("lab")
        node_state.record_view(db, rec, {f"n{X}": NodeState.UNKNOWN}, time.time(), f"s{X}")
        node_state.record_health(db, rec, [(0, "fail", f"h{X}")], time.time(), f"s{X}")
    with ServerStore() as s:
        s.set_cluster_launcher("lab", "root")
    store = JobStore()
    try:
        job = store.add_job(name=f"j{X}", task_yaml="run: echo\n", task_source=None,
                            strategy="FAILOVER", max_restarts_on_errors=0,
                            recover_on_exit_codes=())
        store.add_attempt(job.id, 1, "mj-1-1", "initial", "spot")
        store.update_attempt(job.id, 1, cloud="aws", region=f"r{X}", instance_type=f"i{X}",
                             num_nodes=1, use_spot=True, node_price=1.0,
                             running_at=time.time() - 60, ended_at=time.time() - 30,
                             outcome="PREEMPTED", outcome_reason=f"o{X}")
        store.transition(job.id, S.STARTING, f"e{X}", attempt=1)
        store.transition(job.id, S.FAILED, f"f{X}", attempt=1, failure_reason=f"f{X}")
    finally:
        store.close()
    with ServerStore() as s:
        s.set_job_launcher(job.id, "root")
    c.post("/dashboard/login", data={"token": token})
    pages = ["/dashboard/clusters", "/dashboard/clusters?fragment=1", "/dashboard/clusters/lab",
             "/dashboard/clusters/lab?log=1", "/dashboard/clusters/lab/nodes",
             "/dashboard/jobs", "/dashboard/jobs?fragment=1", "/dashboard/jobs/1",
             "/dashboard/jobs/1?fragment=1", "/dashboard/cost", "/dashboard/users",
             f"/dashboard/gpus?accelerator={X}&cloud={X}&fabric={X}&count={X}",
             f"/dashboard/clusters/{X}", "/dashboard/login?once=" + X]
    for path in pages:
        r = c.get(path)
        assert r.status_code in (200, 400, 401, 404), (path, r.status_code)
        assert "<script>window" not in r.text, path
    # and the data is there, as text
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in c.get("/dashboard/jobs/1").text
    nodes = c.get("/dashboard/clusters/lab/nodes").text
    assert nodes.count("&lt;script&gt;") >= 4  # node id, IPs, health, source
