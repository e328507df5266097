"""The `slurm` cloud: a launcher cluster is one Slurm allocation on a configured cluster.

Region = the cluster's name in `slurm.clusters`, zone = the partition, instance type
= a node shape from `offers.py` (`a100x2of4`: 2 of a node's 4 a100 GPUs).

provision: one `sbatch` (`--nodes`, `--gres=gpu[:TYPE]:K`, `--time` = the time limit,
`--job-name=launcher-CLUSTER`, `--comment=launcher-cluster=CLUSTER[,limit=task]`,
`--no-requeue`, `--wait-all-nodes=1`, `--ntasks-per-node=1`, `--exclusive` when the
request takes every GPU of the node shape) whose batch script sleeps forever: it
holds the nodes until `terminate`. The job carries the cluster's name from
submission on, so `terminate` always finds it, and a retried provision adopts a job
it finds instead of submitting a second one. A request no partition can hold is an
InvalidRequestError before anything is submitted; a job still PENDING after the
cluster's `provision_timeout` is cancelled (and waited for) and raises CapacityError.

Time limit: the task's `config: {slurm: {time_limit}}`, else the cluster's
`time_limit`, in whole minutes (rounded up), is `--time`, and only partitions whose
MaxTime allows it are used: a limit no partition of the request allows is an
InvalidRequestError naming MaxTime (never silently shortened: a job cut short of the
time it asked for loses work). Without one, `--time` is the partition's MaxTime (a
warning says so; none when MaxTime is infinite: the site's DefaultTime applies). A
set limit is recorded in the comment (`,limit=task`), so `final_loss` can tell a job
that ran out of the time it asked for (final) from one a site limit ended (recovered).

Nodes are reached by `srun --overlap` steps from the login node (steps.SrunRunner);
node ids are `JOBID:HOSTNAME`, in `scontrol show hostnames` order (rank 0 = head).

query: `scontrol show job` (squeue to find it): PENDING -> PENDING; RUNNING ->
RUNNING; SUSPENDED -> STOPPED; PREEMPTED, or a job Slurm requeued (Restarts > 0),
-> PREEMPTED; NODE_FAIL, TIMEOUT, CANCELLED, COMPLETED, FAILED... -> TERMINATED
(`end_reason` says which, for messages). sacct is never needed.
"""

from __future__ import annotations

import logging
import time

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.slurm.client import CLOUD, SlurmClient
from launcher.clouds.slurm.offers import NodeShape, node_shapes, parse_instance_type
from launcher.clouds.slurm.parse import JobRecord
from launcher.config.slurm import SlurmCluster

log = logging.getLogger("launcher.clouds.slurm")

JOB_PREFIX = "launcher-"
TAG = "launcher-cluster="
# The runtime's dirs in a node's home (as launcher.clouds.ssh.NODE_RUNTIME_DIRS) and
# the file naming the allocation that set them up (`_claim_homes`).
RUNTIME_DIRS = ("~/.launcher-agent", "~/.launcher-setup")
HOME_MARK = "~/.launcher-slurm-job"
TASK_LIMIT = ",limit=task"
# The holder job's batch script: it holds the allocation until `launcher down` and, on
# the head (the batch host), hosts the head agent's daemon once launcher has installed
# it in a home this allocation claimed (`_claim_homes`; `agent` is written by the agent's
# setup, after its files): processes started here live in
# the batch step, as long as the allocation, also where proctrack/cgroup kills what a
# job step leaves behind when it ends. The agent's own commands (steps) never spawn a
# daemon (steps.SrunRunner sets LAUNCHER_AGENT_DAEMON_HOSTED); a daemon that exits
# (an agent upgrade stops it) is started again within a second.
HOLDER_SCRIPT = """#!/bin/bash
# launcher: holds the allocation until `launcher down`; hosts the head agent's daemon
a="$HOME/.launcher-agent"
while :; do
  if [ "$(cat "$HOME/.launcher-slurm-job" 2>/dev/null)" = "$SLURM_JOB_ID" ] \\
      && [ -x "$a/agent" ] && flock -n "$a/daemon.lock" true 2>/dev/null; then
    (cd "$a" && LAUNCHER_AGENT_HOME="$a" exec python3 -S agent.py daemon >>daemon.log 2>&1)
  fi
  sleep 1
done
"""  # the comment's suffix when the time limit was set, not MaxTime
_POLL_S = 0.5
_CANCEL_WAIT_S = 60.0

