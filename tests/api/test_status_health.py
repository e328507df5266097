"""What `status --refresh` finds is stored with the time it was seen (issue 8, item 12):
a DEGRADED cluster stays DEGRADED in every later `status` until a refresh finds it
healthy; a cluster relaunched under the same name does not inherit it."""

from __future__ import annotations

import json
import time

import pytest

from launcher import api
from launcher.clouds.base import NodeState
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB


class PoolView:
    """The ssh pool's own view of one cluster's nodes, set by the test."""

    name = "ssh"

    def __init__(self) -> None:
        self.view: dict[str, NodeState] = {}

    def query(self, cluster: str) -> dict[str, NodeState]:
        return dict(self.view)

    def terminate(self, cluster: str) -> None:
        self.view = {}


def _up(name: str) -> None:
    with StateDB() as db:
        db.create_cluster(name, PlacementRecord("ssh", "lab", None, "lab-host", 2, False))
        db.set_status(name, ClusterStatus.UP, "test")


def test_degraded_is_kept_until_a_refresh_sees_the_cluster_healthy() -> None:
    cloud = PoolView()
    fn = lambda _name: cloud  # noqa: E731
    _up("deg")
    cloud.view = {"h1:22": NodeState.RUNNING, "h2:22": NodeState.UNKNOWN}
    before = time.time()
    refreshed = api.status(refresh=True, cloud_fn=fn, orphan_clouds=[])  # type: ignore[arg-type]
    assert [(v.name, v.status) for v in refreshed] == [("deg", "DEGRADED")]
    plain = api.status(cloud_fn=fn)  # type: ignore[arg-type]
    assert [(v.name, v.status) for v in plain] == [("deg", "DEGRADED")]
    seen = plain[0].status_seen_at
    assert seen is not None and before <= seen <= time.time()
    assert "h2:22 not answering" in (plain[0].status_reason or "")
    doc = json.loads(json.dumps(plain[0].to_json()))
    assert doc["status"] == "DEGRADED" and doc["status_seen_at"] == seen
    with StateDB() as db:  # the cluster's own status is still UP: it takes jobs
        assert db.require_cluster("deg").status is ClusterStatus.UP
    cloud.view = {"h1:22": NodeState.RUNNING, "h2:22": NodeState.RUNNING}
    assert [v.status for v in api.status(refresh=True, cloud_fn=fn, orphan_clouds=[])] == ["UP"]  # type: ignore[arg-type]
    healthy = api.status(cloud_fn=fn)  # type: ignore[arg-type]
    assert [v.status for v in healthy] == ["UP"] and healthy[0].status_reason is None


def test_a_relaunched_cluster_does_not_inherit_the_finding() -> None:
    cloud = PoolView()
    fn = lambda _name: cloud  # noqa: E731
    _up("again")
    cloud.view = {"h1:22": NodeState.UNKNOWN}
    api.status(refresh=True, cloud_fn=fn, orphan_clouds=[])  # type: ignore[arg-type]
    with StateDB() as db:
        db.delete_cluster("again")
    time.sleep(0.01)  # a new launch time
    _up("again")
    assert [v.status for v in api.status(cloud_fn=fn)] == ["UP"]  # type: ignore[arg-type]


@pytest.mark.parametrize("stored", [ClusterStatus.STOPPED, ClusterStatus.PREEMPTED])
def test_a_finding_shows_only_on_an_up_cluster(stored: ClusterStatus) -> None:
    cloud = PoolView()
    fn = lambda _name: cloud  # noqa: E731
    _up("other")
    cloud.view = {"h1:22": NodeState.UNKNOWN}
    api.status(refresh=True, cloud_fn=fn, orphan_clouds=[])  # type: ignore[arg-type]
    with StateDB() as db:
        db.set_status("other", stored, "test")
    assert [v.status for v in api.status(cloud_fn=fn)] == [stored.value]  # type: ignore[arg-type]
