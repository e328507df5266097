"""The state of the Kubernetes API fake (tests/k8s_fake.py): objects with
resourceVersion, a watch history, label/field selectors, and a tiny scheduler.

Objects are plain dicts in the API's JSON shape, keyed by (resource, namespace, name)
("" namespace for cluster-scoped nodes and namespaces). Every change bumps one global
resourceVersion and appends (rv, type, resource, object) to the history that watches
read. The scheduler runs after every change that can matter: it binds Pending pods (in
creation order) to a Ready, schedulable node whose free allocatable holds the pod's
requests (limits stand in for missing requests, as the API server defaults them), whose
taints the pod tolerates, whose labels match its nodeSelector / required node affinity,
and where no pod matches its required podAntiAffinity (topologyKey hostname). A pod
that fits nowhere stays Pending with condition PodScheduled=False reason Unschedulable
and a FailedScheduling event whose message counts the nodes per reason, as
kube-scheduler writes it ("0/3 nodes are available: 2 Insufficient nvidia.com/gpu.").

PersistentVolumeClaims are validated and bound as tests/k8s_claims.py says (a pod whose
claim is missing or unbound waits), and a minimal Kueue (tests/k8s_kueue.py) gates
queued pods and admits their groups whole; a pod with scheduling gates is never bound.

Deletion is graceful: a deleted pod gets deletionTimestamp at once and is removed
`delete_delay` seconds later by the reaper thread. A bound pod runs at once, or after
`start_delay` seconds of ContainerCreating (the reaper starts it).
"""

from __future__ import annotations

import copy
import ipaddress
import re
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str, str]

# resource -> (kind, namespaced, short names)
RESOURCES: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "pods": ("Pod", True, ("po",)),
    "services": ("Service", True, ("svc",)),
    "events": ("Event", True, ("ev",)),
    "secrets": ("Secret", True, ()),
    "persistentvolumeclaims": ("PersistentVolumeClaim", True, ("pvc",)),
    "nodes": ("Node", False, ("no",)),
    "namespaces": ("Namespace", False, ("ns",)),
}
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "m": 1e-3}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantity(text: Any) -> float:
    """A resource.Quantity ("500m", "64Gi", "8", 2) as a number (cpu in cores)."""
    s = str(text)
    for suf in sorted(_SUFFIX, key=len, reverse=True):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * _SUFFIX[suf]
    return float(s)


