"""The objects a gang is made of (API JSON dicts, no SDK): a Secret with the key sshd
authorizes, a headless Service for rendezvous (`RANKHOST.SERVICE.NAMESPACE.svc`), and
one pod per node.

Every object carries the labels `launcher.dev/cluster=CLUSTER` and
`app.kubernetes.io/managed-by=launcher`, so teardown and the orphan scan find them by
label alone. Pods: `restartPolicy: Never`; required podAntiAffinity on the cluster
label (one pod per node); a required node affinity on the GPU label values of the
chosen node shape; GPUs (and the fabric's extended resource, when the task asked for
RDMA) as limits; vCPUs and memory as requests; tolerations for the GPU taints and
whatever `pod_config` adds; the context's service account and priority class;
`pod_config` deep-merged last (dicts merged, `containers[i]` merged by position, other
lists appended). The container runs POD_SCRIPT: install sshd when the image lacks it,
authorize the Secret's key, pass the pod's NCCL_*/FI_* variables into every SSH session
(sshd `SetEnv`) and exec sshd on port 22.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from launcher.clouds.kubernetes.labels import AMD_GPU, NVIDIA_GPU, Fabric

CLUSTER_LABEL = "launcher.dev/cluster"
# Kueue's plain-pod group integration (KEP-976): the pods' queue, their group, its size,
# and the scheduling gate Kueue removes when it admits the group
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_GATE = "kueue.x-k8s.io/admission"
RANK_LABEL = "launcher.dev/rank"
NODES_ANNOTATION = "launcher.dev/num-nodes"
MANAGED = {"app.kubernetes.io/managed-by": "launcher"}
SSH_DIR = "/etc/launcher/ssh"

POD_SCRIPT = r"""set -e
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server rsync >/dev/null
  elif command -v dnf >/dev/null 2>&1; then dnf install -y -q openssh-server rsync
  elif command -v yum >/dev/null 2>&1; then yum install -y -q openssh-server rsync
  elif command -v apk >/dev/null 2>&1; then apk add --no-cache openssh rsync
  else echo "launcher: the image has no sshd and no package manager" >&2; exit 1
  fi
