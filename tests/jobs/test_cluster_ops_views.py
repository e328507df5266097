"""RealClusterOps.cloud_views: many clusters' views with one batched cloud query (the
controller's poll), the whole batch's failure a TransientOpsError (never a loss)."""

from __future__ import annotations

import pytest

from launcher.clouds.base import NodeState, ProvisionRequest
from launcher.clouds.local import LocalCloud
from launcher.jobs.cluster_ops import RealClusterOps
from launcher.jobs.ops_interface import TransientOpsError


def _provision(name: str) -> None:
    LocalCloud().provision(ProvisionRequest(cluster_name=name, cloud="local", region="local",
                                            zone=None, instance_type="local", num_nodes=1,
                                            use_spot=True))


def test_the_local_clouds_clusters_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    _provision("mj-1-1")
    _provision("mj-2-1")
    LocalCloud().preempt("mj-2-1")
    calls: list[list[str]] = []
    real = LocalCloud.query_many

    def counting(self: LocalCloud, clusters: list[str], region: str | None = None) -> object:
        calls.append(list(clusters))
        return real(self, clusters, region)

    monkeypatch.setattr(LocalCloud, "query_many", counting)
    views = RealClusterOps().cloud_views("local", "local", ["mj-1-1", "mj-2-1", "mj-3-1"])
    assert views == {"mj-1-1": {"mj-1-1-0": NodeState.RUNNING},
                     "mj-2-1": {"mj-2-1-0": NodeState.PREEMPTED}, "mj-3-1": {}}
    assert calls == [["mj-1-1", "mj-2-1", "mj-3-1"]]


def test_a_failed_batch_is_transient() -> None:
    with pytest.raises(TransientOpsError, match="nocloud query of 2 cluster"):
        RealClusterOps().cloud_views("nocloud", None, ["a", "b"])
