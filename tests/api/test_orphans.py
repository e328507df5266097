"""`status --refresh` lists instances with launcher's tags that no cluster here owns
(clouds with the SupportsOrphans capability), and `down_orphan` removes them."""

from __future__ import annotations

import pytest

from launcher.api.clusters import down_orphan, status
from launcher.clouds.base import INSTANCE, SupportsOrphans, SupportsResourceScan, TaggedResource
from launcher.errors import LauncherError
from launcher.provisioning.orphans import Orphan
from launcher.state.db import PlacementRecord, StateDB
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
    assert found == [Orphan("fake", "lost", ("i-2", "i-3"),
                            (TaggedResource(INSTANCE, "i-2"), TaggedResource(INSTANCE, "i-3")))]
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


class ScanningCloud(TaggingCloud):
    """A provider that lists every kind of tagged resource, not only instances."""

    def __init__(self, name: str, resources: dict[str, list[TaggedResource]]) -> None:
        super().__init__(name, instances={
            c: [r.id for r in res if r.kind == INSTANCE] for c, res in resources.items()})
        self.resources = resources

    def list_tagged_resources(self) -> dict[str, list[TaggedResource]]:
        return {c: list(res) for c, res in self.resources.items()}

    def terminate(self, cluster: str) -> None:
        super().terminate(cluster)
        self.resources.pop(cluster, None)


def test_every_tagged_kind_is_listed_not_only_instances() -> None:
    """A launch killed after its security group was made, before any instance: the
    orphan is the group (and here an Elastic IP); an instance-only scan never saw it."""
    sg, eip = TaggedResource("security group", "sg-1"), TaggedResource("Elastic IP", "eipalloc-1")
    cloud = ScanningCloud("fake", {"half": [sg, eip],
                                   "gang": [TaggedResource(INSTANCE, "i-9"), sg]})
    assert isinstance(cloud, SupportsResourceScan)
    notes: list[str] = []
    found: list[Orphan] = []
    status(refresh=True, cloud_fn={"fake": cloud}.__getitem__, notes=notes, orphans=found,
           orphan_clouds=["fake"])
    by_name = {o.cluster: o for o in found}
    assert by_name["half"].node_ids == () and by_name["half"].resources == (eip, sg)
    assert by_name["gang"].node_ids == ("i-9",)
    assert by_name["half"].to_json()["resources"] == [
        {"kind": "Elastic IP", "id": "eipalloc-1"}, {"kind": "security group", "id": "sg-1"}]
    (line,) = [n for n in notes if "'half'" in n]
    assert "1 Elastic IP (eipalloc-1), 1 security group (sg-1) tagged for cluster 'half'" in line
    assert "launcher down --orphan half --cloud fake" in line
    (line,) = [n for n in notes if "'gang'" in n]
    assert line.startswith("Orphan on fake: 1 instance (i-9), 1 security group (sg-1)")
    down_orphan("half", "fake", cloud_fn={"fake": cloud}.__getitem__)
    again: list[Orphan] = []
    status(refresh=True, cloud_fn={"fake": cloud}.__getitem__, orphans=again,
           orphan_clouds=["fake"])
    assert [o.cluster for o in again] == ["gang"]
