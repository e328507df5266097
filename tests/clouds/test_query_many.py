"""`query_many` (launcher.clouds.base): the views of many clusters in one call where the
cloud can (the local cloud), one `query` each where it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.clouds.base import NodeState, ProvisionRequest, SupportsBatchQuery, query_many
from launcher.clouds.local import LocalCloud


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "lhome"))


def _req(name: str, nodes: int = 2) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=name, cloud="local", region="local", zone=None,
                            instance_type="local", num_nodes=nodes, use_spot=True)


def test_the_local_cloud_answers_many_clusters_in_one_call() -> None:
    cloud = LocalCloud()
    assert isinstance(cloud, SupportsBatchQuery)
    for name in ("a", "b", "c"):
        cloud.provision(_req(name))
    cloud.preempt("b", rank=1)
    views = query_many(cloud, ["a", "b", "c", "gone"], "local")
    assert views == {n: cloud.query(n) for n in ("a", "b", "c", "gone")}
    assert views["b"] == {"b-0": NodeState.RUNNING, "b-1": NodeState.PREEMPTED}
    assert views["gone"] == {}  # a cluster the cloud does not know


class OneByOne:
    """A cloud with only `query` (no batch capability)."""

    name = "one"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self) -> object:
        raise NotImplementedError

    def provision(self, req: ProvisionRequest) -> object:
        raise NotImplementedError

    def query(self, cluster: str) -> dict[str, NodeState]:
        self.asked.append(cluster)
        return {f"{cluster}-0": NodeState.RUNNING}

    def terminate(self, cluster: str) -> None:
        raise NotImplementedError


def test_a_cloud_without_the_capability_is_asked_once_per_cluster() -> None:
    cloud = OneByOne()
    views = query_many(cloud, ["x", "y"])  # type: ignore[arg-type]
    assert views == {"x": {"x-0": NodeState.RUNNING}, "y": {"y-0": NodeState.RUNNING}}
    assert cloud.asked == ["x", "y"]


def test_the_local_cloud_sees_every_change_between_batched_reads() -> None:
    cloud = LocalCloud()
    cloud.provision(_req("a", nodes=1))
    cloud.provision(_req("b", nodes=1))
    assert query_many(cloud, ["a", "b"]) == {"a": {"a-0": NodeState.RUNNING},
                                             "b": {"b-0": NodeState.RUNNING}}
    cloud.stop("a")  # RUNNING -> STOPPED: a file of the same size, rewritten
    cloud.preempt("b")
    assert LocalCloud().query_many(["a", "b"]) == {"a": {"a-0": NodeState.STOPPED},
                                                   "b": {"b-0": NodeState.PREEMPTED}}
    cloud.terminate("b")
    assert cloud.query_many(["b"]) == {"b": {}}
