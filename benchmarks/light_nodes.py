"""Light local nodes for the controller scale benchmark: local-cloud clusters without a
head-node agent, so thousands fit on a small machine.

`LightNodeOps` is a `ClusterOps` whose clusters are real local-cloud clusters
(`LocalCloud.provision` writes their `machines.json` and node directories;
`LocalCloud.preempt` takes their nodes away; the controller reads them through the
batched `cloud_views` -> `LocalCloud.query_many`, as it does for any local cluster), but
whose "job" is a record in the head node's directory: it runs for `duration_s` from its
submission and then succeeds, unless its node was lost first (the head's record then
answers nothing, as a dead node's agent would not). What it leaves out is what each
cluster's agent and setup cost, which is not the controller's.

Everything above the ClusterOps seam - the controller's loop, drivers, watch, poller,
launch slots, recovery and store - is the same code the daemon runs.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence

from launcher.clouds.base import NodeState, ProvisionRequest, query_many
from launcher.clouds.local import LocalCloud
from launcher.jobs.ops_interface import (
    AttemptLaunch,
    JobRun,
    LaunchAbortedError,
    LaunchRequest,
    Notice,
    Placed,
    RunState,
    TransientOpsError,
)
from launcher.runtime.local_runner import PREEMPTED_MARKER

RECORD = "light-job.json"  # the head node's job record: {"started": t, "duration": s}
CANCELLED = "light-job.cancelled"


class LightNodeOps:
    """A ClusterOps over agentless local-cloud clusters (see the module docstring)."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.cloud = LocalCloud()

    @staticmethod
    def _launch(cluster: str) -> AttemptLaunch:
        return AttemptLaunch(
            cluster_name=cluster, cloud="local", region="local", zone=None,
            instance_type="local", num_nodes=1, use_spot=True, node_price=0.0,
            cluster_job_id=1, node_ids=(f"{cluster}-0",), checkpoint_dir=None)

    def provision_and_start(self, req: LaunchRequest) -> AttemptLaunch:
        info = self.cloud.provision(ProvisionRequest(
            cluster_name=req.cluster_name, cloud="local", region="local", zone=None,
            instance_type="local", num_nodes=1, use_spot=True))
        if req.on_provisioned is not None:
            req.on_provisioned(Placed("local", "local", None, "local", 1, True, 0.0))
        if req.before_run is not None and not req.before_run():
            raise LaunchAbortedError("the managed job was cancelled during its launch")
        record = {"started": time.time(), "duration": self.duration_s}
        (self.cloud.node_dir(info.cluster_name, 0) / RECORD).write_text(json.dumps(record))
        return self._launch(req.cluster_name)

    def adopt(self, cluster_name: str) -> AttemptLaunch | None:
        view = self.cloud.query(cluster_name)
        if not view or set(view.values()) != {NodeState.RUNNING}:
            return None
        if not (self.cloud.node_dir(cluster_name, 0) / RECORD).exists():
            return None
        return self._launch(cluster_name)

    def job_status(self, cluster_name: str, cluster_job_id: int) -> JobRun:
        view = self.cloud.query(cluster_name)
        if not view or set(view.values()) != {NodeState.RUNNING}:
            raise TransientOpsError(f"{cluster_name}: head node unreachable")
        head = self.cloud.node_dir(cluster_name, 0)
        try:
            record = json.loads((head / RECORD).read_text())
        except (OSError, ValueError):
            raise TransientOpsError(f"{cluster_name}: no job record") from None
        if (head / CANCELLED).exists():
            return JobRun(RunState.CANCELLED)
        end = float(record["started"]) + float(record["duration"])
        if time.time() < end:
            return JobRun(RunState.RUNNING)
        return JobRun(RunState.SUCCEEDED, 0, ended_at=end)

    def cloud_view(self, cluster_name: str) -> Mapping[str, NodeState]:
        return self.cloud.query(cluster_name)

    def cloud_views(self, cloud: str | None, region: str | None,
                    cluster_names: Sequence[str]) -> dict[str, Mapping[str, NodeState]]:
        try:
            return dict(query_many(self.cloud, cluster_names, region))
        except Exception as exc:
            raise TransientOpsError(f"local query failed: {exc}") from None

    def notices(self, cluster_name: str) -> list[Notice]:
        return []

    def records_survive_loss(self, cluster_name: str) -> bool:
        return False  # the record "went with" the node: no last look at a dead head

    def lost_since(self, cluster_name: str) -> float | None:
        marker = self.cloud.node_dir(cluster_name, 0) / PREEMPTED_MARKER
        try:
            return float(marker.read_text().strip())
        except (OSError, ValueError):
            return None

    def fetch_logs(self, cluster_name: str, cluster_job_id: int,
                   on_line: Callable[[str], None], follow: bool = False) -> None:
        on_line("(rank 0) light node: no output")

    def fetch_log_since(self, cluster_name: str, cluster_job_id: int,
                        offsets: Mapping[int, int],
                        on_line: Callable[[str], None]) -> dict[int, int]:
        return {0: offsets.get(0, 0)}

    def cancel_job(self, cluster_name: str, cluster_job_id: int) -> None:
        with contextlib.suppress(OSError):
            (self.cloud.node_dir(cluster_name, 0) / CANCELLED).write_text("")

    def teardown(self, cluster_name: str) -> None:
        self.cloud.terminate(cluster_name)

    def abort_launch(self, cluster_name: str) -> None:
        self.cloud.terminate(cluster_name)

    def can_replace_nodes(self, cluster_name: str) -> bool:
        return False

    def replace_nodes(self, cluster_name: str, lost_node_ids: tuple[str, ...],
                      req: LaunchRequest) -> AttemptLaunch | None:
        return None
