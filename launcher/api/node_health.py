"""`launcher health CLUSTER` and `launcher top CLUSTER` (docs/health.md).

- `check`: the node health checks now, on every node of an UP cluster (the same checker
  and expectation as the gate before setup). Every node's report is recorded as a
  cluster event (`health-ok` / `health-warn` / `health-fail`) with its raw evidence.
- `sample`: one GPU utilization/memory/power/throttling sample per node.
- `watch_history`: what the agent's health watch kept for a job (its findings, events and
  per-node metric rows), for a postmortem.

A `check` that finds every node passing also clears the watch's DEGRADED finding (the
agent's and `status`'s).

Blocking; parallel over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
        if nodes and all(n.status != "fail" for n in nodes):
            _clear_degraded(db, cluster_name)
    return nodes


def _clear_degraded(db: StateDB, cluster_name: str) -> None:
    """Every node passed: forget the watch's finding (agent and status). Best effort."""
    from launcher.api import health_store
    from launcher.api.clusters import HEALTH_PREFIX
    from launcher.errors import LauncherError
    from launcher.runtime.execution import agent_client

    client = None
    try:
        client = agent_client(db.cluster_info(cluster_name))
        cleared = client.health(clear=True).get("degraded") is None
    except LauncherError:
        return
    finally:
        if client is not None:
            client.head.close()
    rec = db.require_cluster(cluster_name)
    stored = health_store.load(db, [rec]).get(cluster_name)
    if cleared and stored is not None and stored.reason.startswith(HEALTH_PREFIX):
        health_store.clear(db, cluster_name)


@dataclass(frozen=True)
class WatchHistory:
    """What the agent's health watch kept for one job (docs/health.md): `degraded` is the
    cluster's standing finding (None: healthy), `finding` the job's failing one, `events`
    its health events ({ts, kind, detail}), `rows` its per-node metric rows ({t, rank,
    samples, gpus, util, util_min, mem_used, power, temp, throttle, ecc, progress,
    log_bytes}), oldest first."""

    cluster: str
    job_id: int | None
    degraded: dict[str, Any] | None
    finding: dict[str, Any] | None
    events: list[dict[str, Any]]
    rows: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "job_id": self.job_id, "degraded": self.degraded,
                "finding": self.finding, "events": self.events, "rows": self.rows}


def watch_history(cluster_name: str, job_id: int | None = None) -> WatchHistory:
    """The health watch's record of job `job_id` (default: the running or last job) on
    the cluster's head. Raises ClusterNotFoundError, ClusterNotReadyError (not UP), and
    LauncherError when the head cannot be reached."""
    from launcher.runtime.execution import agent_client

    with StateDB() as db:
        require_up(db.require_cluster(cluster_name))
        cluster = db.cluster_info(cluster_name)
    client = agent_client(cluster)
    try:
        doc = client.health(job_id, history=True)
    finally:
        client.head.close()

    def as_list(v: object) -> list[dict[str, Any]]:
        return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []

    def as_dict(v: object) -> dict[str, Any] | None:
        return v if isinstance(v, dict) else None

    job = doc.get("job_id")
    return WatchHistory(cluster_name, job if isinstance(job, int) else None,
                        as_dict(doc.get("degraded")), as_dict(doc.get("finding")),
                        as_list(doc.get("events")), as_list(doc.get("history")))


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
