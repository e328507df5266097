"""An UP cluster whose node rows are missing (a DB row written by hand, a launch killed
between recording the cluster and its nodes) answers queue/logs/exec with one clear
error naming what to do, not an IndexError from the missing head."""

from __future__ import annotations

import pytest

from launcher.api import clusters
from launcher.api.cluster_common import ClusterNotReadyError
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB


@pytest.mark.usefixtures("launcher_home")
@pytest.mark.parametrize("call", [
    lambda: clusters.queue("bare"),
    lambda: clusters.logs("bare", follow=False),
], ids=["queue", "logs"])
def test_up_cluster_with_no_nodes_is_a_clear_error(call) -> None:  # type: ignore[no-untyped-def]
    with StateDB() as db:
        db.create_cluster("bare", PlacementRecord("local", "local", None, "local", 1, False))
        db.set_status("bare", ClusterStatus.UP, "as if launched")
    with pytest.raises(ClusterNotReadyError) as err:
        call()
    text = str(err.value)
    assert "no nodes recorded" in text and "launcher down bare" in text
