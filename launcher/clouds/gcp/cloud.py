"""`GCPCloud`: the `gcp` cloud on Compute Engine (Cloud protocol, SupportsStop,
SupportsOrphans, SupportsCleanup: the shared firewall rules, cleanup.py).

provision (blocking, all or nothing, one zone): the zone is recorded (records.py)
before any call -> machine type in the zone (images.py; absent = CapacityError) ->
GPUDirect machine types refused for multi-node gangs (provision.py) -> image ->
firewall rules of the network (network.py, once) -> per-cluster ports rule, compact
placement policy (multi-node GPU gangs) -> one insert per node, all issued, each zone
operation waited on (errors inside the operation are typed) -> every node RUNNING ->
the node waiter (SSH up, host keys pinned). Any failure after the first create call
deletes the cluster's instances in the zone, its policy and ports rule before the error
is raised.

query: the recorded gang (zone + names) -> NodeState; a spot node that is gone (its
termination action is DELETE) or TERMINATED with a `compute.instances.preempted`
operation in the zone is PREEMPTED; gone otherwise is TERMINATED; TERMINATED (GCP's
word for stopped) otherwise is STOPPED. terminate: idempotent, by label, in every
recorded zone (no record: every zone, through aggregatedList), waits, then deletes the
policy and the ports rule and drops the record.

Tests inject `clients` (a session.Clients with AnonymousCredentials and the fake's
endpoint), `node_waiter`, `settings`; the product uses the real ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    Leftover,
    NodeInfo,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.gcp import records
from launcher.clouds.gcp.errors import CLOUD, is_not_found
from launcher.clouds.gcp.nodes import NodeWaiter, wait_for_ssh
from launcher.clouds.gcp.ops import Sleep, call, wait
from launcher.clouds.gcp.provision import (
    CLUSTER_LABEL,
    CLUSTER_METADATA,
    NodePlan,
    check_networking,
    insert_request,
    instance_name,
    label_value,
    policy_body,
    policy_name,
    wants_compact_placement,
)
from launcher.clouds.gcp.session import Clients, check_token, local_credentials, presence_of
from launcher.clouds.gcp.states import label_ok, metadata, node_state, preempted_names, rank_key
from launcher.clouds.gcp.teardown import (
    all_instances,
    delete_policy,
    delete_ports_rule,
    label_filter,
    teardown_zone,
    zone_tagged_instances,
)
from launcher.config.settings import GCPSettings, load_config

CHECK_TTL_S = 60.0


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds. `poll`: between get calls while waiting."""

    running: float = 900.0
    ssh: float = 900.0
    teardown: float = 900.0
    poll: float = 2.0


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def _zones_of(region: str) -> list[str]:
    from launcher.catalog.query import locations

    return sorted(z for z in locations(CLOUD).get(region, ()) if z)