_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING"}
_ENDED = {"NODE_FAIL", "TIMEOUT", "CANCELLED", "COMPLETED", "FAILED", "BOOT_FAIL", "DEADLINE",
          "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED", "COMPLETING", "PREEMPTED", "STOPPED"}
_WHY = {
    "PREEMPTED": "preempted by a higher-priority job",
    "NODE_FAIL": "a node of the allocation failed",
    "TIMEOUT": "killed at its time limit",
    "CANCELLED": "cancelled",
    "COMPLETED": "the allocation ended",
    "FAILED": "the holder job failed",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "past its deadline",
    "OUT_OF_MEMORY": "out of memory",
}


def job_name(cluster: str) -> str:
    return f"{JOB_PREFIX}{cluster}"


def node_state(job: JobRecord) -> NodeState:
    """The NodeState of every node of a holder job (see the module docstring)."""
    s = job.state.split()[0].upper()
    if s == "PREEMPTED" or (job.restarts > 0 and s in _PENDING | {"RUNNING"}):
        return NodeState.PREEMPTED
    if s in _PENDING:
        return NodeState.PENDING
    if s == "RUNNING":
        return NodeState.RUNNING
    if s in ("SUSPENDED", "STOPPED"):
        return NodeState.STOPPED
    if s in _ENDED:
        return NodeState.TERMINATED
    return NodeState.UNKNOWN


def end_state(job: JobRecord) -> str:
    """The job's state word; a job still COMPLETING (its processes being killed) after
    its time limit (Reason=TimeLimit) is already TIMEOUT."""
    s = job.state.split()[0].upper()
    if s == "COMPLETING" and job.reason == "TimeLimit":
        return "TIMEOUT"
    return s


def end_reason(job: JobRecord) -> str:
    """`TIMEOUT: killed at its time limit (30 min)` — why a holder job ended."""
    s = end_state(job)
    why = _WHY.get(s, s.lower())
    if s == "TIMEOUT" and job.time_limit_min is not None:
        why += f" ({job.time_limit_min} min)"
    return f"Slurm job {job.job_id} {s}: {why}"


def tagged_cluster(comment: str) -> str | None:
    """The launcher cluster a holder job's comment names (`launcher-cluster=NAME[,...]`)."""
    if not comment.startswith(TAG):
        return None
    return comment[len(TAG):].split(",")[0] or None


def format_minutes(minutes: int) -> str:
    """90 -> '1h30m', 1440 -> '1d', 45 -> '45m'."""
    d, rest = divmod(minutes, 1440)
    h, m = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((d, "d"), (h, "h"), (m, "m")) if v) or "0m"


def _live(job: JobRecord) -> bool:
    s = job.state.split()[0].upper()
    return s in _PENDING or s in ("RUNNING", "SUSPENDED", "COMPLETING")


