"""`status --refresh` lists instances with launcher's tags that no cluster here owns
(clouds with the SupportsOrphans capability), and `down_orphan` removes them."""

from __future__ import annotations

import pytest

from launcher.api.clusters import down_orphan, status
from launcher.clouds.base import SupportsOrphans
from launcher.errors import LauncherError
from launcher.provisioning.orphans import Orphan
from launcher.state import PlacementRecord, StateDB
from tests.provisioning.test_failover import FakeCloud


class TaggingCloud(FakeCloud):
    """A provider whose instances carry the cluster tag and can be listed by it."""

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        return {name: list(ids) for name, ids in self.instances.items() if ids}


def _record(name: str, cloud: str) -> None:
    with StateDB() as db:
        db.create_cluster(name, PlacementRecord(
            cloud=cloud, region="r1", zone=None, instance_type="gpu.x", num_nodes=1,
            use_spot=False, accelerator=None, accelerator_count=0, hourly_cost=1.0,
            resources="1x gpu.x"))


def test_orphans_are_listed_with_their_command_and_removed() -> None:
    cloud = TaggingCloud("fake", instances={"owned": ["i-1"], "lost": ["i-3", "i-2"]})
    assert isinstance(cloud, SupportsOrphans)
    plain = FakeCloud("plain", instances={"ghost": ["p-1"]})  # no capability: not asked
    clouds = {"fake": cloud, "plain": plain}
    _record("owned", "fake")
    notes: list[str] = []
    found: list[Orphan] = []
    status(refresh=False, cloud_fn=clouds.__getitem__, notes=notes, orphans=found,
           orphan_clouds=["fake", "plain"])
    assert found == []  # a plain status asks no cloud
    status(refresh=True, cloud_fn=clouds.__getitem__, notes=notes, orphans=found,
           orphan_clouds=["fake", "plain", "nosuch"])
    assert found == [Orphan("fake", "lost", ("i-2", "i-3"))]
    assert found[0].to_json()["command"] == "launcher down --orphan lost --cloud fake"
    assert any("launcher down --orphan lost --cloud fake" in n and "i-2, i-3" in n for n in notes)
    down_orphan("lost", "fake", cloud_fn=clouds.__getitem__)
    assert "lost" not in cloud.instances and cloud.instances["owned"] == ["i-1"]
    again: list[Orphan] = []
    status(refresh=True, cloud_fn=clouds.__getitem__, orphans=again, orphan_clouds=["fake"])
    assert again == []


def test_a_cluster_the_db_owns_is_never_an_orphan() -> None:
    cloud = TaggingCloud("fake", instances={"owned": ["i-1"]})
    _record("owned", "fake")
    with pytest.raises(LauncherError, match="launcher down owned"):
        down_orphan("owned", "fake", cloud_fn={"fake": cloud}.__getitem__)
    assert cloud.instances == {"owned": ["i-1"]}


def test_a_cloud_that_cannot_be_listed_is_named_not_fatal() -> None:
    class Broken(TaggingCloud):
        def list_tagged_clusters(self) -> dict[str, list[str]]:
            raise RuntimeError("AuthFailure")

    notes: list[str] = []
    rows = status(refresh=True, cloud_fn={"fake": Broken("fake")}.__getitem__, notes=notes,
                  orphan_clouds=["fake"])
    assert rows == [] and any("Could not list fake" in n and "AuthFailure" in n for n in notes)
