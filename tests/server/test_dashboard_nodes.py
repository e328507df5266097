"""The cluster page's node table (issue 20): each node's state as its cloud last reported
it (`status --refresh`), its last health finding, and the cluster's status for nodes
nobody reported on since it changed; the table is its own route, re-fetched by the page,
and refuses a cluster the user may not see. Plain HTTP, no browser."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from launcher import api
from launcher.api.server_store import ServerStore
from launcher.clouds.base import NodeInfo, NodeState
from launcher.server.app import create_app
from launcher.state import node_state
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB


class PoolView:
    """A cloud whose view of the cluster's nodes the test sets."""

    name = "ssh"

    def __init__(self) -> None:
        self.view: dict[str, NodeState] = {}

    def query(self, cluster: str) -> dict[str, NodeState]:
        return dict(self.view)

    def terminate(self, cluster: str) -> None:
        self.view = {}


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, str]]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    with ServerStore() as store:
        token = store.create_user("alice", "user")
        store.create_user("bob", "user")
    with TestClient(create_app(run_controller=False), follow_redirects=False) as c:
        yield c, token


def _nodes(*ids: str) -> list[NodeInfo]:
    """Nodes whose (never installed) agent would run under an empty dir of the test's home:
    asking them for the queue fails at once and reaches nothing else on this machine."""
    root = Path(os.environ["LAUNCHER_HOME"]) / "no-agent"
    root.mkdir(exist_ok=True)
    return [NodeInfo(rank, node_id, f"10.0.0.{rank + 1}", local_root=str(root))
            for rank, node_id in enumerate(ids)]


def _cluster(name: str, owner: str) -> None:
    with StateDB() as db:
        db.create_cluster(name, PlacementRecord("ssh", "lab", None, "lab-host", 2, False))
        db.set_nodes(name, _nodes("h1:22", "h2:22"))
        db.set_status(name, ClusterStatus.UP, "test")
    with ServerStore() as s:
        s.set_cluster_launcher(name, owner)


def _states(html: str) -> dict[str, tuple[str, str]]:
    """node id -> (state, what the muted note says) in a node table."""
    rows = re.findall(r'<tr data-node="([^"]+)">.*?<span class="st ns-[^"]+"[^>]*>([^<]+)</span>'
                      r'\s*<span class="muted">([^<]*)</span>', html, re.S)
    return {n: (st, note.strip()) for n, st, note in rows}


def test_node_table_shows_each_nodes_reported_state_and_health(
        client: tuple[TestClient, str]) -> None:
    c, token = client
    _cluster("lab", "alice")
    c.post("/dashboard/login", data={"token": token})
    page = c.get("/dashboard/clusters/lab")  # its agent does not answer: the nodes still show
    assert page.status_code == 200 and 'data-refresh="/dashboard/clusters/lab/nodes"' in page.text
    assert "The queue could not be read: The agent is not installed" in page.text
    assert _states(page.text) == {"h1:22": ("up", "(cluster status)"),
                                  "h2:22": ("up", "(cluster status)")}

    # a refresh asks the cloud: h2 does not answer; what it saw is kept per node
    cloud = PoolView()
    cloud.view = {"h1:22": NodeState.RUNNING, "h2:22": NodeState.UNKNOWN}
    api.status(refresh=True, cloud_fn=lambda _n: cloud, orphan_clouds=[])
    with StateDB() as db:
        node_state.record_health(db, db.require_cluster("lab"),
                                 [(0, "ok", "node 0: fine"),
                                  (1, "fail", "node 1 (h2): gpus: <b>7</b> GPU(s) visible")],
                                 time.time(), "launcher health")
    frag = c.get("/dashboard/clusters/lab/nodes")
    assert frag.status_code == 200 and frag.text.startswith('<div class="scroll" id="nodes-box"')
    got = _states(frag.text)
    assert got["h1:22"][0] == "up" and got["h2:22"][0] == "unreachable"
    assert got["h2:22"][1].startswith("ssh (status --refresh), ")
    assert 'class="st hs-fail"' in frag.text and 'class="st hs-ok"' in frag.text
    assert "&lt;b&gt;7&lt;/b&gt; GPU(s) visible" in frag.text and "<b>7" not in frag.text

    # the same through the API route the CLI's client uses
    doc = c.get("/clusters/lab/nodes", headers={"Authorization": f"Bearer {token}"}).json()
    assert [(n["node_id"], n["state"], n["health"]) for n in doc] == [
        ("h1:22", "up", "ok"), ("h2:22", "unreachable", "fail")]

    # the cluster is stopped afterwards: that is newer than the refresh's report
    time.sleep(0.01)
    with StateDB() as db:
        db.set_status("lab", ClusterStatus.STOPPED, "stopped")
    assert set(_states(c.get("/dashboard/clusters/lab/nodes").text).values()) == {
        ("stopped", "(cluster status)")}


def test_a_preempting_refresh_marks_which_node_went(client: tuple[TestClient, str]) -> None:
    c, token = client
    with StateDB() as db:
        db.create_cluster("spot", PlacementRecord("aws", "us-east-1", "us-east-1a", "p5", 2, True))
        db.set_nodes("spot", _nodes("i-0", "i-1"))
        db.set_status("spot", ClusterStatus.UP, "test")
    with ServerStore() as s:
        s.set_cluster_launcher("spot", "alice")
    cloud = PoolView()
    cloud.view = {"i-0": NodeState.RUNNING, "i-1": NodeState.PREEMPTED}
    api.status(refresh=True, cloud_fn=lambda _n: cloud, orphan_clouds=[])
    c.post("/dashboard/login", data={"token": token})
    got = _states(c.get("/dashboard/clusters/spot/nodes").text)
    assert (got["i-0"][0], got["i-1"][0]) == ("up", "preempted")  # not the whole cluster


def test_someone_elses_node_table_is_not_found(client: tuple[TestClient, str]) -> None:
    c, _ = client
    _cluster("lab", "alice")
    with ServerStore() as s:
        bob = s.rotate("bob")
    c.post("/dashboard/login", data={"token": bob})
    r = c.get("/dashboard/clusters/lab/nodes")
    assert r.status_code == 404 and "h1:22" not in r.text


def test_a_relaunched_cluster_does_not_inherit_node_reports(
        client: tuple[TestClient, str]) -> None:
    _cluster("again", "alice")
    cloud = PoolView()
    cloud.view = {"h1:22": NodeState.UNKNOWN, "h2:22": NodeState.RUNNING}
    api.status(refresh=True, cloud_fn=lambda _n: cloud, orphan_clouds=[])
    assert [n.state for n in api.clusters.cluster_nodes("again")] == ["unreachable", "up"]
    with StateDB() as db:
        db.delete_cluster("again")
    time.sleep(0.01)
    _cluster("again", "alice")
    nodes = api.clusters.cluster_nodes("again")
    assert [(n.state, n.state_source) for n in nodes] == [("up", "cluster status")] * 2
    _cluster("other", "alice")
    api.status(refresh=True, cloud_fn=lambda _n: cloud, orphan_clouds=[])
    with StateDB() as db:  # the first launch's reports went with the next write
        rows = db.query("SELECT cluster, launched_at FROM node_state")
        launched = {c.name: c.launched_at for c in db.list_clusters()}
    assert rows and all(launched[c] == at for c, at in rows)
