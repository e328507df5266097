"""Each node's state as its cloud or its agent last reported it, and the node's last
health finding, so a cluster's page can show per node what is known without asking
the cloud again.

One table (launcher/state/schema.py, Alembic revision 0004):
`node_state(cluster, launched_at, node_id, kind, value, detail, seen_at, source)`,
kind `state` (the cloud's view: up, preempted, unreachable, stopped, terminated,
pending) or `health` (the health gate's or `launcher health`'s ok / warn / fail with
its findings). Writers: `status --refresh` (every node of the cloud's view), `local
preempt` (the local cloud's view after it), the health gate and `launcher health`.

A row belongs to one incarnation of the cluster (its `launched_at`); every write drops
the rows of clusters no longer there (or launched again since). A `state` row is
shown only while no later cluster status change overrides it (a cluster stopped, started
or preempted after the report); otherwise, and for a node never reported on, the node's
state is the cluster's status ("cluster status" as its source).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.clouds.base import NodeState
from launcher.state.db import ClusterRecord, ClusterStatus, StateDB

# The cloud's NodeState as a node's state on a page.
WORDS: dict[NodeState, str] = {
    NodeState.PENDING: "pending", NodeState.RUNNING: "up", NodeState.STOPPED: "stopped",
    NodeState.PREEMPTED: "preempted", NodeState.TERMINATED: "terminated",
    NodeState.UNKNOWN: "unreachable",
}
# A node nobody reported on since the cluster's last status change: the cluster's status.
FROM_CLUSTER: dict[ClusterStatus, str] = {
    ClusterStatus.INIT: "provisioning", ClusterStatus.UP: "up",
    ClusterStatus.STOPPED: "stopped", ClusterStatus.PREEMPTED: "preempted",
}


@dataclass(frozen=True)
class Report:
    value: str
    detail: str
    seen_at: float | None  # None: not reported, taken from the cluster's status
    source: str


def _write(db: StateDB, rec: ClusterRecord, kind: str,
           rows: Sequence[tuple[str, str, str]], seen_at: float, source: str) -> None:
    with db.transaction() as conn:
        # reports on clusters since taken down (or launched again) go: the table stays
        # as small as the clusters there are (writes are rare: refreshes, health checks)
        conn.execute(
            "DELETE FROM node_state WHERE NOT EXISTS (SELECT 1 FROM clusters c WHERE"
            " c.name = node_state.cluster AND abs(c.launched_at - node_state.launched_at)"
            " < 1e-6)")
        conn.executemany(
            "INSERT INTO node_state (cluster, launched_at, node_id, kind, value, detail,"
            " seen_at, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (cluster, node_id, kind) DO UPDATE SET launched_at ="
            " excluded.launched_at, value = excluded.value, detail = excluded.detail,"
            " seen_at = excluded.seen_at, source = excluded.source",
            [(rec.name, rec.launched_at, node_id, kind, value, detail, seen_at, source)
             for node_id, value, detail in rows])


def record_view(db: StateDB, rec: ClusterRecord, view: Mapping[str, NodeState],
                seen_at: float, source: str) -> None:
    """Store a cloud's view of `rec`'s nodes (node id -> NodeState), seen at `seen_at`."""
    _write(db, rec, "state", [(n, WORDS.get(s, s.value.lower()), s.value)
                              for n, s in view.items()], seen_at, source)


def record_health(db: StateDB, rec: ClusterRecord, findings: Sequence[tuple[int, str, str]],
                  seen_at: float, source: str) -> None:
    """Store health reports: (rank, ok | warn | fail, what was found) per node."""
    ids = {n.rank: n.node_id for n in db.get_nodes(rec.name)}
    _write(db, rec, "health", [(ids[rank], status, detail) for rank, status, detail in findings
                               if rank in ids], seen_at, source)


def load(db: StateDB, rec: ClusterRecord) -> dict[str, dict[str, Report]]:
    """node id -> {"state": Report, "health": Report (only if recorded)} for the nodes of
    `rec`'s current incarnation that have reports (see the module docstring)."""
    rows = db.query(
        "SELECT node_id, kind, value, detail, seen_at, source, launched_at FROM node_state"
        " WHERE cluster = ?", (rec.name,))
    out: dict[str, dict[str, Report]] = {}
    for node_id, kind, value, detail, seen_at, source, launched_at in rows:
        if abs(float(launched_at) - rec.launched_at) > 1e-6:
            continue  # an earlier cluster of the same name
        if kind == "state" and float(seen_at) < rec.status_changed_at:
            continue  # the cluster's status changed since: that is newer
        out.setdefault(node_id, {})[kind] = Report(value, detail, float(seen_at), source)
    return out


def of_cluster(rec: ClusterRecord) -> Report:
    """A node's state when nothing newer than the cluster's status was reported."""
    return Report(FROM_CLUSTER.get(rec.status, rec.status.value.lower()), rec.status.value,
                  None, "cluster status")
