"""An in-memory ClusterOps for unit tests of the controller's logic.

It models what the controller relies on: placements tried in order (respecting
the tiers' blocked sets and region filter), per-zone capacity, a job that runs
for a set time and exits with a set code, preemption (with or without notice),
transient query failures, and which clusters exist - so tests can assert that
no cluster is duplicated or leaked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from launcher.clouds.base import NodeState
from launcher.jobs.ops_interface import (
    AttemptLaunch,
    HealthAlarm,
    JobRun,
    LaunchAbortedError,
    LaunchRequest,
    NoCapacityError,
    Notice,
    Placed,
    RateLimitedOpsError,
    RunState,
    SetupFailedError,
    TransientOpsError,
    UnhealthyNodeError,
)


@dataclass(frozen=True)
class Place:
    cloud: str
    region: str
    zone: str
    price: float = 1.0


@dataclass
class Behaviour:
    """How the job behaves on one attempt."""

    duration_s: float = 0.3
    exit_code: int = 0
    setup_fails: bool = False
    unhealthy_rank: int | None = None  # this node fails the health gate before setup
    watch_fails_rank: int | None = None  # the health watch fails this node mid-run
    watch_fails_after_s: float = 0.05


@dataclass
class FakeCluster:
    name: str
    place: Place
    num_nodes: int
    nodes: dict[str, NodeState]
    started: float
    behaviour: Behaviour
    job_id: int = 1
    cancelled: bool = False
    notices: list[Notice] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    preempted_at: float | None = None  # the "cloud's" record of the last preemption
    market: str | None = None  # the LaunchRequest's forced market (DEADLINE jobs)


class FakeOps:
    def __init__(self, places: list[Place], behaviours: Callable[[int], Behaviour] | None = None,
                 replace_supported: bool = False) -> None:
        self.places = places
        self.capacity: dict[str, bool] = {p.zone: True for p in places}
        self.behaviours = behaviours or (lambda n: Behaviour())
        self.replace_supported = replace_supported
        self.clusters: dict[str, FakeCluster] = {}
        self.history: list[tuple[str, Place]] = []  # every provision
        self.excluded: list[tuple[str, tuple[str, ...], str]] = []  # exclude_nodes calls
        self.teardowns: list[str] = []
        self.max_live = 0  # most clusters alive at once
        self.query_failures = 0  # next N cloud_view(s) calls raise TransientOpsError
        self.view_calls = 0  # cloud_view calls (one cluster each)
        self.batch_calls: list[tuple[str | None, str | None, int]] = []  # cloud_views calls
        self.status_failures = 0  # next N job_status calls raise TransientOpsError
        self.provision_delay_s = 0.0
        self.throttled_launches = 0  # next N provisions: the cloud answers "rate limited"
        self.provision_times: list[float] = []  # when each provision call began
        self.provisioning = 0  # provision calls in flight now ...
        self.peak_provisioning = 0  # ... and at most
        self.teardown_delay_s = 0.0
        # A dead head does not answer: job_status on a lost head (whose record went with
        # it) takes this long to fail ("No route to host"); status_delay_s: every call.
        self.dead_head_s = 0.0
        self.status_delay_s = 0.0
        self.log_syncs = 0  # fetch_log_since calls  # how long a teardown takes (the cloud's terminate)
        # Bumped by a test to "kill -9" the controller: teardowns in flight then never
        # complete (they died with their process).
        self.teardown_generation = 0
        self.replace_delay_s = 0.0  # how long an in-place replacement takes
        self.replacing = threading.Event()  # set once a replacement has started
        self.replacements = 0  # in-place replacements that restarted the gang
        self.on_setup: Callable[[str], None] | None = None  # called during setup
        self.fetch_failures = 0  # next N fetch_logs calls break off with TransientOpsError
        self.fetch_fail_after = 1  # ... after delivering this many lines
        self.timeline: list[str] = []  # "fetch-ok C", "fetch-failed C", "teardown C" in order
        self.gang_attempt_env: list[str] = []  # LAUNCHER_ATTEMPT of every gang run started
        # The head's job record stays readable after its node was lost (the local cloud's
        # disks do); it then shows the run as it was when the node went.
        self.records_outlive_nodes = False
        self.spot_capacity = True  # False: every spot launch (market "spot") is refused
        self.markets: list[tuple[str, str | None]] = []  # (cluster, market) of every provision
        # cluster -> why its nodes ended for good (`final_loss`: a Slurm time limit)
        self.final_losses: dict[str, str] = {}
        self._launches = 0
        self.lock = threading.RLock()

    # ---- test controls ------------------------------------------------------------------

    def preempt(self, cluster: str, node_index: int | None = None,
                notice_s: float | None = None) -> None:
        with self.lock:
            c = self.clusters[cluster]
            ids = list(c.nodes)
            targets = ids if node_index is None else [ids[node_index]]
            if notice_s is not None:
                for n in targets:
                    c.notices.append(Notice(n, time.time(), notice_s))
                return
            for n in targets:
                c.nodes[n] = NodeState.PREEMPTED
            c.preempted_at = time.time()

    def live(self) -> list[str]:
        with self.lock:
            return sorted(self.clusters)

    # ---- ClusterOps ---------------------------------------------------------------------

    def provision_and_start(self, req: LaunchRequest) -> AttemptLaunch:
        with self.lock:
            self.provision_times.append(time.monotonic())
            self.provisioning += 1
            self.peak_provisioning = max(self.peak_provisioning, self.provisioning)
        try:
            if self.provision_delay_s:
                time.sleep(self.provision_delay_s)
        finally:
            with self.lock:
                self.provisioning -= 1
        with self.lock:
            if self.throttled_launches > 0:
                self.throttled_launches -= 1
                raise RateLimitedOpsError("RequestLimitExceeded (injected)", self.places[0].cloud)
            if req.cluster_name in self.clusters:
                raise AssertionError(f"duplicate provision of {req.cluster_name}")
            if req.market == "spot" and not self.spot_capacity:
                raise NoCapacityError("no spot capacity in any placement (injected)")
            chosen = None
            for tier in req.tiers:
                for p in self.places:
                    b = tier.blocked
                    if (p.cloud in b.clouds or (p.cloud, p.region) in b.regions
                            or (p.cloud, p.region, p.zone) in b.zones):
                        continue
                    if tier.only_region and (p.cloud, p.region) != tier.only_region:
                        continue
                    if not self.capacity.get(p.zone, False):
                        continue
                    chosen = p
                    break
                if chosen:
                    break
            if chosen is None:
                raise NoCapacityError("no capacity anywhere")
            self._launches += 1
            behaviour = self.behaviours(self._launches)
            n = getattr(req.task, "num_nodes", 1)
            c = FakeCluster(req.cluster_name, chosen, n,
                            {f"{req.cluster_name}-{i}": NodeState.RUNNING for i in range(n)},
                            time.time(), behaviour, market=req.market)
            self.clusters[req.cluster_name] = c
            self.history.append((req.cluster_name, chosen))
            self.markets.append((req.cluster_name, req.market))
            self.max_live = max(self.max_live, len(self.clusters))
        if req.on_provisioned:
            req.on_provisioned(Placed(chosen.cloud, chosen.region, chosen.zone, "fake.1", n,
                                      True, chosen.price))
        if req.on_output:
            req.on_output("setup line")
        if self.on_setup:
            self.on_setup(req.cluster_name)
        if behaviour.unhealthy_rank is not None:
            rank = behaviour.unhealthy_rank
            raise UnhealthyNodeError(f"Health gate failed on node {rank}", rank,
                                     f"node {rank} (10.0.0.{rank}): gpus: 7 GPU(s) visible, "
                                     "8 paid for")
        if behaviour.setup_fails:
            raise SetupFailedError("setup exited 1 on rank 0")
        with self.lock:
            if any(s != NodeState.RUNNING for s in c.nodes.values()):
                raise SetupFailedError("setup killed")
        if req.before_run is not None and not req.before_run():
            raise LaunchAbortedError("cancelled")
        with self.lock:
            c.started = time.time()
            self.gang_attempt_env.append(req.env_extra.get("LAUNCHER_ATTEMPT", "?"))
        return AttemptLaunch(req.cluster_name, chosen.cloud, chosen.region, chosen.zone, "fake.1",
                             n, req.market != "on_demand", chosen.price, c.job_id, tuple(c.nodes),
                             "/ckpt")

    def adopt(self, cluster_name: str) -> AttemptLaunch | None:
        with self.lock:
            c = self.clusters.get(cluster_name)
            if c is None or c.started == 0:
                return None
            p = c.place
            return AttemptLaunch(cluster_name, p.cloud, p.region, p.zone, "fake.1", c.num_nodes,
                                 True, p.price, c.job_id, tuple(c.nodes), "/ckpt")

    def job_status(self, cluster_name: str, cluster_job_id: int) -> JobRun:
        with self.lock:
            c = self.clusters.get(cluster_name)
            dead = c is not None and not self.records_outlive_nodes and any(
                s != NodeState.RUNNING for s in c.nodes.values())
        delay = self.status_delay_s + (self.dead_head_s if dead else 0.0)
        if delay:
            time.sleep(delay)
        with self.lock:
            if self.status_failures > 0:
                self.status_failures -= 1
                raise TransientOpsError("head unreachable (injected)")
            c = self.clusters.get(cluster_name)
            lost = c is not None and any(s != NodeState.RUNNING for s in c.nodes.values())
            if c is None or (lost and not self.records_outlive_nodes):
                raise TransientOpsError("cannot reach head")
            if c.job_id != cluster_job_id:
                return JobRun(RunState.FAILED, 137, reason="superseded")
            if c.cancelled:
                return JobRun(RunState.CANCELLED)
            if c.notices and time.time() - c.notices[0].received_at > 0.05:
                return JobRun(RunState.FAILED, 143, 0, "SIGTERM")
            b = c.behaviour
            if (b.watch_fails_rank is not None
                    and time.time() >= c.started + b.watch_fails_after_s):
                rank = b.watch_fails_rank
                alarm = HealthAlarm(list(c.nodes)[rank], rank, "Xid 79 (GPU has fallen off "
                                    "the bus)", c.started + b.watch_fails_after_s,
                                    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has "
                                     "fallen off the bus.",))
                return JobRun(RunState.FAILED, 143, rank, "health: node 1: Xid 79",
                              health=alarm)
            end = c.started + c.behaviour.duration_s
            now = c.preempted_at if lost and c.preempted_at is not None else time.time()
            if now < end:  # still running (or was, when its node went with the agent)
                return JobRun(RunState.RUNNING)
            b = c.behaviour
            if b.exit_code == 0:
                return JobRun(RunState.SUCCEEDED, 0, ended_at=end)
            return JobRun(RunState.FAILED, b.exit_code, 0, "user code", ended_at=end)

    def cloud_views(self, cloud: str | None, region: str | None,
                    cluster_names: Sequence[str]) -> dict[str, Mapping[str, NodeState]]:
        """One "cloud query" for many clusters; a cluster elsewhere than (cloud, region) is
        not in the answer (as a real regional query would not list it)."""
        with self.lock:
            self.batch_calls.append((cloud, region, len(cluster_names)))
            if self.query_failures > 0:
                self.query_failures -= 1
                raise TransientOpsError("cloud API timeout (injected)")
            out: dict[str, Mapping[str, NodeState]] = {}
            for name in cluster_names:
                c = self.clusters.get(name)
                if c is None:
                    out[name] = {}
                elif cloud is None or (c.place.cloud, c.place.region) == (cloud, region):
                    out[name] = dict(c.nodes)
            return out

    def cloud_view(self, cluster_name: str) -> Mapping[str, NodeState]:
        with self.lock:
            self.view_calls += 1
            if self.query_failures > 0:
                self.query_failures -= 1
                raise TransientOpsError("cloud API timeout (injected)")
            c = self.clusters.get(cluster_name)
            return {} if c is None else dict(c.nodes)

    def notices(self, cluster_name: str) -> list[Notice]:
        with self.lock:
            c = self.clusters.get(cluster_name)
            return [] if c is None else list(c.notices)

    def records_survive_loss(self, cluster_name: str) -> bool:
        return self.records_outlive_nodes

    def final_loss(self, cluster_name: str) -> str | None:
        with self.lock:
            return self.final_losses.get(cluster_name)

    def lost_since(self, cluster_name: str) -> float | None:
        with self.lock:
            c = self.clusters.get(cluster_name)
            return None if c is None else c.preempted_at

    def fetch_logs(self, cluster_name: str, cluster_job_id: int,
                   on_line: Callable[[str], None], follow: bool = False) -> None:
        with self.lock:
            c = self.clusters.get(cluster_name)
            if c is None:
                raise TransientOpsError("gone")
            lines = [f"(rank 0) ran on {c.place.zone}", "(rank 0) working",
                     f"(rank 0) done (gang run {c.job_id})"]
            fail = self.fetch_failures > 0
            if fail:
                self.fetch_failures -= 1
        for line in lines[:self.fetch_fail_after] if fail else lines:
            on_line(line)
        with self.lock:
            self.timeline.append(f"fetch-{'failed' if fail else 'ok'} {cluster_name}")
        if fail:
            raise TransientOpsError(f"{cluster_name}: agent `logs` failed (exit -9) (injected)")

    def fetch_log_since(self, cluster_name: str, cluster_job_id: int,
                        offsets: Mapping[int, int],
                        on_line: Callable[[str], None]) -> dict[int, int]:
        """Rank 0's "log" is `logs` (one entry per line; the offset counts entries).
        A lost head whose records went with it answers after `dead_head_s`, with an error."""
        with self.lock:
            c = self.clusters.get(cluster_name)
            dead = c is None or (not self.records_outlive_nodes and any(
                s != NodeState.RUNNING for s in c.nodes.values()))
            lines = [] if c is None else list(c.logs)
            self.log_syncs += 1
        if dead:
            time.sleep(self.dead_head_s)
            raise TransientOpsError(f"{cluster_name}: no route to host (injected)")
        start = offsets.get(0, 0)
        for line in lines[start:]:
            on_line(f"(rank 0) {line}")
        return {0: len(lines)}

    def cancel_job(self, cluster_name: str, cluster_job_id: int) -> None:
        with self.lock:
            c = self.clusters.get(cluster_name)
            if c is not None:
                c.cancelled = True

    def teardown(self, cluster_name: str) -> None:
        generation = self.teardown_generation
        if self.teardown_delay_s:
            time.sleep(self.teardown_delay_s)
        with self.lock:
            if generation != self.teardown_generation:
                raise TransientOpsError("teardown died with its controller (injected)")
            if self.clusters.pop(cluster_name, None) is not None:
                self.teardowns.append(cluster_name)
                self.timeline.append(f"teardown {cluster_name}")

    def abort_launch(self, cluster_name: str) -> None:
        with self.lock:
            c = self.clusters.get(cluster_name)
            if c is not None:
                for n in c.nodes:
                    c.nodes[n] = NodeState.TERMINATED

    def exclude_nodes(self, cluster_name: str, node_ids: tuple[str, ...], reason: str) -> str:
        with self.lock:
            self.excluded.append((cluster_name, node_ids, reason))
        return f"{', '.join(node_ids)} excluded (fake)"

    def can_replace_nodes(self, cluster_name: str) -> bool:
        return self.replace_supported

    def replace_nodes(self, cluster_name: str, lost_node_ids: tuple[str, ...],
                      req: LaunchRequest) -> AttemptLaunch | None:
        if not self.replace_supported:
            return None
        self.replacing.set()
        deadline = time.monotonic() + self.replace_delay_s
        while time.monotonic() < deadline:  # abort_launch/teardown end it, like a real one
            with self.lock:
                c0 = self.clusters.get(cluster_name)
                if c0 is None or NodeState.TERMINATED in c0.nodes.values():
                    raise TransientOpsError(f"{cluster_name} terminated during replacement")
            time.sleep(0.01)
        if req.before_run is not None and not req.before_run():
            raise LaunchAbortedError("cancelled")
        with self.lock:
            c = self.clusters[cluster_name]
            self.replacements += 1
            for n in lost_node_ids:
                c.nodes[n] = NodeState.RUNNING
            c.job_id += 1
            c.started = time.time()
            self.gang_attempt_env.append(req.env_extra.get("LAUNCHER_ATTEMPT", "?"))
            p = c.place
            return AttemptLaunch(cluster_name, p.cloud, p.region, p.zone, "fake.1", c.num_nodes,
                                 True, p.price, c.job_id, tuple(c.nodes), "/ckpt")
