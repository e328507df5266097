"""The node health gate (docs/health.md): the stdlib checker
(launcher/runtime/health_checks.py) copied to every node and run there in parallel,
before setup; also what `launcher health CLUSTER` runs.

- `expectation(cluster, rec, task)`: what each node must show (GPUs paid for, model,
  NVLink per the catalog, InfiniBand when the task asks for it, the DCGM level).
- `check_nodes(cluster, runners, expect)`: one `NodeHealth` per node (rank order).
  A node that cannot run the checker (unreachable, no python3, garbage output) is a
  failed node with the reason, never an exception.
- `gate(db, cluster, runners, task, on_event)`: the gate of a launch: records every
  node's findings as cluster events, raises `HealthGateError` (naming the first
  failing node and its finding) when a node fails and `on_failure` is `stop`.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.clouds.base import ClusterInfo
    from launcher.runtime.runner import CommandRunner
    from launcher.state.db import ClusterRecord, StateDB
    from launcher.task.health import HealthSpec
    from launcher.task.model import Task

REMOTE_SCRIPT = "~/.launcher-health/health_checks.py"
_NODE_SCRIPT = '"$HOME"/.launcher-health/health_checks.py'  # the same, as a shell word
CHECK_TIMEOUT_S = {"quick": 180.0, "dcgm-1": 300.0, "dcgm-2": 900.0}
EVIDENCE_IN_EVENT = 5  # raw lines per finding kept in the event
OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # ok | warn | fail
    summary: str
    evidence: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class NodeHealth:
    """One node's report. `error` set: the checker itself could not run there."""

    rank: int
    host: str
    status: str
    checks: tuple[CheckResult, ...]
    seconds: float
    error: str | None = None

    def findings(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status != OK]

    def headline(self) -> str:
        """'node 1 (10.0.0.2): gpus: 7 GPU(s) visible, 8 paid for' (the worst finding)."""
        if self.error:
            return f"node {self.rank} ({self.host}): {self.error}"
        worst = [c for c in self.checks if c.status == self.status] or list(self.checks)
        what = f"{worst[0].name}: {worst[0].summary}" if worst else "no checks ran"
        return f"node {self.rank} ({self.host}): {what}"

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "status": self.status,
                "seconds": self.seconds, "error": self.error,
                "checks": [{"name": c.name, "status": c.status, "summary": c.summary,
                            "evidence": list(c.evidence), "seconds": c.seconds}
                           for c in self.checks]}


class HealthGateError(LauncherError):
    """A node failed the health gate. `cluster`, `rank`, `finding`, `nodes` (all reports)."""

    exit_code = 1

    def __init__(self, cluster: str, failed: NodeHealth, nodes: Sequence[NodeHealth]) -> None:
        evidence = [line for c in failed.findings() for line in c.evidence[:3]]
        shown = "".join(f"\n    {line}" for line in evidence)
        super().__init__(
            f"Health gate failed on cluster {cluster!r}, {failed.headline()}.{shown}\n"
            f"Setup was not run. See `launcher health {cluster}`; replace the node with "
            f"`launcher down {cluster}` and a new launch, or set "
            "`resources.health.on_failure: warn` to go on anyway (docs/health.md)."
        )
        self.cluster = cluster
        self.rank = failed.rank
        self.finding = failed.headline()
        self.nodes = list(nodes)


def effective_health(task: Task | None) -> HealthSpec:
    from launcher.task.health import DEFAULT_HEALTH

    return task.health if task is not None and task.health is not None else DEFAULT_HEALTH


_NOT_NVIDIA = re.compile(r"(tpu-|gaudi|inferentia|trainium|radeon|mi\d)", re.IGNORECASE)


def is_nvidia(accelerator: str | None) -> bool:
    """Whether a catalog accelerator name is an NVIDIA GPU (not a TPU, Trainium,
    Inferentia, Gaudi or AMD part: those have no nvidia-smi to check with)."""
    return bool(accelerator) and not _NOT_NVIDIA.match(accelerator or "")


def expectation(cluster: ClusterInfo, rec: ClusterRecord | None, task: Task | None,
                gate: str = "quick") -> dict[str, Any]:
    """The checker's expectation for every node of `cluster` (health_checks' doc). Only
    NVIDIA GPUs are expected: other accelerators are not checked."""
    nvidia = rec is not None and is_nvidia(rec.accelerator)
    gpus = rec.accelerator_count if rec is not None and nvidia else 0.0
    expect: dict[str, Any] = {"gate": gate, "gpus": gpus,
                              "model": rec.accelerator if rec is not None and nvidia else None,
                              "simulated": cluster.cloud == "local"}
    if gpus and rec is not None:
        expect["nvlink"] = _catalog_nvlink(cluster.cloud, rec.instance_type)
    fabric = task.resources.base.network.fabric if task and task.resources.base.network else None
    if fabric in ("rdma", "best") and rec is not None:  # whichever the instance type has
        fabric = catalog_fabric(cluster.cloud, rec.instance_type)[0]
    if len(cluster.nodes) > 1 and fabric == "infiniband":
        expect["ib"] = 1
    if len(cluster.nodes) > 1 and fabric == "efa":
        expect["efa"] = 1
    return expect