fi
mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh
cp SSH_DIR/authorized_keys /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys
ssh-keygen -A >/dev/null 2>&1 || true
set --
for v in $(env | grep -E '^(NCCL_|FI_|LAUNCHER_K8S_)' | tr '\n' ' '); do set -- "$@" -o "SetEnv=$v"; done
exec /usr/sbin/sshd -D -e -p 22 -o PermitRootLogin=prohibit-password -o UseDNS=no "$@"
""".replace("SSH_DIR", SSH_DIR)


def labels(cluster: str) -> dict[str, str]:
    return {CLUSTER_LABEL: cluster, **MANAGED}


def selector(cluster: str) -> str:
    return f"{CLUSTER_LABEL}={cluster}"


def service_name(cluster: str) -> str:
    return cluster[:63]


def secret_name(cluster: str) -> str:
    return f"{cluster[:57]}-ssh"


def pod_name(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}"


def secret(cluster: str, public_key: str) -> dict[str, Any]:
    data = base64.b64encode(public_key.strip().encode() + b"\n").decode()
    return {"metadata": {"name": secret_name(cluster), "labels": labels(cluster)},
            "type": "Opaque", "data": {"authorized_keys": data}}


def service(cluster: str, num_nodes: int) -> dict[str, Any]:
    return {"metadata": {"name": service_name(cluster), "labels": labels(cluster),
                         "annotations": {NODES_ANNOTATION: str(num_nodes)}},
            "spec": {"clusterIP": "None", "selector": {CLUSTER_LABEL: cluster},
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": "ssh", "port": 22, "targetPort": 22}]}}


def nccl_env(fabric: Fabric | None) -> dict[str, str]:
    """The NCCL/libfabric variables for the fabric the pods were given (none: TCP)."""
    if fabric is None:
        return {}
    if fabric.fabric == "efa":
        return {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    env = {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_NET_GDR_LEVEL": "PHB"}
    if fabric.fabric == "roce":
        env["NCCL_IB_GID_INDEX"] = "3"
    return env


def pod(cluster: str, rank: int, num_nodes: int, *, image: str, gpus: int,
        gpu_resource: str | None, cpus: int, memory_gib: float, fabric: Fabric | None,
        node_terms: list[dict[str, Any]], service_account: str | None,
        priority_class: str | None, pod_config: dict[str, Any],
        volumes: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], []),
        kueue: tuple[str, str] | None = None) -> dict[str, Any]:
    """Pod `rank` of the gang (see the module docstring). `fabric`: request its
    resource and set NCCL_* (None: no RDMA asked). `volumes`: (pod volumes, container
    volumeMounts) of the task's PVCs (volumes.pod_volumes). `kueue`: (LocalQueue, pod
    group name): the pod carries Kueue's queue and pod-group labels, the group's size
    and is created gated (`kueue.x-k8s.io/admission`, as Kueue's webhook would gate it)."""
    limits: dict[str, str] = {"memory": f"{int(memory_gib * 1024)}Mi"}
    if gpus:
        limits[gpu_resource or NVIDIA_GPU] = str(gpus)
    if fabric is not None and fabric.resource:
        limits[fabric.resource] = str(max(1, fabric.per_node))
    env = [{"name": k, "value": v} for k, v in sorted(nccl_env(fabric).items())]
    env += [{"name": "LAUNCHER_K8S_RANK", "value": str(rank)},
            {"name": "LAUNCHER_K8S_SERVICE", "value": service_name(cluster)}]
    affinity: dict[str, Any] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {CLUSTER_LABEL: cluster}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    if node_terms:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": node_terms}}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": f"{cluster[:55]}-{rank}",
        "subdomain": service_name(cluster),
        "affinity": affinity,
        "tolerations": [{"key": NVIDIA_GPU, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": AMD_GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "main", "image": image, "command": ["/bin/sh", "-c", POD_SCRIPT],
            "env": env, "ports": [{"containerPort": 22, "name": "ssh"}],
            "resources": {"requests": {"cpu": str(cpus), "memory": limits["memory"]},
                          "limits": limits},
            "volumeMounts": [{"name": "ssh", "mountPath": SSH_DIR, "readOnly": True},
                             {"name": "dshm", "mountPath": "/dev/shm"}, *volumes[1]],
        }],
        "volumes": [{"name": "ssh", "secret": {"secretName": secret_name(cluster),
                                               "defaultMode": 0o400}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}}, *volumes[0]],
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    if priority_class:
        spec["priorityClassName"] = priority_class
    body: dict[str, Any] = {"metadata": {"name": pod_name(cluster, rank),
                                         "labels": {**labels(cluster), RANK_LABEL: str(rank)},
                                         "annotations": {NODES_ANNOTATION: str(num_nodes)}},
                            "spec": spec}
    if kueue is not None:
        body["metadata"]["labels"].update({KUEUE_QUEUE_LABEL: kueue[0], KUEUE_GROUP_LABEL: kueue[1]})
        body["metadata"]["annotations"][KUEUE_TOTAL_ANNOTATION] = str(num_nodes)
        spec["schedulingGates"] = [{"name": KUEUE_GATE}]
    return merge(body, pod_config)


def pod_group(cluster: str, token: str | None) -> str:
    """The gang's Kueue pod group: one per provision attempt (a relaunch after a
    preemption is a new group, not replacement pods of the old one's Workload), the same
    for every retry of one attempt (`token`: the request's idempotency token)."""
    import hashlib

    return f"{cluster[:54]}-{hashlib.sha256((token or '').encode()).hexdigest()[:8]}"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` deep-merged into a copy of `base` (see the module docstring)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        cur = out.get(k)
        if isinstance(cur, dict) and isinstance(v, dict):
            out[k] = merge(cur, v)
        elif k == "containers" and isinstance(cur, list) and isinstance(v, list):
            out[k] = [merge(c, v[i]) if i < len(v) and isinstance(v[i], dict) else c
                      for i, c in enumerate(cur)] + copy.deepcopy(v[len(cur):])
        elif isinstance(cur, list) and isinstance(v, list):
            out[k] = cur + copy.deepcopy(v)
        else:
            out[k] = copy.deepcopy(v)
    return out
