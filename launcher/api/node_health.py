"""`launcher health CLUSTER`: run the node health checks now on every node of an UP
cluster (the same checker and expectation as the gate before setup, docs/health.md).

Every node's report is recorded as a cluster event (`health-ok` / `health-warn` /
`health-fail`) with its raw evidence. Blocking; parallel over nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.api.cluster_common import require_up
from launcher.state import StateDB

if TYPE_CHECKING:
    from launcher.provisioning.health_gate import NodeHealth

DEEP_GATE = "dcgm-2"


def check(cluster_name: str, *, gate: str = "quick") -> list[NodeHealth]:
    """One report per node, rank order. `gate` is quick, dcgm-1 or dcgm-2 (`--deep`).
    Raises ClusterNotFoundError, ClusterNotReadyError (not UP)."""
    from launcher.provisioning.health_gate import check_nodes, event_text, expectation
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
        for node in nodes:
            db.add_event(cluster_name, f"health-{node.status}", event_text(node))
    return nodes
