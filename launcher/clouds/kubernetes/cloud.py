"""The `kubernetes` cloud: a launcher cluster is a gang of pods in one context.

Region = the kubeconfig context, no zone, instance type = a node shape from offers.py
(`H100x8of8`: 8 of a node's 8 H100s). Nodes are reached over SSH at the pods' IPs: sshd
runs in each pod (manifests.POD_SCRIPT), so the machine running launcher must reach the
pod network (it runs in the cluster, or the pod CIDR is routed to it: a VPN, a flat
VPC network such as GKE's or EKS's VPC CNI). docs/kubernetes.md says why and what
it costs.

provision (all or nothing): read the context's nodes afresh; a request no node shape
of the context can ever hold (GPU type or count no node has, or fewer such nodes than
num_nodes) is a CapacityError at once, naming the largest node, so failover moves on.
Else create the Secret (the SSH key), the headless Service, the task's volumes' PVCs
(volumes.py: made when missing, a user's existing one used and never deleted) and
num_nodes pods mounting them (an object that already exists, from a retried call, is
adopted), then watch the pods: all
Running with an IP -> SSH reached in each pod (host keys pinned) -> the ClusterInfo; an image pull error -> InvalidRequestError (the
image is the user's); a pod that fails, or any still unschedulable after the
context's `provision_timeout` -> everything is deleted (and waited for) and a
CapacityError carries the scheduler's FailedScheduling message. Any other error
deletes what was made too, before it is raised.

query: the pods labelled with the cluster in every context (states.py: phases,
conditions, container states, the nodes' Ready condition); a rank whose pod is gone
while its Service remains is PREEMPTED (something else deleted it). terminate deletes
every pod, Service, Secret and PVC labelled with the cluster in every context and
waits until the pods are gone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from launcher.clouds.base import (
    INSTANCE,
    CapacityError,
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
    TaggedResource,
)
from launcher.clouds.kubernetes import manifests as M
from launcher.clouds.kubernetes.api import (
    CLOUD,
    TIMEOUT,
    KubeContext,
    as_cloud_error,
    can_create_pods,
    context,
    contexts,
    core,
    status_code,
)
from launcher.clouds.kubernetes.offers import (
    Shape,
    largest_node,
    list_nodes,
    node_ready,
    nodes,
    parse_instance_type,
    pod_size,
    shapes,
)
from launcher.clouds.kubernetes.states import PodVerdict, unschedulable, verdict
from launcher.clouds.kubernetes.volumes import ensure_claims, pod_volumes

log = logging.getLogger(__name__)
TEARDOWN_WAIT_S = 120.0
# a running pod's sshd may first be installed by its start script (an image without one)
SSH_WAIT_S = 600.0
_NO_FABRIC = (None, "any", "ethernet")
# the kinds teardown deletes, in order (pods first: they use the others)
_KINDS = ("pods", "services", "secrets", "persistentvolumeclaims")
Pods = dict[str, dict[str, Any]]


def _json(resp: Any) -> Any:
    return json.loads(resp.data)


class KubernetesCloud:
    """See the module docstring."""

    name = CLOUD

    def __init__(self, node_waiter: Callable[[ClusterInfo, float], ClusterInfo] | None = None) -> None:
        """`node_waiter(info, deadline)`: brings the running pods into reach (default:
        SSH up, host keys pinned, the cluster key installed)."""
        self._node_waiter = node_waiter

    # ---- check -----------------------------------------------------------------------

    def check(self) -> CredentialStatus:
        """Each usable context, and whether it may create pods in its namespace (a
        SelfSubjectAccessReview). Enabled when at least one may."""
        from launcher.errors import LauncherError

        try:
            ctxs = contexts()
        except LauncherError as exc:
            return CredentialStatus(False, str(exc))
        if not ctxs:
            return CredentialStatus(False, "no kubeconfig context (KUBECONFIG, ~/.kube/config) "
                                           "and not running in a cluster")
        lines, ok = [], False
        for c in ctxs:
            allowed, why = can_create_pods(c)
            ok = ok or allowed
            lines.append(f"{c.name} (namespace {c.namespace}): "
                         + ("can create pods" if allowed else f"cannot create pods: {why}"))
        return CredentialStatus(ok, "; ".join(lines))

    # ---- provision -------------------------------------------------------------------

    def _shape(self, ctx: KubeContext, req: ProvisionRequest) -> tuple[Shape, int]:
        try:
            acc, k, g = parse_instance_type(req.instance_type)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), cloud=CLOUD, region=req.region) from None
        views = nodes(ctx, fresh=True)
        found = [s for s in shapes(ctx, views)
                 if (s.accelerator or "").lower() == (acc or "").lower()
                 and (s.gpus == g if acc else (s.gpus == 0 and int(s.cpus) == g))]
        if req.fabric_asked not in _NO_FABRIC:
            found.sort(key=lambda s: s.fabric is None)
        fits = [s for s in found if len(s.nodes) >= req.num_nodes]
        if not fits:
            have = max((len(s.nodes) for s in found), default=0)
            raise CapacityError(
                f"Kubernetes context '{ctx.name}' can never hold {req.num_nodes} pod(s) of "
                f"{req.instance_type}: {have} node(s) have that shape; its largest node is "
                f"{largest_node(views)}.", cloud=CLOUD, region=req.region)
        return fits[0], k

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """See Cloud.provision and the module docstring."""
        import dataclasses

        from launcher.runtime.keys import ensure_user_key

        ctx = context(req.region)
        shape, k = self._shape(ctx, req)
        user_key = ensure_user_key()
        req = dataclasses.replace(req, ssh_public_key=req.ssh_public_key or user_key.public_key())
        try:
            self._create(ctx, req, shape, k)
            pods = self._wait_running(ctx, req)
            info = dataclasses.replace(self._cluster_info(req, pods), ssh_key_path=user_key.private_path)
            return self._reach(info)
        except BaseException as exc:
            self._rollback(ctx, req.cluster_name, exc)
            raise

    def _reach(self, info: ClusterInfo) -> ClusterInfo:
        """sshd up in every pod, host keys pinned, the cluster key installed (the steps
        of launcher/clouds/aws/nodes.py, which imports no SDK). Raises CloudError."""
        from launcher.clouds.aws.nodes import wait_for_ssh

        try:
            return (self._node_waiter or wait_for_ssh)(info, time.monotonic() + SSH_WAIT_S)
        except CloudError as exc:
            exc.cloud, exc.region = CLOUD, info.region
            raise

    def _create(self, ctx: KubeContext, req: ProvisionRequest, shape: Shape, k: int) -> None:
        v1 = core(ctx.name)
        ns, cluster = ctx.namespace, req.cluster_name
        fab = shape.fabric if req.fabric_asked not in _NO_FABRIC else None
        cpus, mem = pod_size(shape, k)
        self._create_one("secret", lambda: v1.create_namespaced_secret(
            ns, M.secret(cluster, req.ssh_public_key or ""), _request_timeout=TIMEOUT), ctx,
            replace=lambda: v1.replace_namespaced_secret(
                M.secret_name(cluster), ns, M.secret(cluster, req.ssh_public_key or ""),
                _request_timeout=TIMEOUT))
        self._create_one("service", lambda: v1.create_namespaced_service(
            ns, M.service(cluster, req.num_nodes), _request_timeout=TIMEOUT), ctx)
        claims = ensure_claims(v1, ns, ctx.name, cluster, req.num_nodes, req.volumes)
        mounts = pod_volumes(claims)
        s = ctx.settings
        kueue = (s.kueue_queue, M.pod_group(cluster, req.idempotency_token)) if s.kueue_queue else None
        for rank in range(req.num_nodes):
            body = M.pod(cluster, rank, req.num_nodes, image=req.image_id or s.image,
                         gpus=k if shape.gpus else 0, gpu_resource=shape.gpu_resource,
                         cpus=cpus, memory_gib=mem, fabric=fab, node_terms=shape.label_terms(),
                         service_account=s.service_account, priority_class=s.priority_class,
                         pod_config=s.pod_config, volumes=mounts, kueue=kueue)
            self._create_one(f"pod {rank}", lambda b=body: v1.create_namespaced_pod(  # type: ignore[misc]
                ns, b, _request_timeout=TIMEOUT), ctx)

    def _create_one(self, what: str, create: Callable[[], Any], ctx: KubeContext,
                    replace: Callable[[], Any] | None = None) -> None:
        try:
            create()
        except Exception as exc:
            if status_code(exc) == 409:  # made by an earlier try of this launch: adopt it
                if replace is not None:
                    try:
                        replace()
                    except Exception as exc2:
                        raise as_cloud_error(exc2, ctx.name, f"replacing the {what}") from None
                return
            raise as_cloud_error(exc, ctx.name, f"creating the {what}") from None

    def _list_pods(self, ctx: KubeContext, cluster: str) -> tuple[Pods, str]:
        try:
            body = _json(core(ctx.name).list_namespaced_pod(
                ctx.namespace, label_selector=M.selector(cluster), _preload_content=False,
                _request_timeout=TIMEOUT))
        except Exception as exc:
            raise as_cloud_error(exc, ctx.name, "listing pods") from None
        return {p["metadata"]["name"]: p for p in body.get("items") or []}, \
            body["metadata"].get("resourceVersion", "")

    def _watch_pods(self, ctx: KubeContext, cluster: str, done: Callable[[Pods], Any],
                    timeout: float) -> Any:
        """List the cluster's pods, then follow their changes (a watch from the list's
        resourceVersion, re-listed when it ends) until `done(pods)` returns something
        other than None, which is returned; None after `timeout` seconds."""
        from kubernetes import watch

        deadline = time.monotonic() + timeout
        while True:
            pods, rv = self._list_pods(ctx, cluster)
            got = done(pods)
            if got is not None:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            w = watch.Watch()
            try:
                for ev in w.stream(core(ctx.name).list_namespaced_pod, ctx.namespace,
                                   label_selector=M.selector(cluster), resource_version=rv,
                                   timeout_seconds=max(1, int(left + 0.999)),
                                   _request_timeout=(TIMEOUT[0], left + 5)):
                    obj = ev["raw_object"]
                    name = obj["metadata"]["name"]
                    if ev["type"] == "DELETED":
                        pods.pop(name, None)
                    elif ev["type"] in ("ADDED", "MODIFIED"):
                        pods[name] = obj
                    else:
                        continue
                    got = done(pods)
                    if got is not None:
                        return got
                    if time.monotonic() >= deadline:
                        return None
            except Exception as exc:  # a dropped watch: list again, unless the server is gone
                if status_code(exc) not in (None, 410, 500, 503, 504):
                    raise as_cloud_error(exc, ctx.name, "watching pods") from None
                if status_code(exc) is None and not _transient(exc):
                    raise as_cloud_error(exc, ctx.name, "watching pods") from None
            finally:
                w.stop()

    def _wait_running(self, ctx: KubeContext, req: ProvisionRequest) -> Pods:
        timeout = ctx.settings.provision_timeout
        last: dict[str, str] = {}
        gated: set[str] = set()

        def done(pods: Pods) -> Any:
            mine = {n: p for n, p in pods.items() if n in _names(req)}
            gated.clear()
            gated.update(n for n, p in mine.items() if any(
                g.get("name") == M.KUEUE_GATE for g in (p.get("spec") or {}).get("schedulingGates") or []))
            for p in mine.values():
                v = verdict(p)
                if v.why == "image error":
                    return ("image", p, v)
                if v.state in (NodeState.TERMINATED, NodeState.PREEMPTED):
                    return ("ended", p, v)
                why = unschedulable(p)
                if why:
                    last[p["metadata"]["name"]] = why
            if len(mine) == req.num_nodes and all(
                    (p.get("status") or {}).get("phase") == "Running" and p["status"].get("podIP")
                    for p in mine.values()):
                return ("up", mine, None)
            return None

        got = self._watch_pods(ctx, req.cluster_name, done, timeout)
        where = {"cloud": CLOUD, "region": req.region}
        if got is None and gated:
            raise CapacityError(
                f"Kubernetes context '{ctx.name}': Kueue did not admit the gang ({len(gated)} of "
                f"{req.num_nodes} pod(s) still gated, LocalQueue '{ctx.settings.kueue_queue}') "
                f"within {timeout:g}s (provision_timeout); the gang was deleted.", **where)
        if got is None:
            names = sorted(last) or sorted(_names(req))
            why = next(iter(last.values()), "the pods did not start")
            raise CapacityError(
                f"Kubernetes context '{ctx.name}': {len(last) or 'some'} of {req.num_nodes} pod(s) "
                f"({', '.join(names)}) still unschedulable after {timeout:g}s "
                f"(provision_timeout); the gang was deleted. The scheduler says: {why}", **where)
        kind, obj, v = got
        if kind == "image":
            raise InvalidRequestError(f"Kubernetes context '{ctx.name}': pod {obj['metadata']['name']} "
                                      f"cannot start its image ({v.text}); check the image "
                                      "name and the registry's credentials.", **where)
        if kind == "ended":
            raise CapacityError(f"Kubernetes context '{ctx.name}': pod {obj['metadata']['name']} "
                                f"ended while starting ({v.text}); the gang was deleted.", **where)
        return dict(obj)

    def _rollback(self, ctx: KubeContext, cluster: str, cause: BaseException) -> None:
        try:
            self._delete_all(ctx, cluster)
        except Exception as exc:  # the objects carry the label: `down` finds them later
            log.warning("rolling back cluster %s in context %s failed (%s); `launcher down %s` "
                        "retries", cluster, ctx.name, exc, cluster)

    def _cluster_info(self, req: ProvisionRequest, pods: Pods) -> ClusterInfo:
        ordered = sorted(pods.values(), key=lambda p: int(p["metadata"]["labels"][M.RANK_LABEL]))
        nodes_ = tuple(NodeInfo(rank=i, node_id=p["metadata"]["name"], internal_ip=p["status"]["podIP"],
                                external_ip=None, ssh_user="root")
                       for i, p in enumerate(ordered))
        return ClusterInfo(cluster_name=req.cluster_name, cloud=CLOUD, region=req.region, zone=None,
                           instance_type=req.instance_type, use_spot=False, nodes=nodes_)

    # ---- query / terminate -----------------------------------------------------------

    def _contexts(self) -> list[KubeContext]:
        return contexts()

    def _views(self, cluster: str) -> list[tuple[KubeContext, Pods, dict[str, PodVerdict], int]]:
        """Per context holding any of the cluster: its pods, their verdicts, and the
        gang size its Service records (0: no Service)."""
        out = []
        for ctx in self._contexts():
            pods, _ = self._list_pods(ctx, cluster)
            v1 = core(ctx.name)
            try:
                svcs = v1.list_namespaced_service(ctx.namespace, label_selector=M.selector(cluster),
                                                  _request_timeout=TIMEOUT).items
            except Exception as exc:
                raise as_cloud_error(exc, ctx.name, "listing services") from None
            size = max((int((s.metadata.annotations or {}).get(M.NODES_ANNOTATION, 0)) for s in svcs),
                       default=0)
            if not pods and not size:
                continue
            ready = self._node_ready(ctx, {p["spec"].get("nodeName") for p in pods.values()})
            verdicts = {n: verdict(p, ready.get(p["spec"].get("nodeName") or "")) for n, p in pods.items()}
            out.append((ctx, pods, verdicts, size))
        return out

    def _node_ready(self, ctx: KubeContext, names: set[str | None]) -> dict[str, bool]:
        wanted = {n for n in names if n}
        if not wanted:
            return {}
        if len(wanted) > 8:  # a big gang: one list beats a GET per node
            out = {n["metadata"]["name"]: node_ready(n) for n in list_nodes(ctx.name)
                   if n["metadata"]["name"] in wanted}
            return {n: out.get(n, False) for n in wanted}  # a node that is gone is not ready
        ready = {}
        for name in sorted(wanted):
            try:
                resp = core(ctx.name).read_node(name, _preload_content=False, _request_timeout=TIMEOUT)
                ready[name] = node_ready(_json(resp))
            except Exception as exc:
                if status_code(exc) != 404:
                    raise as_cloud_error(exc, ctx.name, f"reading node {name}") from None
                ready[name] = False  # the node is gone
        return ready

    def query(self, cluster: str) -> dict[str, NodeState]:
        """pod name -> state (states.py); a rank whose pod is gone, while the cluster's
        Service still says the gang has it, is PREEMPTED. {} when nothing is left."""
        out: dict[str, NodeState] = {}
        for _ctx, _pods, verdicts, size in self._views(cluster):
            out.update({n: v.state for n, v in verdicts.items()})
            for rank in range(size):
                out.setdefault(M.pod_name(cluster, rank), NodeState.PREEMPTED)
        return out

    def describe(self, cluster: str) -> str | None:
        """Why the cluster's pods are not all running (evicted, preempted, node lost,
        OOMKilled, image error, completed...), None while they are."""
        out = []
        for ctx, pods, verdicts, size in self._views(cluster):
            lines = [f"pod {n}: {v.text}" for n, v in sorted(verdicts.items())
                     if v.state is not NodeState.RUNNING]
            lines += [f"pod {M.pod_name(cluster, r)}: deleted by the cluster (preempted or "
                      f"its node removed)" for r in range(size) if M.pod_name(cluster, r) not in pods]
            if lines:
                out.append(f"context {ctx.name}: " + "; ".join(lines))
        return "; ".join(out) or None

    def terminate(self, cluster: str) -> None:
        """Delete everything labelled with the cluster in every context and wait until
        its pods are gone. Idempotent. Raises CloudError when a context does not
        answer or the pods outlive TEARDOWN_WAIT_S."""
        for ctx in self._contexts():
            self._delete_all(ctx, cluster)

    def _delete_all(self, ctx: KubeContext, cluster: str) -> None:
        v1 = core(ctx.name)
        sel, ns = M.selector(cluster), ctx.namespace
        calls = {
            "pods": v1.delete_collection_namespaced_pod,
            "secrets": v1.delete_collection_namespaced_secret,
            "persistentvolumeclaims": v1.delete_collection_namespaced_persistent_volume_claim,
        }
        for kind in _KINDS:
            try:
                if kind == "services":  # core/v1 has no deletecollection for services
                    for s in v1.list_namespaced_service(ns, label_selector=sel,
                                                        _request_timeout=TIMEOUT).items:
                        try:
                            v1.delete_namespaced_service(s.metadata.name, ns, _request_timeout=TIMEOUT)
                        except Exception as exc:
                            if status_code(exc) != 404:
                                raise
                else:
                    calls[kind](ns, label_selector=sel, _request_timeout=TIMEOUT)
            except Exception as exc:
                raise as_cloud_error(exc, ctx.name, f"deleting the cluster's {kind}") from None
        gone = self._watch_pods(ctx, cluster, lambda pods: True if not pods else None, TEARDOWN_WAIT_S)
        if gone is None:
            raise CloudError(f"Kubernetes context '{ctx.name}': the pods of {cluster} are still "
                             f"there {TEARDOWN_WAIT_S:.0f}s after their deletion.",
                             cloud=CLOUD, region=ctx.name)

    # ---- orphans ---------------------------------------------------------------------

    def list_tagged_resources(self) -> dict[str, list[TaggedResource]]:
        """cluster -> every pod, Service, Secret and PVC launcher labelled, in every context."""
        out: dict[str, list[TaggedResource]] = {}
        sel = ",".join(f"{k}={v}" for k, v in M.MANAGED.items())
        for ctx in self._contexts():
            v1 = core(ctx.name)
            lists = {INSTANCE: v1.list_namespaced_pod, "service": v1.list_namespaced_service,
                     "secret": v1.list_namespaced_secret,
                     "persistent volume claim": v1.list_namespaced_persistent_volume_claim}
            for kind, fn in lists.items():
                try:
                    items = fn(ctx.namespace, label_selector=sel, _request_timeout=TIMEOUT).items
                except Exception as exc:
                    raise as_cloud_error(exc, ctx.name, f"listing {kind}s") from None
                for o in items:
                    if kind == INSTANCE and (o.status.phase in ("Succeeded", "Failed")):
                        continue
                    name = (o.metadata.labels or {}).get(M.CLUSTER_LABEL)
                    if name:
                        out.setdefault(name, []).append(
                            TaggedResource(kind, f"{ctx.name}/{ctx.namespace}/{o.metadata.name}"))
        return out

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster -> its live pods (context/namespace/name), in every context."""
        return {c: [r.id for r in res if r.kind == INSTANCE]
                for c, res in self.list_tagged_resources().items()
                if any(r.kind == INSTANCE for r in res)}


def _names(req: ProvisionRequest) -> set[str]:
    return {M.pod_name(req.cluster_name, r) for r in range(req.num_nodes)}


def _transient(exc: BaseException) -> bool:
    """A watch stream that ended early (read timeout, connection reset): list again."""
    import urllib3

    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)