def catalog_fabric(cloud: str, instance_type: str) -> tuple[str | None, float | None]:
    """(fabric, Gb/s per node) of the instance type per the catalog; (None, None) unknown."""
    try:
        from launcher.catalog.query import snapshot_fabrics

        return snapshot_fabrics(cloud).get(instance_type, (None, None))
    except Exception:  # a damaged catalog must not block a launch: the fabric goes unchecked
        return None, None


def _catalog_nvlink(cloud: str, instance_type: str) -> bool:
    """NVLink per the catalog's sources; unknown counts as no (nothing is guessed)."""
    try:
        from launcher.catalog.query import snapshot_nvlink

        return snapshot_nvlink(cloud).get(instance_type, False)
    except Exception:  # a damaged catalog must not block a launch: NVLink goes unchecked
        return False


def check_nodes(cluster: ClusterInfo, runners: Sequence[CommandRunner],
                expect: dict[str, Any]) -> list[NodeHealth]:
    """Copy the checker to every node and run it there, in parallel; rank order."""
    from importlib import resources

    from launcher.runtime.execution import parallel

    source = resources.files("launcher.runtime").joinpath("health_checks.py").read_text("utf-8")
    timeout = CHECK_TIMEOUT_S.get(str(expect.get("gate")), CHECK_TIMEOUT_S["quick"])
    command = f"python3 {_NODE_SCRIPT} {shlex.quote(json.dumps(expect))}"

    def one(runner: CommandRunner) -> NodeHealth:
        node = runner.node
        host = node.external_ip or node.internal_ip
        try:
            runner.put_text(source, REMOTE_SCRIPT, mode=0o600)
            res = runner.run(command, timeout=timeout)
        except LauncherError as exc:
            return NodeHealth(node.rank, host, FAIL, (), 0.0, error=f"checks could not run: {exc}")
        return parse_report(node.rank, host, res.returncode, res.stdout, res.stderr)

    return parallel(one, list(runners))


def parse_report(rank: int, host: str, returncode: int, stdout: str, stderr: str) -> NodeHealth:
    """The checker's JSON (the last line of stdout) as a NodeHealth; garbage is a failure."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except ValueError:
        doc = None
    if returncode != 0 or not isinstance(doc, dict) or "checks" not in doc:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return NodeHealth(rank, host, FAIL, (), 0.0,
                          error=f"health checker failed (exit {returncode}): {' / '.join(tail)}")
    checks = tuple(
        CheckResult(str(c["name"]), str(c["status"]), str(c["summary"]),
                    tuple(str(e) for e in c.get("evidence", [])), float(c.get("seconds", 0)))
        for c in doc["checks"]
    )
    return NodeHealth(rank, host, str(doc["status"]), checks, float(doc.get("seconds", 0)))


def event_text(node: NodeHealth) -> str:
    """One event per node: status, seconds, every finding with its first raw lines."""
    head = f"node {node.rank} ({node.host}): {node.status} in {node.seconds:.1f}s"
    if node.error:
        return f"{head}: {node.error}"
    parts = [f"{c.name} {c.status}: {c.summary}"
             + "".join(f" | {e}" for e in c.evidence[:EVIDENCE_IN_EVENT]) for c in node.findings()]
    return head + ("; " + "; ".join(parts) if parts else "")


def record(db: StateDB, cluster_name: str, nodes: Sequence[NodeHealth], source: str) -> None:
    """Each node's report as a cluster event (`health-<status>`, with its evidence) and as
    the node's last health finding (launcher/state/node_state.py)."""
    from launcher.state import node_state

    for node in nodes:
        db.add_event(cluster_name, f"health-{node.status}", event_text(node))
    rec = db.get_cluster(cluster_name)
    if rec is not None:
        node_state.record_health(db, rec, [(n.rank, n.status, n.headline()) for n in nodes],
                                 time.time(), source)