class SlurmCloud:
    """See the module docstring."""

    name = CLOUD

    # ---- config ----------------------------------------------------------------------

    def _cluster(self, region: str) -> SlurmCluster:
        from launcher.config.settings import load_config

        clusters = load_config().slurm.clusters
        if region not in clusters:
            known = ", ".join(sorted(clusters)) or "none configured"
            raise InvalidRequestError(
                f"no Slurm cluster '{region}' in config.yaml's slurm.clusters ({known}).",
                cloud=CLOUD, region=region)
        return clusters[region]

    def client(self, region: str) -> SlurmClient:
        """A client for the configured cluster `region` (config read afresh: cheap)."""
        return SlurmClient(self._cluster(region))

    def check(self) -> CredentialStatus:
        """Every configured cluster's login answers `sinfo --version` (>= 20.11)."""
        from launcher.config.settings import load_config
        from launcher.errors import LauncherError

        try:
            clusters = load_config().slurm.clusters
        except LauncherError as exc:
            return CredentialStatus(False, str(exc))
        if not clusters:
            return CredentialStatus(False, "no clusters in config.yaml's slurm.clusters")
        lines, ok = [], False
        for name, c in sorted(clusters.items()):
            try:
                v = SlurmClient(c).version
                ok = True
                lines.append(f"{name}: Slurm {v} (login {c.login})")
            except CloudError as exc:
                lines.append(f"{name}: sinfo does not answer: {exc}")
        return CredentialStatus(ok, "; ".join(lines))

    # ---- provision -------------------------------------------------------------------

    def time_limit(self, req: ProvisionRequest, cluster: SlurmCluster) -> int | None:
        """Minutes the allocation asks for: the task's `config.slurm.time_limit`, else the
        cluster's `time_limit`; None: the partition's MaxTime."""
        from launcher.task.config_section import apply_overrides

        limit: int | None = apply_overrides(cluster, req.settings.get("slurm", {})).time_limit
        return limit

    def _shape(self, req: ProvisionRequest, client: SlurmClient) -> tuple[NodeShape, int]:
        try:
            gtype, k, g = parse_instance_type(req.instance_type)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), cloud=CLOUD, region=req.region) from None
        cluster = client.cluster
        shapes = [s for s in node_shapes(cluster, client)
                  if (req.zone is None or s.partition.name == req.zone)
                  and s.gpu_type == gtype and s.gpus == g]
        where = f"Slurm cluster '{req.region}'" + (f" partition '{req.zone}'" if req.zone else "")
        if not shapes:
            raise InvalidRequestError(
                f"{where} has no nodes with {g} {gtype or 'untyped'} GPUs ({req.instance_type}).",
                cloud=CLOUD, region=req.region, zone=req.zone)
        fits = [s for s in shapes if s.max_nodes >= req.num_nodes]
        if not fits:
            most = max(s.max_nodes for s in shapes)
            raise InvalidRequestError(
                f"{where} can hold at most {most} node(s) of {req.instance_type} "
                f"(usable nodes, MaxNodes); {req.num_nodes} asked.",
                cloud=CLOUD, region=req.region, zone=req.zone)
        limit = self.time_limit(req, cluster)
        timed = [s for s in fits if limit is None or s.partition.max_time_min is None
                 or s.partition.max_time_min >= limit]
        if not timed:
            most = max(s.partition.max_time_min or 0 for s in fits)
            raise InvalidRequestError(
                f"{where}: time_limit {format_minutes(limit or 0)} is longer than the partition "
                f"allows (MaxTime {format_minutes(most)}); launcher does not shorten a time "
                "limit you set. Lower `time_limit` or name a partition that allows it.",
                cloud=CLOUD, region=req.region, zone=req.zone)
        return timed[0], k

    def _sbatch_args(self, req: ProvisionRequest, shape: NodeShape, k: int,
                     limit: int | None = None) -> list[str]:
        comment = f"{TAG}{req.cluster_name}{TASK_LIMIT if limit is not None else ''}"
        args = [f"--job-name={job_name(req.cluster_name)}", f"--comment={comment}",
                f"--partition={shape.partition.name}", f"--nodes={req.num_nodes}",
                "--ntasks-per-node=1", f"--cpus-per-task={shape.cpus_for(k)}", "--no-requeue",
                "--wait-all-nodes=1", "--output=/dev/null", "--error=/dev/null"]
        if k:
            args.append(f"--gres=gpu:{shape.gpu_type + ':' if shape.gpu_type else ''}{k}")
        if k and k == shape.gpus:
            args.append("--exclusive")
        if limit is not None:
            args.append(f"--time={limit}")
        elif shape.partition.max_time_min is not None:
            log.warning(
                "Slurm cluster '%s': no time_limit set; the allocation of '%s' asks for "
                "partition '%s''s MaxTime (%s) and Slurm ends it then (set "
                "slurm.clusters.%s.time_limit or the task's config.slurm.time_limit)",
                req.region, req.cluster_name, shape.partition.name,
                format_minutes(shape.partition.max_time_min), req.region)
            args.append(f"--time={shape.partition.max_time_min}")
        return args

    def _find(self, client: SlurmClient, cluster: str) -> list[JobRecord]:
        """Live holder jobs of `cluster` (name and comment both match)."""
        out = []
        for row in client.queue(job_name(cluster)):
            if tagged_cluster(row.comment) != cluster:
                continue
            job = client.job(row.job_id)
            if job is not None and _live(job):
                out.append(job)
        return out

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """See Cloud.provision and the module docstring. On any failure (a Slurm command
        that fails or hangs at any step, Ctrl-C) every live job tagged with the cluster
        is cancelled and waited for before the error is raised, so no allocation is left
        behind (an sbatch whose answer was lost included: the tag finds its job); if
        Slurm cannot be asked even then, the job stays tagged for `terminate`."""
        client = self.client(req.region)
        try:
            return self._provision(client, req)
        except BaseException:
            self._cancel_tagged(client, req.cluster_name)
            raise

    def _cancel_tagged(self, client: SlurmClient, cluster: str) -> None:
        try:
            ids = [j.job_id for j in self._find(client, cluster)]
            if ids:
                self._cancel_and_wait(client, ids)
        except CloudError as exc:
            log.warning("Slurm cluster '%s': could not cancel the job(s) of '%s' after a "
                        "failed provision (`launcher down %s` retries): %s",
                        client.cluster.name, cluster, cluster, exc)

    def _provision(self, client: SlurmClient, req: ProvisionRequest) -> ClusterInfo:
        existing = self._find(client, req.cluster_name)
        if existing:
            job = existing[0]
        else:
            shape, k = self._shape(req, client)
            limit = self.time_limit(req, client.cluster)
            job_id = client.sbatch(self._sbatch_args(req, shape, k, limit), HOLDER_SCRIPT)
            job = client.job(job_id) or JobRecord(job_id, job_name(req.cluster_name), "PENDING",
                                                  "None", "(null)", 0, "", None, req.num_nodes)
        job = self._wait_running(client, req, job)
        info = self._cluster_info(client, req, job)
        self._claim_homes(client, job, len(info.nodes))
        return info

    def _claim_homes(self, client: SlurmClient, job: JobRecord, n: int) -> None:
        """Make the nodes' launcher runtime dirs this allocation's (one step on every
        node; two when some must be cleared).

        Homes outlive allocations, and on most sites one home (NFS) is shared by all
        nodes: the agent's records of an earlier allocation (same launcher cluster or
        not) would otherwise be read as this one's (a restarted managed-jobs controller
        would adopt a run that ended with the old allocation). Each home records the
        allocation that set it up (`~/.launcher-slurm-job`); where that job is no
        longer live, the runtime dirs are removed and the home is marked with this job.
        A home marked by another live allocation is left alone, with a warning: two
        launcher clusters at once on one home share its agent directory (docs/slurm.md)."""
        def step(script: str) -> list[str]:
            out = client.run(["srun", "--overlap", f"--jobid={job.job_id}", f"-N{n}", f"-n{n}",
                              "--ntasks-per-node=1", "--quiet", "bash", "-c", script])
            return [ln.strip() for ln in out.splitlines()]

        marks = set(step(f"cat {HOME_MARK} 2>/dev/null; echo"))
        if marks == {job.job_id}:
            return  # every home is already this allocation's (a retried provision)
        live = {job.job_id}
        for m in marks - {"", job.job_id}:
            rec = client.job(m) if m.replace("_", "").isdigit() else None
            if rec is not None and _live(rec):
                live.add(m)
                log.warning("Slurm cluster '%s': the home of a node of job %s is also used by "
                            "live launcher job %s; the two share ~/.launcher-agent "
                            "(docs/slurm.md, limits)", client.cluster.name, job.job_id, m)
        dirs = " ".join(RUNTIME_DIRS)
        step(f'm=$(cat {HOME_MARK} 2>/dev/null); case " {" ".join(sorted(live))} " in '
             f'*" $m "*) ;; *) rm -rf {dirs} && echo {job.job_id} > {HOME_MARK} ;; esac')

    def _wait_running(self, client: SlurmClient, req: ProvisionRequest, job: JobRecord) -> JobRecord:
        deadline = time.monotonic() + client.cluster.provision_timeout
        while True:
            state = node_state(job)
            if state == NodeState.RUNNING and job.nodelist not in ("", "(null)"):
                return job
            if state not in (NodeState.PENDING, NodeState.RUNNING):
                self._cancel_and_wait(client, [job.job_id])
                raise CapacityError(end_reason(job), cloud=CLOUD, region=req.region, zone=req.zone)
            if time.monotonic() >= deadline:
                self._cancel_and_wait(client, [job.job_id])
                raise CapacityError(
                    f"Slurm job {job.job_id} still PENDING ({job.reason}) after "
                    f"{client.cluster.provision_timeout:.0f}s (provision_timeout); cancelled.",
                    cloud=CLOUD, region=req.region, zone=req.zone)
            time.sleep(_POLL_S)  # Slurm has no event to wait on from a client
            found = client.job(job.job_id)
            if found is None:
                raise CapacityError(f"Slurm job {job.job_id} vanished while pending.",
                                    cloud=CLOUD, region=req.region, zone=req.zone)
            job = found

    def _cluster_info(self, client: SlurmClient, req: ProvisionRequest, job: JobRecord) -> ClusterInfo:
        hosts = client.hostnames(job.nodelist)
        addrs = {n.name: n.address or n.name for n in client.nodes()}
        nodes = tuple(
            NodeInfo(rank=i, node_id=f"{job.job_id}:{h}", internal_ip=addrs.get(h, h))
            for i, h in enumerate(hosts)
        )
        return ClusterInfo(cluster_name=req.cluster_name, cloud=CLOUD, region=req.region,
                           zone=job.extra.get("Partition", req.zone), instance_type=req.instance_type,
                           use_spot=False, nodes=nodes)

    # ---- query / terminate -----------------------------------------------------------

    def _region_of(self, cluster: str) -> list[str]:
        from launcher.config.settings import load_config

        return sorted(load_config().slurm.clusters)

    def _jobs_everywhere(self, cluster: str) -> list[tuple[SlurmClient, JobRecord]]:
        out = []
        for region in self._region_of(cluster):
            client = self.client(region)
            for row in client.queue(job_name(cluster)):
                if tagged_cluster(row.comment) == cluster:
                    job = client.job(row.job_id)
                    if job is not None:
                        out.append((client, job))
        return out

    def query(self, cluster: str) -> dict[str, NodeState]:
        """node id -> state for the cluster's holder job (the newest one Slurm remembers);
        a pending job without nodes answers under its job id. {} once Slurm forgot it."""
        jobs = self._jobs_everywhere(cluster)
        if not jobs:
            return {}
        client, job = max(jobs, key=lambda cj: (_live(cj[1]), int(cj[1].job_id.split("_")[0])))
        state = node_state(job)
        if job.nodelist in ("", "(null)"):
            return {job.job_id: state}
        return {f"{job.job_id}:{h}": state for h in client.hostnames(job.nodelist)}

    def describe(self, cluster: str) -> str | None:
        """Why the cluster's newest holder job ended (end_reason), None while it lives."""
        jobs = self._jobs_everywhere(cluster)
        if not jobs or any(_live(j) for _, j in jobs):
            return None
        return end_reason(max(jobs, key=lambda cj: int(cj[1].job_id.split("_")[0]))[1])

    def final_loss(self, cluster: str) -> str | None:
        """Why the cluster's allocation ended for good, when it ran out of the time limit
        the task (or the cluster's config) set (TIMEOUT, or still COMPLETING with
        Reason=TimeLimit): a managed job then fails with this reason instead of being
        recovered into a fresh allocation. None while the newest holder job runs, and
        for every other end (preemption, NODE_FAIL, a partition MaxTime
        the allocation merely inherited: those are recovered)."""
        jobs = self._jobs_everywhere(cluster)
        if not jobs:
            return None
        job = max(jobs, key=lambda cj: int(cj[1].job_id.split("_")[0]))[1]
        if end_state(job) != "TIMEOUT" or not job.comment.endswith(TASK_LIMIT):
            return None
        return f"{end_reason(job)}: the time_limit set for it ran out (not recovered)"

    def terminate(self, cluster: str) -> None:
        """scancel every live holder job of the cluster and wait until Slurm reports each
        ended (or forgot it). Idempotent. Raises CloudError if Slurm does not confirm."""
        by_client: dict[int, tuple[SlurmClient, list[str]]] = {}
        for client, job in self._jobs_everywhere(cluster):
            if _live(job):
                by_client.setdefault(id(client), (client, []))[1].append(job.job_id)
        for client, ids in by_client.values():
            self._cancel_and_wait(client, ids)

    def _cancel_and_wait(self, client: SlurmClient, job_ids: list[str]) -> None:
        for job_id in job_ids:
            client.scancel(job_id)
        deadline = time.monotonic() + _CANCEL_WAIT_S
        pending = list(job_ids)
        while pending:
            pending = [j for j in pending if (rec := client.job(j)) is not None and _live(rec)]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise CloudError(f"Slurm did not confirm cancelling job(s) {', '.join(pending)} "
                                 f"within {_CANCEL_WAIT_S:.0f}s", cloud=CLOUD,
                                 region=client.cluster.name)
            time.sleep(_POLL_S)  # Slurm has no event to wait on from a client

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster name -> live holder job ids, over every configured Slurm cluster."""
        from launcher.config.settings import load_config

        out: dict[str, list[str]] = {}
        for region in sorted(load_config().slurm.clusters):
            client = self.client(region)
            rows = client.run(["squeue", "-h", "-o", "%i|%j|%k"])
            for line in rows.splitlines():
                jid, name, comment = (line.split("|", 2) + ["", ""])[:3]
                tagged = tagged_cluster(comment)
                if name.startswith(JOB_PREFIX) and tagged is not None:
                    out.setdefault(tagged, []).append(jid)
        return out


__all__ = ["AuthError", "SlurmCloud", "end_reason", "node_state"]