class GCPCloud:
    """See the module docstring. Constructing it imports no SDK."""

    name = CLOUD

    def __init__(self, *, clients: Clients | None = None, node_waiter: NodeWaiter | None = None,
                 settings: GCPSettings | None = None, timeouts: Timeouts = Timeouts(),
                 sleep: Sleep = time.sleep) -> None:
        self._clients = clients
        self._node_waiter: NodeWaiter = node_waiter or wait_for_ssh
        self._settings = settings
        self._timeouts = timeouts
        self._sleep = sleep
        self._checked: tuple[float, CredentialStatus] | None = None

    # ---- plumbing ----

    def settings(self) -> GCPSettings:
        return self._settings or load_config().gcp

    @property
    def clients(self) -> Clients:
        if self._clients is None:
            self._clients = Clients(self.settings())
        return self._clients

    def _task_settings(self, req: ProvisionRequest) -> GCPSettings:
        """config.yaml's `gcp:` with the task's `config.gcp` keys laid over it
        (SkyPilot's `project_id` and `vpc_name` are launcher's `project` and `network`)."""
        from launcher.task.config_section import apply_overrides

        renames = {"project_id": "project", "vpc_name": "network"}
        overrides = {renames.get(k, k): v for k, v in (req.settings.get("gcp") or {}).items()}
        settings: GCPSettings = apply_overrides(self.settings(), overrides)
        return settings

    def project(self, settings: GCPSettings | None = None) -> str:
        project = local_credentials(settings or self.settings()).project
        if not project:
            raise AuthError("No GCP project: set gcp.project in the config, "
                            "GOOGLE_CLOUD_PROJECT, or `gcloud config set project`.", cloud=CLOUD)
        return project

    def _wait(self, op: Any, action: str, *, zone: str | None = None,
              region: str | None = None, timeout: float | None = None) -> Any:
        t = self._timeouts
        return wait(self.clients, self.project(), op, action=action, zone=zone, region=region,
                    deadline=time.monotonic() + (timeout or t.running), poll=t.poll,
                    sleep=self._sleep)

    # ---- Cloud ----

    def check(self) -> CredentialStatus:
        """Project and account, or why not. Without credentials (no env/files) answers at
        once and imports no Google library; with them, obtains a token (short timeout).
        Cached for CHECK_TTL_S. Never raises."""
        try:
            settings = self.settings()
        except Exception as exc:  # a broken config
            return CredentialStatus(False, f"config: {exc}")
        local = local_credentials(settings)
        found = presence_of(local)
        if not found.enabled or local.source is None or local.project is None:
            return found
        now = time.monotonic()
        if self._checked is not None and now - self._checked[0] < CHECK_TTL_S:
            return self._checked[1]
        status = check_token(self.clients, local.source, local.project, local.account)
        self._checked = (now, status)
        return status

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create the gang (see the module docstring). Raises CapacityError, QuotaError,
        AuthError, InvalidRequestError or CloudError; nothing is left on failure."""
        from launcher.clouds.gcp.images import machine_facts, source_image
        from launcher.clouds.gcp.network import ensure_firewall
        from launcher.runtime.keys import ensure_user_key

        if req.num_nodes < 1:
            raise InvalidRequestError("num_nodes must be >= 1.", cloud=CLOUD, region=req.region)
        check_networking(req.instance_type, req.num_nodes)
        zone = req.zone or next(iter(_zones_of(req.region)), None)
        if zone is None:
            raise InvalidRequestError(f"No zone known in GCP region {req.region}.", cloud=CLOUD,
                                      region=req.region)
        records.add_zone(req.cluster_name, zone)
        settings = self._task_settings(req)
        project = self.project(settings)
        user_key = ensure_user_key()
        facts = machine_facts(self.clients, project, zone, req.instance_type)
        gpu = bool(req.accelerator) or bool(facts.accelerators)
        image = source_image(self.clients, req.image_id, gpu)
        ensure_firewall(self.clients, project, settings)
        plan = NodePlan(
            project=project, zone=zone, region=req.region, cluster=req.cluster_name,
            machine_type=req.instance_type, num_nodes=req.num_nodes, use_spot=req.use_spot,
            source_image=image, ssh_user=settings.ssh_user,
            public_key=req.ssh_public_key or user_key.public_key(), network=settings.network,
            subnetwork=settings.subnetwork, external_ip=not settings.use_internal_ips,
            disk_size_gb=req.disk_size_gb, accelerator=req.accelerator,
            accelerator_count=int(req.accelerator_count or 0), gpu=gpu,
            token=req.idempotency_token,
            extra_labels={k: v for k, v in req.labels.items() if label_ok(k, v)})
        try:
            return self._create(req, plan, settings, user_key.private_path)
        except BaseException:
            with contextlib.suppress(Exception):
                self._teardown(req.cluster_name, [zone])
            raise

    def _create(self, req: ProvisionRequest, plan: NodePlan, settings: GCPSettings,
                key_path: str) -> ClusterInfo:
        from google.cloud import compute_v1

        from launcher.clouds.gcp.network import create_ports_rule

        cluster, zone, region, project = req.cluster_name, plan.zone, plan.region, plan.project
        if req.ports:
            create_ports_rule(self.clients, project, settings, label_value(cluster), req.ports)
        if wants_compact_placement(req.instance_type, req.num_nodes, plan.gpu):
            name = policy_name(cluster)
            records.add_policy(cluster, region, name)
            try:
                body = compute_v1.ResourcePolicy(policy_body(name, req.num_nodes))
                op = call(lambda: self.clients.resource_policies().insert_unary(
                    project=project, region=region, resource_policy_resource=body),
                    action="create placement policy", region=region, sleep=self._sleep)
                self._wait(op, "create placement policy", region=region)
            except CloudError as exc:
                if "alreadyExists" not in str(exc) and "already exists" not in str(exc):
                    raise
            plan = dataclasses.replace(plan, policy=name)
        names = [instance_name(cluster, r) for r in range(req.num_nodes)]
        records.set_instances(cluster, zone, names, req.use_spot)
        inst = self.clients.instances()
        ops = [call(lambda r=r: inst.insert_unary(request=insert_request(plan, r)),
                    action=f"insert instance {names[r]}", region=region, zone=zone,
                    sleep=self._sleep)
               for r in range(req.num_nodes)]
        for op, name in zip(ops, names, strict=True):
            self._wait(op, f"insert instance {name}", zone=zone, region=region)
        described = self._wait_running(project, zone, names, req.use_spot)
        info = self._cluster_info(cluster, region, zone, req.instance_type, req.use_spot,
                                  described, settings, key_path)
        return self._node_waiter(info, time.monotonic() + self._timeouts.ssh)

    def _get(self, project: str, zone: str, name: str) -> Any | None:
        """The instance, or None when it does not exist."""
        try:
            return call(lambda: self.clients.instances().get(
                project=project, zone=zone, instance=name),
                action=f"get instance {name}", zone=zone, region=region_of(zone),
                sleep=self._sleep)
        except CloudError as exc:
            if is_not_found(exc.__cause__ or exc):
                return None
            raise

    def _wait_running(self, project: str, zone: str, names: list[str],
                      spot: bool) -> list[Any]:
        deadline = time.monotonic() + self._timeouts.running
        while True:
            got = [self._get(project, zone, n) for n in names]
            gone = [n for n, i in zip(names, got, strict=True)
                    if i is None or str(i.status) in ("STOPPING", "TERMINATED")]
            if gone:
                cls = CapacityError if spot else CloudError
                raise cls(f"{', '.join(gone)} ended while starting (spot capacity reclaimed?)"
                          if spot else f"{', '.join(gone)} ended while starting.",
                          cloud=CLOUD, region=region_of(zone), zone=zone)
            if all(i is not None and str(i.status) == "RUNNING" for i in got):
                return [i for i in got if i is not None]
            if time.monotonic() >= deadline:
                raise CloudError("Instances not running in time: " + ", ".join(
                    f"{n}={getattr(i, 'status', None)}" for n, i in zip(names, got, strict=True)),
                    cloud=CLOUD, region=region_of(zone), zone=zone)
            self._sleep(self._timeouts.poll)

    def _cluster_info(self, cluster: str, region: str, zone: str, machine_type: str,
                      spot: bool, described: list[Any], settings: GCPSettings,
                      key_path: str) -> ClusterInfo:
        nodes = []
        for rank, inst in enumerate(described):
            nic = inst.network_interfaces[0]
            external = None
            if not settings.use_internal_ips and nic.access_configs:
                external = str(nic.access_configs[0].nat_i_p) or None
            nodes.append(NodeInfo(rank=rank, node_id=str(inst.name),
                                  internal_ip=str(nic.network_i_p), external_ip=external,
                                  ssh_user=settings.ssh_user))
        return ClusterInfo(cluster_name=cluster, cloud=CLOUD, region=region, zone=zone,
                           instance_type=machine_type, use_spot=spot, nodes=tuple(nodes),
                           ssh_key_path=key_path)

    def query_many(self, clusters: Sequence[str], region: str | None = None
                   ) -> dict[str, dict[str, NodeState]]:
        """`query` of many clusters (SupportsBatchQuery): one `instances.list` per zone
        of their recorded gangs (every labelled instance there), and the zone's
        preemption operations once when a spot node is gone. A cluster with no record is
        asked alone (`query`); `region` changes nothing (each record names its zone).
        Raises CloudError."""
        project = self.project()
        out: dict[str, dict[str, NodeState]] = {}
        by_zone: dict[str, list[tuple[str, list[str], bool]]] = {}
        for cluster in clusters:
            recorded = records.recorded_instances(cluster)
            if recorded is None:
                out[cluster] = self.query(cluster)
                continue
            zone, names, spot = recorded
            by_zone.setdefault(zone, []).append((cluster, list(names), spot))
        for zone, gangs in by_zone.items():
            listed = {str(i.name): i for i in zone_tagged_instances(self.clients, project, zone)}
            gone = any(spot and any(n not in listed or str(listed[n].status) == "TERMINATED"
                                    for n in names) for _, names, spot in gangs)
            preempted = preempted_names(self.clients, project, zone, self._sleep) if gone \
                else set()
            for cluster, names, spot in gangs:
                view: dict[str, NodeState] = {}
                for n in names:
                    inst = listed.get(n)
                    lost = spot and n in preempted
                    if inst is None:
                        view[n] = NodeState.PREEMPTED if lost else NodeState.TERMINATED
                    else:
                        view[n] = node_state(str(inst.status), lost)
                out[cluster] = view
        return out

    def query(self, cluster: str) -> dict[str, NodeState]:
        """node name -> GCE's view (see the module docstring). Raises CloudError."""
        project = self.project()
        recorded = records.recorded_instances(cluster)
        if recorded is None:
            out: dict[str, NodeState] = {}
            for insts in all_instances(self.clients, project, label_filter(cluster)).values():
                for inst in insts:
                    out[str(inst.name)] = node_state(str(inst.status), False)
            return out
        zone, names, spot = recorded
        got = {n: self._get(project, zone, n) for n in names}
        preempted: set[str] = set()
        if spot and any(i is None or str(i.status) == "TERMINATED" for i in got.values()):
            preempted = preempted_names(self.clients, project, zone, self._sleep)
        out = {}
        for n, inst in got.items():
            if inst is None:
                out[n] = NodeState.PREEMPTED if n in preempted else NodeState.TERMINATED
            else:
                out[n] = node_state(str(inst.status), n in preempted)
        return out

    def terminate(self, cluster: str) -> None:
        """Delete everything of `cluster` (see the module docstring); idempotent, blocking.
        Raises CloudError (the record is kept then, so a retry looks in the same zones)."""
        zones = records.cluster_zones(cluster)
        if zones is None:  # no record (lost, or an orphan): find the zones by label, and
            # the placement policy by its name in their regions
            zones = sorted(all_instances(self.clients, self.project(), label_filter(cluster)))
            for zone in zones:  # recorded, so a retry after a failure looks there too
                records.add_zone(cluster, zone)
                records.add_policy(cluster, region_of(zone), policy_name(cluster))
        self._teardown(cluster, zones)
        records.drop_cluster(cluster)

    def _teardown(self, cluster: str, zones: list[str]) -> None:
        from launcher.clouds.gcp.network import forget, ports_rule_name

        project = self.project()
        t = self._timeouts
        deadline = time.monotonic() + t.teardown
        for zone in zones:
            teardown_zone(self.clients, project, zone, cluster, deadline=deadline, poll=t.poll,
                          sleep=self._sleep)
        for region, name in records.policies(cluster).items():
            delete_policy(self.clients, project, region, name, deadline=deadline, poll=t.poll,
                          sleep=self._sleep)
            records.drop_policy(cluster, region)
        rule = ports_rule_name(label_value(cluster))
        delete_ports_rule(self.clients, project, rule, deadline=deadline, poll=t.poll,
                          sleep=self._sleep)
        forget(project, rule)

    # ---- SupportsStop ----

    def _gang(self, cluster: str) -> tuple[str, list[Any]]:
        project = self.project()
        found = all_instances(self.clients, project, label_filter(cluster))
        if not found:
            raise InvalidRequestError(f"Cluster {cluster!r} has no instance on GCP.", cloud=CLOUD)
        zone, insts = next(iter(sorted(found.items())))
        return zone, sorted(insts, key=rank_key)

    def stop(self, cluster: str) -> None:
        """Stop every node (boot disks kept). Blocking until the stop operations are done.
        Raises InvalidRequestError for spot nodes (stopping is refused: a spot gang is
        relaunched, not resumed), CloudError."""
        zone, insts = self._gang(cluster)
        if any(str(i.scheduling.provisioning_model) == "SPOT" for i in insts):
            raise InvalidRequestError(f"Cluster {cluster!r} runs on spot VMs; use `launcher "
                                      "down`.", cloud=CLOUD, zone=zone)
        project = self.project()
        ops = [call(lambda n=i.name: self.clients.instances().stop_unary(
            project=project, zone=zone, instance=n), action="stop instance", zone=zone,
            sleep=self._sleep) for i in insts]
        for op in ops:
            self._wait(op, "stop instance", zone=zone, timeout=self._timeouts.teardown)

    def start(self, cluster: str) -> ClusterInfo:
        """Start the stopped nodes; the ClusterInfo with their IPs and re-pinned host keys.
        Blocking. Raises CloudError (InvalidRequestError when nothing is there)."""
        from launcher.runtime.keys import ensure_user_key

        zone, insts = self._gang(cluster)
        project = self.project()
        ops = [call(lambda n=i.name: self.clients.instances().start_unary(
            project=project, zone=zone, instance=n), action="start instance", zone=zone,
            sleep=self._sleep) for i in insts]
        for op in ops:
            self._wait(op, "start instance", zone=zone)
        names = [str(i.name) for i in insts]
        spot = any(str(i.scheduling.provisioning_model) == "SPOT" for i in insts)
        records.set_instances(cluster, zone, names, spot)
        described = self._wait_running(project, zone, names, spot)
        machine = str(described[0].machine_type).rsplit("/", 1)[-1]
        info = self._cluster_info(cluster, region_of(zone), zone, machine, spot, described,
                                  self.settings(), ensure_user_key().private_path)
        return self._node_waiter(info, time.monotonic() + self._timeouts.ssh)

    # ---- autostop ----

    def autostop_action(self, cluster: ClusterInfo, down: bool) -> str:
        """The head agent's autostop action. Stop: power every node off over SSH (workers
        first, then the head; launcher/clouds/aws/autostop.py's command, no SDK): GCE
        turns a guest shutdown into a stopped (TERMINATED) instance, boot disk kept, and
        `launcher start` brings it back. `down`: "" (GCE cannot delete an instance on a
        guest shutdown): the agent takes the cluster down itself and the client deletes
        the instances when it reconciles. Raises InvalidRequestError for a stop of a
        spot cluster (launcher stops no spot gang; use --down)."""
        from launcher.clouds.aws.autostop import power_off_command

        if down:
            return ""
        if cluster.use_spot:
            raise InvalidRequestError(
                f"Cluster {cluster.cluster_name!r} runs on spot VMs, which launcher does not "
                "stop: use autostop with --down.", cloud=CLOUD, region=cluster.region)
        return power_off_command(cluster)

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster name -> names of its instances (any status but deleted), every zone
        of the project. Raises CloudError."""
        out: dict[str, list[str]] = {}
        found = all_instances(self.clients, self.project(), f"labels.{CLUSTER_LABEL}:*")
        for insts in found.values():
            for inst in insts:
                name = metadata(inst, CLUSTER_METADATA) or inst.labels.get(CLUSTER_LABEL)
                if name:
                    out.setdefault(str(name), []).append(str(inst.name))
        return {k: sorted(v) for k, v in out.items()}

    # ---- SupportsCleanup ----

    def list_leftovers(self, region: str | None = None) -> list[Leftover]:
        """The project's shared firewall rules (project-wide: listed for any `region`)."""
        from launcher.clouds.gcp import cleanup

        return cleanup.leftovers(self.clients, self.project(), self.list_tagged_clusters())

    def delete_leftover(self, item: Leftover) -> None:
        from launcher.clouds.gcp import cleanup

        cleanup.delete(self.clients, self.project(), item, timeout=self._timeouts.teardown,
                       poll=self._timeouts.poll, sleep=self._sleep)
