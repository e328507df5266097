"""`launcher health CLUSTER` and `launcher top CLUSTER` (docs/health.md).

- `check`: the node health checks now, on every node of an UP cluster (the same checker
  and expectation as the gate before setup). Every node's report is recorded as a
  cluster event (`health-ok` / `health-warn` / `health-fail`) with its raw evidence.
- `sample`: one GPU utilization/memory/power/throttling sample per node.

Blocking; parallel over nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.api.cluster_common import require_up
from launcher.state.db import StateDB

if TYPE_CHECKING:
    from launcher.provisioning.health_gate import NodeHealth, NodeSample

DEEP_GATE = "dcgm-2"


def check(cluster_name: str, *, gate: str = "quick") -> list[NodeHealth]:
    """One report per node, rank order. `gate` is quick, dcgm-1 or dcgm-2 (`--deep`).
    Raises ClusterNotFoundError, ClusterNotReadyError (not UP)."""
    from launcher.provisioning.health_gate import check_nodes, expectation, record
    from launcher.runtime.execution import close_runners, open_runners

    with StateDB() as db:
        rec = db.require_cluster(cluster_name)
        require_up(rec)
        cluster = db.cluster_info(cluster_name)
    runners = open_runners(cluster)
    try:
        nodes = check_nodes(cluster, runners, expectation(cluster, rec, None, gate))
    finally:
        close_runners(runners)
    with StateDB() as db:
        record(db, cluster_name, nodes, "launcher health")
    return nodes


def sample(cluster_name: str) -> list[NodeSample]:
    """One GPU utilization sample per node of an UP cluster (`launcher top`), rank order.
    Raises ClusterNotFoundError, ClusterNotReadyError (not UP)."""
    from launcher.provisioning.health_gate import sample_nodes
    from launcher.runtime.execution import close_runners, open_runners

    with StateDB() as db:
        require_up(db.require_cluster(cluster_name))
        cluster = db.cluster_info(cluster_name)
    runners = open_runners(cluster)
    try:
        return sample_nodes(runners)
    finally:
        close_runners(runners)