def gate(db: StateDB, cluster: ClusterInfo, runners: Sequence[CommandRunner], task: Task | None,
         on_event: Callable[[str], None]) -> list[NodeHealth]:
    """The health gate of a launch (skipped, returning [], when `gate: off`). Blocking."""
    spec = effective_health(task)
    if spec.gate == "off":
        return []
    on_event(f"Checking node health ({spec.gate}) on {len(runners)} node(s)")
    rec = db.get_cluster(cluster.cluster_name)
    nodes = check_nodes(cluster, runners, expectation(cluster, rec, task, spec.gate))
    if (spec.burn_in == "nccl" and len(runners) > 1
            and not any(n.status == FAIL for n in nodes)):
        nodes = _burn_in(db, cluster, runners[0], rec, nodes, on_event)
    record(db, cluster.cluster_name, nodes, "health gate")
    failed = [n for n in nodes if n.status == FAIL]
    for node in nodes:
        if node.status != OK:
            on_event(f"Health {node.status}: {node.headline()}")
    if failed and spec.gate_stops:
        raise HealthGateError(cluster.cluster_name, failed[0], nodes)
    return nodes


def _burn_in(db: StateDB, cluster: ClusterInfo, head: CommandRunner, rec: ClusterRecord | None,
             nodes: list[NodeHealth], on_event: Callable[[str], None]) -> list[NodeHealth]:
    """Run the NCCL burn-in (burn_in.py); its finding joins the slow nodes' reports (a
    failure names them; a skip or warning is recorded as a cluster event)."""
    import dataclasses

    from launcher.provisioning.burn_in import run_burn_in

    gpus = int(rec.accelerator_count) if rec is not None and is_nvidia(rec.accelerator) else 1
    fabric_gbps = catalog_fabric(cluster.cloud, rec.instance_type)[1] if rec else None
    result = run_burn_in(cluster, head, gpus, fabric_gbps, on_event)
    db.add_event(cluster.cluster_name, f"health-burn-in-{result.status}",
                 result.summary + "".join(f" | {e}" for e in result.evidence[:8]))
    if result.status != FAIL:
        if result.status == WARN:
            on_event(f"Health warn: {result.summary}")
        return nodes
    check = CheckResult("nccl", FAIL, result.summary, result.evidence, 0.0)
    return [dataclasses.replace(n, status=FAIL, checks=(*n.checks, check))
            if n.rank in result.slow_ranks or not result.slow_ranks else n for n in nodes]


# ------------------------------------------------------------------ samples (`launcher top`)


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    util: float | None  # percent
    mem_used: float | None  # MiB
    mem_total: float | None  # MiB
    power: float | None  # W
    temp: float | None  # C
    throttle: tuple[str, ...]  # active slowdown reasons ("power cap", "hw thermal", ...)


@dataclass(frozen=True)
class NodeSample:
    """One node's GPUs at one moment; `error` says why there is no sample."""

    rank: int
    host: str
    gpus: tuple[GpuSample, ...]
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "error": self.error,
                "gpus": [{"index": g.index, "name": g.name, "util": g.util,
                          "mem_used": g.mem_used, "mem_total": g.mem_total, "power": g.power,
                          "temp": g.temp, "throttle": list(g.throttle)} for g in self.gpus]}


SAMPLE_TIMEOUT_S = 30.0


def sample_nodes(runners: Sequence[CommandRunner]) -> list[NodeSample]:
    """One GPU sample per node (the checker's `--sample`), in parallel; rank order.
    A node that cannot be sampled has `error` set, never an exception."""
    from importlib import resources

    from launcher.runtime.execution import parallel

    source = resources.files("launcher.runtime").joinpath("health_checks.py").read_text("utf-8")

    def one(runner: CommandRunner) -> NodeSample:
        node = runner.node
        host = node.external_ip or node.internal_ip
        try:
            runner.put_text(source, REMOTE_SCRIPT, mode=0o600)
            res = runner.run(f"python3 {_NODE_SCRIPT} --sample", timeout=SAMPLE_TIMEOUT_S)
        except LauncherError as exc:
            return NodeSample(node.rank, host, (), error=f"not reachable: {exc}")
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        try:
            doc = json.loads(lines[-1]) if lines else None
        except ValueError:
            doc = None
        if res.returncode != 0 or not isinstance(doc, dict):
            return NodeSample(node.rank, host, (), error=f"sampler failed (exit {res.returncode})")
        gpus = tuple(
            GpuSample(int(g.get("index") or 0), str(g.get("name", "")), g.get("util"),
                      g.get("mem_used"), g.get("mem_total"), g.get("power"), g.get("temp"),
                      tuple(str(t) for t in g.get("throttle", [])))
            for g in doc.get("gpus", [])
        )
        return NodeSample(node.rank, host, gpus, error=doc.get("error") or None)

    return parallel(one, list(runners))