class ApiError(Exception):
    """An answer with a `Status` body (code, reason, message)."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> Obj:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details,
                "code": self.code}


# ---- selectors -------------------------------------------------------------------


def _split(selector: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


_SET_RE = re.compile(r"^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$")


def label_match(selector: str | None, labels: dict[str, str]) -> bool:
    """A labelSelector string: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`.
    Raises ApiError 400 for one it cannot parse."""
    if not selector:
        return True
    for term in _split(selector):
        m = _SET_RE.match(term)
        if m:
            values = {v.strip() for v in m.group(3).split(",")}
            has = m.group(1) in labels and labels[m.group(1)] in values
            if has != (m.group(2) == "in"):
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif re.match(r"^[\w./-]+$", term):
            if term not in labels:
                return False
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
    return True


def _dig(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_match(selector: str | None, obj: Obj) -> bool:
    """A fieldSelector: `metadata.name=x,status.phase!=Failed,spec.nodeName=n`."""
    if not selector:
        return True
    for term in _split(selector):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if _dig(obj, k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if _dig(obj, k.strip()) != v.strip():
                return False
        else:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
    return True


def selector_match(sel: Obj | None, labels: dict[str, str]) -> bool:
    """A LabelSelector object (matchLabels + matchExpressions)."""
    if sel is None:
        return False
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    return all(_expr(e, labels) for e in sel.get("matchExpressions") or [])


def _expr(e: Obj, labels: dict[str, str]) -> bool:
    key, op, values = e["key"], e["operator"], e.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        a, b = int(labels[key]), int(values[0])
        return a > b if op == "Gt" else a < b
    return False


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def pod_requests(pod: Obj) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in pod["spec"].get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, q in merged.items():
            out[name] = out.get(name, 0.0) + quantity(q)
    return out


# ---- the store -------------------------------------------------------------------


class Store:
    """See the module docstring. All methods take the lock themselves."""

    def __init__(self, pod_net: str = "10.123.255.0/24") -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[Key, Obj] = {}
        self.history: list[tuple[int, str, str, Obj]] = []
        self.rv = 100
        self.pod_net = ipaddress.ip_network(pod_net)
        self.delete_delay = 0.1
        self.start_delay = 0.0  # a bound pod is ContainerCreating this long before Running
        self.bad_images: set[str] = set()
        self._removals: dict[Key, float] = {}
        self._starts: dict[Key, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._reaper, daemon=True, name="k8s-fake-reaper").start()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.objects.clear()
            self.history.clear()
            self._removals.clear()
            self._starts.clear()
            self.bad_images.clear()
            self.delete_delay = 0.1
            self.start_delay = 0.0
            from tests.k8s_claims import DEFAULT_CLASS, DEFAULT_CLASSES

            self.storage_classes: dict[str, str] = dict(DEFAULT_CLASSES)  # class -> binding mode
            self.default_class: str | None = DEFAULT_CLASS
            self.kueue_queues: set[str] = set()  # Kueue's LocalQueues (tests/k8s_kueue.py)
            self.kueue_withhold = False  # Kueue admits nothing
            for ns in ("default", "kube-system"):
                self._put("namespaces", "", {"metadata": {"name": ns}, "spec": {},
                                             "status": {"phase": "Active"}}, "ADDED")

    def close(self) -> None:
        self._stop.set()

    # ---- primitives ----

    def _put(self, res: str, ns: str, obj: Obj, typ: str) -> Obj:
        kind = RESOURCES[res][0]
        meta = obj.setdefault("metadata", {})
        self.rv += 1
        obj["kind"], obj["apiVersion"] = kind, "v1"
        meta["resourceVersion"] = str(self.rv)
        if typ == "ADDED":
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            meta.setdefault("labels", {})
            if ns:
                meta["namespace"] = ns
        key = (res, ns, meta["name"])
        if typ == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.history.append((self.rv, typ, res, copy.deepcopy(obj)))
        self.changed.notify_all()
        return obj

    def get(self, res: str, ns: str, name: str) -> Obj:
        with self.lock:
            obj = self.objects.get((res, ns, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{res} "{name}" not found',
                               {"name": name, "kind": res})
            return obj

    def items(self, res: str, ns: str | None = None, labels: str | None = None,
              fields: str | None = None) -> list[Obj]:
        with self.lock:
            return [o for (r, n, _), o in sorted(self.objects.items(),
                                                 key=lambda kv: int(kv[1]["metadata"]["resourceVersion"]))
                    if r == res and (ns is None or n == ns)
                    and label_match(labels, o["metadata"].get("labels") or {})
                    and field_match(fields, o)]

    def create(self, res: str, ns: str, body: Obj) -> Obj:
        with self.lock:
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name") or ""
            if not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name) or len(name) > 253:
                raise ApiError(422, "Invalid",
                               f'{RESOURCES[res][0]} "{name}" is invalid: metadata.name: Invalid '
                               f"value: {name!r}: a lowercase RFC 1123 subdomain must consist of "
                               "lower case alphanumeric characters, '-' or '.'",
                               {"name": name, "kind": RESOURCES[res][0]})
            if ns and ("namespaces", "", ns) not in self.objects:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                               {"name": ns, "kind": "namespaces"})
            if (res, ns, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{res} "{name}" already exists',
                               {"name": name, "kind": res})
            body.pop("status", None) if res == "pods" else None
            if res == "persistentvolumeclaims":
                from tests import k8s_claims

                k8s_claims.validate(name, body, self.default_class)
            if res == "pods":
                from tests import k8s_kueue

                k8s_kueue.webhook(body)
            self._defaults(res, body)
            obj = self._put(res, ns, body, "ADDED")
            if res == "persistentvolumeclaims":
                k8s_claims.after_create(self, obj)
            if res in ("pods", "nodes", "persistentvolumeclaims"):
                self.schedule()
            return obj

    def replace(self, res: str, ns: str, name: str, body: Obj) -> Obj:
        with self.lock:
            old = self.get(res, ns, name)
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": '
                               "the object has been modified; please apply your changes to the "
                               "latest version and try again", {"name": name, "kind": res})
            new = copy.deepcopy(body)
            for k in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
                if k in old["metadata"]:
                    new["metadata"][k] = old["metadata"][k]
            if res == "pods":
                new["status"] = old.get("status", {})
            return self._put(res, ns, new, "MODIFIED")

    def merge(self, res: str, ns: str, name: str, patch: Obj) -> Obj:
        with self.lock:
            obj = copy.deepcopy(self.get(res, ns, name))
            _merge(obj, patch)
            out = self._put(res, ns, obj, "MODIFIED")
            if res in ("pods", "nodes"):
                self.schedule()
            return out

    def delete(self, res: str, ns: str, name: str) -> Obj:
        with self.lock:
            obj = self.get(res, ns, name)
            if res != "pods" or self.delete_delay <= 0 or _terminal(obj) \
                    or not obj["spec"].get("nodeName"):
                self._remove(res, ns, name)
                return obj
            if "deletionTimestamp" not in obj["metadata"]:
                obj = copy.deepcopy(obj)
                obj["metadata"]["deletionTimestamp"] = now()
                obj["metadata"]["deletionGracePeriodSeconds"] = 30
                self._put(res, ns, obj, "MODIFIED")
                self._removals[(res, ns, name)] = time.monotonic() + self.delete_delay
            return obj

    def _remove(self, res: str, ns: str, name: str) -> None:
        obj = self.objects.get((res, ns, name))
        if obj is None:
            return
        self._removals.pop((res, ns, name), None)
        self._put(res, ns, copy.deepcopy(obj), "DELETED")
        if res == "pods":
            self.schedule()

    def _reaper(self) -> None:
        while not self._stop.wait(0.02):
            with self.lock:
                due = [k for k, t in self._removals.items() if t <= time.monotonic()]
                for k in due:
                    self._remove(*k)
                for k in [k for k, t in self._starts.items() if t <= time.monotonic()]:
                    self._starts.pop(k)
                    self._run(k)

    def _run(self, key: Key) -> None:
        """A ContainerCreating pod's containers start."""
        pod = self.objects.get(key)
        if pod is None or pod["status"].get("phase") != "Pending" or "deletionTimestamp" in pod["metadata"]:
            return
        pod = copy.deepcopy(pod)
        pod["status"]["phase"] = "Running"
        for c in pod["status"]["conditions"]:
            c["status"] = "True"
        for cs in pod["status"].get("containerStatuses") or []:
            cs.update(ready=True, started=True, state={"running": {"startedAt": now()}})
        self._put("pods", key[1], pod, "MODIFIED")

    def _defaults(self, res: str, body: Obj) -> None:
        if res == "pods":
            spec = body.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("schedulerName", "default-scheduler")
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort", "conditions": []}
            if spec.get("schedulingGates"):
                body["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastProbeTime": None, "lastTransitionTime": now()}]
        elif res == "services":
            spec = body.setdefault("spec", {})
            if spec.get("clusterIP") != "None":
                spec["clusterIP"] = f"10.96.0.{len(self.items('services')) + 10}"
            spec.setdefault("type", "ClusterIP")
        elif res == "namespaces":
            body["status"] = {"phase": "Active"}
        elif res == "secrets":
            body.setdefault("type", "Opaque")

    # ---- events ----

    def event(self, obj: Obj, reason: str, message: str, typ: str = "Normal",
              source: str = "default-scheduler") -> None:
        with self.lock:
            meta = obj["metadata"]
            ns = meta.get("namespace", "default")
            for ev in self.items("events", ns):
                if ev["involvedObject"].get("uid") == meta.get("uid") and ev["reason"] == reason \
                        and ev["message"] == message:
                    ev = copy.deepcopy(ev)
                    ev["count"] += 1
                    ev["lastTimestamp"] = now()
                    self._put("events", ns, ev, "MODIFIED")
                    return
            name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
            self._put("events", ns, {
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {"kind": obj["kind"], "namespace": ns, "name": meta["name"],
                                   "uid": meta.get("uid"), "apiVersion": "v1",
                                   "resourceVersion": meta.get("resourceVersion")},
                "reason": reason, "message": message, "type": typ, "count": 1,
                "source": {"component": source}, "firstTimestamp": now(), "lastTimestamp": now(),
                "reportingComponent": source,
            }, "ADDED")

    # ---- scheduling ----

    def _bound(self, node: str) -> list[Obj]:
        return [p for p in self.items("pods") if p["spec"].get("nodeName") == node
                and not _terminal(p)]

    def free(self, node: Obj) -> dict[str, float]:
        """The node's allocatable less what its live pods request."""
        with self.lock:
            alloc = {k: quantity(v) for k, v in (node["status"].get("allocatable") or {}).items()}
            for pod in self._bound(node["metadata"]["name"]):
                for k, v in pod_requests(pod).items():
                    alloc[k] = alloc.get(k, 0.0) - v
                alloc["pods"] = alloc.get("pods", 110.0) - 1
            return alloc

    def _why_not(self, pod: Obj, node: Obj) -> str | None:
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        ready = next((c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), None)
        if ready is None or ready["status"] != "True":
            return "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
        labels = node["metadata"].get("labels") or {}
        spec = pod["spec"]
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return "node(s) didn't match Pod's node affinity/selector"
        req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
               .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = req.get("nodeSelectorTerms") or []
        if terms and not any(all(_expr(e, labels) for e in t.get("matchExpressions") or [])
                             for t in terms):
            return "node(s) didn't match Pod's node affinity/selector"
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") \
                    and not tolerates(spec.get("tolerations") or [], taint):
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        anti = (((spec.get("affinity") or {}).get("podAntiAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        here = self._bound(node["metadata"]["name"])
        for term in anti:
            if any(selector_match(term.get("labelSelector"), p["metadata"].get("labels") or {})
                   for p in here):
                return "node(s) didn't match pod anti-affinity rules"
        free = self.free(node)
        for k, v in pod_requests(pod).items():
            if v > free.get(k, 0.0) + 1e-9:
                return f"Insufficient {k}"
        return None

    def schedule(self) -> None:
        """Bind every Pending unbound pod that fits (see the module docstring); Kueue
        (tests/k8s_kueue.py) admits first, and a pod with scheduling gates waits."""
        from tests import k8s_kueue

        with self.lock:
            k8s_kueue.admit(self)
            nodes = self.items("nodes")
            for pod in self.items("pods"):
                if pod["spec"].get("nodeName") or "deletionTimestamp" in pod["metadata"] \
                        or pod["status"].get("phase") != "Pending" or k8s_kueue.gated(pod):
                    continue
                from tests import k8s_claims

                blocked = k8s_claims.problem(self, pod)
                if blocked:
                    self._unschedulable(pod, f"0/{len(nodes)} nodes are available: {blocked}. "
                                        f"preemption: 0/{len(nodes)} nodes are available: "
                                        f"{len(nodes)} Preemption is not helpful for scheduling.")
                    continue
                reasons: dict[str, int] = {}
                chosen = None
                for node in nodes:
                    why = self._why_not(pod, node)
                    if why is None:
                        chosen = node
                        break
                    reasons[why] = reasons.get(why, 0) + 1
                if chosen is not None:
                    self._bind(pod, chosen)
                else:
                    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
                    msg = (f"0/{len(nodes)} nodes are available: {parts}. preemption: 0/{len(nodes)} "
                           "nodes are available: "
                           f"{len(nodes)} Preemption is not helpful for scheduling.")
                    self._unschedulable(pod, msg)

    def _unschedulable(self, pod: Obj, msg: str) -> None:
        conds = pod["status"].get("conditions") or []
        cur = next((c for c in conds if c["type"] == "PodScheduled"), None)
        if cur is None or cur.get("message") != msg:
            pod = copy.deepcopy(pod)
            pod["status"]["conditions"] = [c for c in conds if c["type"] != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": msg, "lastProbeTime": None, "lastTransitionTime": now()}]
            self._put("pods", pod["metadata"]["namespace"], pod, "MODIFIED")
        self.event(pod, "FailedScheduling", msg, "Warning")

    def _pod_ip(self) -> str:
        taken = {p["status"].get("podIP") for p in self.items("pods")}
        for host in self.pod_net.hosts():
            if str(host) not in taken:
                return str(host)
        raise RuntimeError(f"no free pod IP in {self.pod_net}")

    def _bind(self, pod: Obj, node: Obj) -> None:
        pod = copy.deepcopy(pod)
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        pod["spec"]["nodeName"] = node["metadata"]["name"]
        ts = now()
        host_ip = next((a["address"] for a in node["status"].get("addresses") or []
                        if a["type"] == "InternalIP"), "")
        ip = self._pod_ip()
        images = [c.get("image", "") for c in pod["spec"].get("containers") or []]
        bad = next((i for i in images if i in self.bad_images), None)
        st = pod["status"]
        st.update(hostIP=host_ip, podIP=ip, podIPs=[{"ip": ip}], startTime=ts)
        st["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
            {"type": "ContainersReady", "status": "False" if bad else "True", "lastProbeTime": None,
             "lastTransitionTime": ts},
            {"type": "Ready", "status": "False" if bad else "True", "lastProbeTime": None,
             "lastTransitionTime": ts},
        ]
        if bad:
            st["containerStatuses"] = [{"name": c["name"], "image": c.get("image", ""), "imageID": "",
                                        "ready": False, "restartCount": 0, "started": False,
                                        "state": {"waiting": {"reason": "ErrImagePull", "message":
                                                  f'failed to pull and unpack image "{bad}": not found'}}}
                                       for c in pod["spec"]["containers"]]
        elif self.start_delay > 0:
            for c in st["conditions"][2:]:
                c["status"] = "False"
            st["containerStatuses"] = [{"name": c["name"], "image": c.get("image", ""), "imageID": "",
                                        "ready": False, "restartCount": 0, "started": False,
                                        "state": {"waiting": {"reason": "ContainerCreating"}}}
                                       for c in pod["spec"]["containers"]]
            self._starts[("pods", ns, name)] = time.monotonic() + self.start_delay
        else:
            st["phase"] = "Running"
            st["containerStatuses"] = [{"name": c["name"], "image": c.get("image", ""),
                                        "imageID": "", "ready": True, "restartCount": 0,
                                        "started": True, "state": {"running": {"startedAt": ts}}}
                                       for c in pod["spec"]["containers"]]
        self._put("pods", ns, pod, "MODIFIED")
        from tests import k8s_claims

        k8s_claims.on_pod_bound(self, pod)
        self.event(pod, "Scheduled", f"Successfully assigned {ns}/{name} to {node['metadata']['name']}")
        if bad:
            self.event(pod, "Failed", f'Failed to pull image "{bad}": not found', "Warning", "kubelet")

    # ---- what a cluster does to pods (for tests) ----

    def pod_failed(self, ns: str, name: str, *, reason: str, message: str,
                   container_reason: str | None = None, exit_code: int = 137,
                   disruption: str | None = None, phase: str = "Failed") -> None:
        """The pod ends: `phase` with `reason` (e.g. Evicted), containers terminated."""
        with self.lock:
            pod = copy.deepcopy(self.get("pods", ns, name))
            st = pod["status"]
            st.update(phase=phase, reason=reason, message=message)
            for cs in st.get("containerStatuses") or []:
                cs["ready"] = False
                cs["state"] = {"terminated": {"exitCode": exit_code,
                                              "reason": container_reason or reason,
                                              "finishedAt": now()}}
            if disruption:
                st["conditions"] = [c for c in st.get("conditions") or [] if c["type"] != "DisruptionTarget"]
                st["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                         "reason": disruption, "message": message,
                                         "lastTransitionTime": now()})
            self._put("pods", ns, pod, "MODIFIED")
            if phase == "Failed" and reason:
                self.event(pod, reason, message, "Warning", "kubelet")
            self.schedule()

    def preempt(self, ns: str, name: str, by: str = "high-priority") -> None:
        """kube-scheduler preempts the pod for `by`: DisruptionTarget
        PreemptionByScheduler, a Preempted event, then graceful deletion."""
        with self.lock:
            pod = copy.deepcopy(self.get("pods", ns, name))
            pod["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                                "reason": "PreemptionByScheduler",
                                                "message": f"{by}: preempting to accommodate a "
                                                           "higher priority pod",
                                                "lastTransitionTime": now()})
            self._put("pods", ns, pod, "MODIFIED")
            self.event(pod, "Preempted", f"Preempted by pod {by} on node {pod['spec'].get('nodeName')}",
                       "Normal")
            self.delete("pods", ns, name)

    def lose_node(self, node_name: str) -> None:
        """The node stops reporting: Ready=Unknown (NodeStatusUnknown), the unreachable
        taint, and its pods' Ready condition False (the node controller's marks)."""
        with self.lock:
            node = copy.deepcopy(self.get("nodes", "", node_name))
            for c in node["status"]["conditions"]:
                if c["type"] == "Ready":
                    c.update(status="Unknown", reason="NodeStatusUnknown",
                             message="Kubelet stopped posting node status.")
            node["spec"].setdefault("taints", []).append(
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now()})
            self._put("nodes", "", node, "MODIFIED")
            for pod in self._bound(node_name):
                pod = copy.deepcopy(pod)
                for c in pod["status"].get("conditions") or []:
                    if c["type"] in ("Ready", "ContainersReady"):
                        c["status"] = "False"
                self._put("pods", pod["metadata"]["namespace"], pod, "MODIFIED")
            self.event(node, "NodeNotReady", f"Node {node_name} status is now: NodeNotReady",
                       source="node-controller")

    def watch_from(self, rv: int) -> Iterable[tuple[int, str, str, Obj]]:
        with self.lock:
            return [h for h in self.history if h[0] > rv]


def _terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def _merge(obj: Obj, patch: Obj) -> None:
    """JSON merge patch (RFC 7386)."""
    for k, v in patch.items():
        if v is None:
            obj.pop(k, None)
        elif isinstance(v, dict) and isinstance(obj.get(k), dict):
            _merge(obj[k], v)
        else:
            obj[k] = copy.deepcopy(v)


def make_node(name: str, *, ip: str, cpu: int = 32, memory_gi: int = 256, gpus: int = 0,
              gpu_resource: str = "nvidia.com/gpu", labels: dict[str, str] | None = None,
              taints: list[Obj] | None = None, extra: dict[str, str] | None = None) -> Obj:
    """A Ready node with this allocatable (extra: more extended resources, e.g. rdma/ib)."""
    alloc = {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "pods": "110",
             "ephemeral-storage": "500Gi", **(extra or {})}
    if gpus:
        alloc[gpu_resource] = str(gpus)
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "kubernetes.io/arch": "amd64", **(labels or {})}},
        "spec": {"taints": list(taints or [])},
        "status": {"capacity": dict(alloc), "allocatable": alloc,
                   "addresses": [{"type": "InternalIP", "address": ip},
                                 {"type": "Hostname", "address": name}],
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "kubelet is posting ready status",
                                   "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
                   "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.uuid4()),
                                "containerRuntimeVersion": "containerd://1.7.13",
                                "kernelVersion": "6.1.0", "kubeProxyVersion": "v1.30.0",
                                "kubeletVersion": "v1.30.0", "machineID": uuid.uuid4().hex,
                                "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS",
                                "systemUUID": str(uuid.uuid4())}},
    }
