"""`launcher status NAME --nodes`: each node's IPs, its state as its cloud last reported
it, its last health finding, and when and by whom each was reported; the same figures
as the dashboard's node table (`launcher.api.cluster_nodes`), in --json too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.clouds.base import NodeInfo, NodeState
from launcher.state import node_state
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "250"}, cwd=REPO,
        timeout=60)


def seed_lab(name: str = "lab") -> float:
    """A two-node cluster: node 0 reported up and healthy, node 1 unreachable with a
    warning. Returns when the reports were made."""
    with StateDB() as db:
        rec = db.create_cluster(name, PlacementRecord("ssh", "lab", None, "lab-host", 2, False))
        db.set_nodes(name, [NodeInfo(0, "h1:22", "10.0.0.1", "203.0.113.7"),
                            NodeInfo(1, "h2:22", "10.0.0.2")])
        db.set_status(name, ClusterStatus.UP, "test")
        rec = db.require_cluster(name)
        now = time.time()  # after the status change (a report older than it is not shown)
        node_state.record_view(db, rec, {"h1:22": NodeState.RUNNING,
                                         "h2:22": NodeState.UNKNOWN}, now, "status --refresh")
        node_state.record_health(db, rec, [(0, "ok", "8 GPUs, NCCL ok"),
                                           (1, "warn", "GPU 3 at 91 C")], now, "health gate")
    return now


def test_status_nodes_table(launcher_home: Path) -> None:
    seed_lab()
    with StateDB() as db:  # another cluster, never reported on: its status stands in
        db.create_cluster("quiet", PlacementRecord("ssh", "lab", None, "lab-host", 1, False))
        db.set_nodes("quiet", [NodeInfo(0, "h9:22", "10.0.0.9")])
    proc = run("status", "lab", "quiet", "--nodes")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Nodes of lab:" in out and "Nodes of quiet:" in out
    lab = out.split("Nodes of lab:", 1)[1].split("Nodes of quiet:", 1)[0]
    header, first, second = [ln for ln in lab.splitlines() if ln.strip()][:3]
    assert header.split()[:5] == ["RANK", "NODE", "INTERNAL", "IP", "EXTERNAL"]
    assert first.split()[:5] == ["0", "h1:22", "10.0.0.1", "203.0.113.7", "up"]
    assert "by status --refresh" in first and "ok: 8 GPUs, NCCL ok" in first
    assert "by health gate" in first
    assert second.split()[:5] == ["1", "h2:22", "10.0.0.2", "-", "unreachable"]
    assert "warn: GPU 3 at 91 C" in second
    quiet = [ln for ln in out.split("Nodes of quiet:", 1)[1].splitlines() if ln.strip()]
    # INIT, never reported on: the cluster's status, "-" for health
    assert quiet[1].split() == ["0", "h9:22", "10.0.0.9", "-", "provisioning", "cluster",
                                "status", "-", "-"]
    # without --nodes: the cluster table alone
    assert "Nodes of" not in run("status", "lab").stdout


def test_status_nodes_json(launcher_home: Path) -> None:
    now = seed_lab()
    plain = json.loads(run("status", "--json").stdout)
    assert "nodes" not in plain[0]  # unchanged without --nodes
    proc = run("status", "--nodes", "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert {k: v for k, v in row.items() if k != "nodes"} == plain[0]
    first, second = row["nodes"]
    assert first["rank"] == 0 and first["node_id"] == "h1:22"
    assert first["internal_ip"] == "10.0.0.1" and first["external_ip"] == "203.0.113.7"
    assert (first["state"], first["state_source"]) == ("up", "status --refresh")
    assert first["state_seen_at"] == now and first["health_seen_at"] == now
    assert (first["health"], first["health_detail"], first["health_source"]) == (
        "ok", "8 GPUs, NCCL ok", "health gate")
    assert (second["state"], second["health"]) == ("unreachable", "warn")


def test_status_nodes_of_a_missing_cluster(launcher_home: Path) -> None:
    seed_lab()
    proc = run("status", "nope", "--nodes")
    assert proc.returncode == 4
    assert "Cluster 'nope' does not exist" in proc.stderr and "Traceback" not in proc.stderr
