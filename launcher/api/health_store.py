"""What `status --refresh` found wrong with a cluster, stored so every later `status`
shows it (as SkyPilot does), with when it was seen.

One table of the state DB (launcher/state/schema.py):
`cluster_health(cluster, launched_at, status, reason, seen_at)`. A row belongs to one
incarnation of the cluster (its `launched_at`): a cluster relaunched under the same
name never inherits it. The next refresh that finds the cluster healthy removes it.
Stored statuses today: DEGRADED (some node does not answer, not confirmed lost).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.state.db import ClusterRecord, StateDB


@dataclass(frozen=True)
class Health:
    status: str
    reason: str
    seen_at: float  # epoch seconds of the refresh that saw it


def record(db: StateDB, rec: ClusterRecord, status: str, reason: str, seen_at: float) -> None:
    """Store what a refresh saw for `rec` (replacing any earlier finding)."""
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO cluster_health (cluster, launched_at, status, reason, seen_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (cluster) DO UPDATE SET"
            " launched_at = excluded.launched_at, status = excluded.status,"
            " reason = excluded.reason, seen_at = excluded.seen_at", (rec.name, rec.launched_at, status, reason, seen_at))


def clear(db: StateDB, cluster: str) -> None:
    """A refresh found `cluster` healthy (or it is gone): forget the finding. Idempotent."""
    with db.transaction() as conn:
        conn.execute("DELETE FROM cluster_health WHERE cluster = ?", (cluster,))


def load(db: StateDB, clusters: list[ClusterRecord]) -> dict[str, Health]:
    """The stored finding of each cluster in `clusters` that has one for its current
    incarnation."""
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT cluster, launched_at, status, reason, seen_at FROM cluster_health").fetchall()
    launched = {c.name: c.launched_at for c in clusters}
    return {
        name: Health(status, reason, seen_at)
        for name, at, status, reason, seen_at in rows
        if name in launched and abs(launched[name] - at) < 1e-6
    }
