"""GCPCloud.query_many on the Compute REST fake: many clusters' views with one
`instances.list` per zone (plus the zone's preemption operations once when a spot node is
gone), the same answers as one `query` per cluster."""

from __future__ import annotations

from launcher.clouds.base import NodeState, query_many
from tests.clouds.gcp.test_gcp_provision import PROJECT, make_cloud, req
from tests.gcp_fake import GCPFake


def test_many_clusters_one_list_per_zone(gcp_env: GCPFake) -> None:
    cloud = make_cloud(gcp_env)
    for i in range(4):
        cloud.provision(req(f"a{i}", use_spot=True))
    cloud.provision(req("b0", zone="us-central1-b", n=1))
    gcp_env.preempt(["a1-0"])
    op = cloud.clients.instances().delete_unary(project=PROJECT, zone="us-central1-a",
                                                instance="a2-1")  # a user's delete
    cloud.clients.zone_operations().wait(project=PROJECT, zone="us-central1-a",
                                         operation=op.name)
    names = ["a0", "a1", "a2", "a3", "b0"]
    singly = {n: cloud.query(n) for n in names}
    gcp_env.calls.clear()
    views = query_many(cloud, names, "us-central1")
    assert views == singly
    assert views["a1"] == {"a1-0": NodeState.PREEMPTED, "a1-1": NodeState.RUNNING}
    assert views["a2"] == {"a2-0": NodeState.RUNNING, "a2-1": NodeState.TERMINATED}
    kinds = sorted(c.kind for c in gcp_env.calls)
    # 5 clusters, 9 instances: a list per zone and one look at zone a's preemptions
    assert kinds == ["instances.list", "instances.list", "operations.list"], kinds
