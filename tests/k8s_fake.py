"""A wire-format fake of the Kubernetes API server: core/v1 over HTTPS (TESTING.md,
"Kubernetes"). Real clients talk to it: the official `kubernetes` Python client and
`kubectl` (tests/k8s/test_k8s_fake.py), through a kubeconfig `write_kubeconfig` makes.

    fake = K8sFake(pod_net="10.123.4.64/27").serve()     # https://127.0.0.1:PORT
    fake.add_node(make_node("gpu-1", ip="10.0.0.1", gpus=8, labels={...}))
    write_kubeconfig(path, {"ctx-a": fake})               # token + inline CA per context
    fake.store.items("pods")                              # what the product made
    fake.fail("create pods", 500, times=1, skip=1)        # fault at one API call
    fake.store.preempt("default", "pod-x")                # what a cluster does to pods

Served: /version, /api, /api/v1, /apis, /apis/authorization.k8s.io/v1, /openapi/v3
(discovery, as kubectl reads it); for pods, services, events, secrets,
persistentvolumeclaims (namespaced) and nodes, namespaces (cluster-scoped): list (with
labelSelector, fieldSelector, limit ignored), `?watch=true` (newline-delimited JSON
WatchEvents over a chunked response, from resourceVersion or "now" with synthetic
ADDED events, until timeoutSeconds), get, create (POST), replace (PUT), merge/strategic
patch (PATCH), delete and deletecollection, pods/NAME/status; and
selfsubjectaccessreviews. Errors are `Status` bodies with the API's codes and reasons
(401 Unauthorized, 403 Forbidden, 404 NotFound, 409 AlreadyExists/Conflict, 422
Invalid). Auth is a bearer token: `fake.tokens` maps token -> (user, allowed verbs or
None for all); a verb not allowed is 403 and answers `allowed: false` in an access review.

Faults: `fail(name, code, times=1, skip=0, apply=False)` answers the next `times`
requests named `name` ("create pods", "list pods", "watch pods", "delete services",
"deletecollection pods", "get nodes", "create selfsubjectaccessreviews", ...) after
letting `skip` through, with a Status of that code (`apply`: carried out first, only the
answer is lost). `hold(name, skip=0)` carries the request out but holds its answer
until `release()` (`arrived` is set when it comes): a client can be killed there.
`trap(name, action, skip=0, after=False)` calls `action()` (e.g. a SIGKILL of the
process that sent it) when request `name` arrives, before it is carried out (the
request is dropped: the connection closes unanswered) or, with `after`, once it has
been carried out (the answer is never sent). `calls` records (name, code) per request.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from tests.k8s_store import RESOURCES, ApiError, Obj, Store

TOKEN = "fake-admin-token"
_VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0", "gitCommit": "fake",
            "gitTreeState": "clean", "buildDate": "2024-04-17T00:00:00Z", "goVersion": "go1.22.2",
            "compiler": "gc", "platform": "linux/amd64"}
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _resource_list() -> Obj:
    res = []
    for name, (kind, namespaced, short) in RESOURCES.items():
        res.append({"name": name, "singularName": kind.lower(), "namespaced": namespaced,
                    "kind": kind, "verbs": _VERBS, "shortNames": list(short)})
        if name == "pods":
            res.append({"name": "pods/status", "singularName": "", "namespaced": True,
                        "kind": "Pod", "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": res}


_AUTHZ = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "authorization.k8s.io/v1",
          "resources": [{"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview",
                         "namespaced": False, "kind": "SelfSubjectAccessReview", "verbs": ["create"]}]}
_GROUPS = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
    {"name": "authorization.k8s.io",
     "versions": [{"groupVersion": "authorization.k8s.io/v1", "version": "v1"}],
     "preferredVersion": {"groupVersion": "authorization.k8s.io/v1", "version": "v1"}}]}


def self_signed() -> tuple[bytes, bytes]:
    """(cert PEM, key PEM) for 127.0.0.1, valid a day (client-go sends a bearer token
    over TLS only)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8s-fake")])
    t0 = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(t0).not_valid_after(t0 + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


class K8sFake:
    """See the module docstring."""

    def __init__(self, pod_net: str = "10.123.255.0/24", name: str = "fake") -> None:
        self.name = name
        self.store = Store(pod_net)
        self.tokens: dict[str, tuple[str, set[str] | None]] = {}
        self.faults: list[list[Any]] = []  # [name, code, times, skip, apply]
        self.calls: list[tuple[str, int]] = []
        self._hold: list[Any] = []
        self._trap: list[Any] = []  # [name, skip, action, after]
        self._release = threading.Event()
        self.arrived = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self.endpoint = ""
        self.ca_pem = b""
        self.reset()

    def reset(self) -> None:
        with self.store.lock:
            self.store.reset()
            self.tokens = {TOKEN: ("admin", None)}
            self.faults.clear()
            self.calls.clear()
            self._hold = []
            self._trap = []

    # ---- test helpers ----

    def add_node(self, node: Obj) -> Obj:
        return self.store.create("nodes", "", node)

    def fail(self, name: str, code: int, times: int = 1, skip: int = 0, apply: bool = False) -> None:
        with self.store.lock:
            self.faults.append([name, code, times, skip, apply])

    def hold(self, name: str, skip: int = 0) -> None:
        with self.store.lock:
            self._hold = [name, skip]
            self._release.clear()
            self.arrived.clear()

    def release(self) -> None:
        with self.store.lock:
            self._hold = []
        self._release.set()

    def trap(self, name: str, action: Callable[[], None], skip: int = 0, after: bool = False) -> None:
        with self.store.lock:
            self._trap = [name, skip, action, after]

    def _trapped(self, name: str, after: bool) -> Callable[[], None] | None:
        """The trap's action, once, when request `name` reaches it (see the docstring)."""
        with self.store.lock:
            t = self._trap
            if not t or t[0] != name or t[3] != after:
                return None
            if t[1] > 0:
                t[1] -= 1
                return None
            self._trap = []
            return t[2]

    def objects(self, res: str, selector: str | None = None) -> list[Obj]:
        return self.store.items(res, None, selector)

    def live_pods(self) -> list[Obj]:
        """Pods a kubelet would be running: bound, not terminal, not being deleted."""
        return [p for p in self.store.items("pods") if p["spec"].get("nodeName")
                and p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]]

    def _held(self, name: str) -> bool:
        if not self._hold or self._hold[0] != name:
            return False
        if self._hold[1] > 0:
            self._hold[1] -= 1
            return False
        self._hold = []
        return True

    # ---- routing ----

    def handle(self, method: str, path: str, query: dict[str, str], body: Any,
               token: str | None, content_type: str) -> tuple[int, Any, str | None]:
        """(code, body, route name); raises ApiError for Status answers."""
        parts = [p for p in path.split("/") if p]
        if path in ("/version", "/version/"):
            return 200, _VERSION, None
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.endpoint[len("https://"):]}]}, None
        if parts == ["apis"]:
            return 200, _GROUPS, None
        if parts == ["api", "v1"]:
            return 200, _resource_list(), None
        if parts == ["apis", "authorization.k8s.io", "v1"]:
            return 200, _AUTHZ, None
        if parts[:1] == ["openapi"]:
            return 200, {"openapi": "3.0.0", "info": {"title": "k8s-fake", "version": "v1"},
                         "paths": {}}, None
        if token is None or token not in self.tokens:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        user, allowed = self.tokens[token]
        if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and method == "POST":
            attrs = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
            ok = allowed is None or attrs.get("verb") in allowed
            return 201, {**body, "kind": "SelfSubjectAccessReview",
                         "apiVersion": "authorization.k8s.io/v1",
                         "status": {"allowed": ok, **({} if ok else {"reason": f"{user} may not"})}}, \
                "create selfsubjectaccessreviews"
        if parts[:2] != ["api", "v1"]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rest = parts[2:]
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res, name = rest[0], (rest[1] if len(rest) > 1 else None)
        sub = rest[2] if len(rest) > 2 else None
        namespaced = RESOURCES[res][1]
        if namespaced and ns is None and (name is not None or method != "GET"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        scope = ns if namespaced else ""
        verb = {"GET": "get" if name else ("watch" if str(query.get("watch", "")).lower() in ("true", "1") else "list"),
                "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}[method]
        route = f"{verb} {res}"
        if allowed is not None and verb not in allowed:
            where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
            raise ApiError(403, "Forbidden", f'{res} is forbidden: User "{user}" cannot {verb} '
                           f'resource "{res}" in API group ""{where}',
                           {"kind": res, **({"name": name} if name else {})})
        self._maybe_fault(route)
        st = self.store
        if verb == "list":
            items = st.items(res, scope if namespaced else None, query.get("labelSelector"),
                             query.get("fieldSelector"))
            return 200, {"kind": RESOURCES[res][0] + "List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(st.rv)}, "items": items}, route
        if verb == "watch":
            return 200, ("WATCH", res, scope if namespaced else None), route
        if verb == "get":
            return 200, st.get(res, scope, name or ""), route
        if verb == "create":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
            if res == "namespaces":
                return 201, st.create(res, "", body), route
            return 201, st.create(res, scope, body), route
        if verb == "update":
            return 200, st.replace(res, scope, name or "", body), route
        if verb == "patch":
            if "json-patch" in content_type:
                raise ApiError(415, "UnsupportedMediaType", "json-patch is not supported by this fake")
            if sub == "status" and res == "pods":
                return 200, st.merge(res, scope, name or "", {"status": body.get("status", {})}), route
            return 200, st.merge(res, scope, name or "", body), route
        if verb == "delete":
            obj = st.delete(res, scope, name or "")
            return 200, obj, route
        with st.lock:  # deletecollection
            items = st.items(res, scope if namespaced else None, query.get("labelSelector"),
                             query.get("fieldSelector"))
            for o in items:
                st.delete(res, scope, o["metadata"]["name"])
        return 200, {"kind": RESOURCES[res][0] + "List", "apiVersion": "v1",
                     "metadata": {"resourceVersion": str(st.rv)}, "items": items}, route

    def _maybe_fault(self, route: str) -> None:
        with self.store.lock:
            fault = next((f for f in self.faults if f[0] == route), None)
            if fault is None:
                return
            if fault[3] > 0:
                fault[3] -= 1
                return
            fault[2] -= 1
            if fault[2] <= 0:
                self.faults.remove(fault)
        code = fault[1]
        reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests",
                  403: "Forbidden", 409: "Conflict", 504: "Timeout"}.get(code, "InternalError")
        raise _Fault(code, reason, f"injected fault at {route}", bool(fault[4]))

    # ---- server ----

    def serve(self) -> K8sFake:
        import ssl
        import tempfile

        cert, key = self_signed()
        self.ca_pem = cert
        tmp = Path(tempfile.mkdtemp(prefix="k8s-fake-"))
        (tmp / "cert.pem").write_bytes(cert)
        (tmp / "key.pem").write_bytes(key)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
        fake = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = super().get_request()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

        self._server = Server(("127.0.0.1", 0), _handler(fake))
        threading.Thread(target=self._server.serve_forever, daemon=True, name="k8s-fake").start()
        self.endpoint = f"https://127.0.0.1:{self._server.server_address[1]}"
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.store.close()


class _Fault(ApiError):
    def __init__(self, code: int, reason: str, message: str, apply: bool) -> None:
        super().__init__(code, reason, message)
        self.apply = apply


def _handler(fake: K8sFake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _do(self) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            auth = self.headers.get("Authorization", "")
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
            ctype = self.headers.get("Content-Type", "")
            route = None
            action = fake._trapped(_route_of(self.command, url.path, query), after=False)
            if action is not None:
                action()
                self.close_connection = True
                return
            try:
                try:
                    code, out, route = fake.handle(self.command, url.path, query, body, token, ctype)
                except _Fault as f:
                    route = _route_of(self.command, url.path, query)
                    if f.apply:
                        with contextlib.suppress(ApiError):
                            fake.handle(self.command, url.path, query, body, token, ctype)
                    raise
            except ApiError as e:
                with fake.store.lock:
                    fake.calls.append((route or _route_of(self.command, url.path, query), e.code))
                self._send(e.code, e.status())
                return
            with fake.store.lock:
                if route:
                    fake.calls.append((route, code))
                held = route is not None and fake._held(route)
            action = fake._trapped(route, after=True) if route else None
            if action is not None:
                action()
                self.close_connection = True
                return
            if held:
                fake.arrived.set()
                fake._release.wait(30)
            try:
                if isinstance(out, tuple) and out and out[0] == "WATCH":
                    self._watch(out[1], out[2], query)
                else:
                    self._send(code, out)
            except OSError:
                pass  # the client is gone

        def _watch(self, res: str, ns: str | None, query: dict[str, str]) -> None:
            from tests.k8s_store import field_match, label_match

            st = fake.store
            timeout = float(query.get("timeoutSeconds") or 1800)
            deadline = time.monotonic() + timeout
            labels, fields = query.get("labelSelector"), query.get("fieldSelector")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def emit(typ: str, obj: Obj) -> None:
                line = json.dumps({"type": typ, "object": obj}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()

            def wanted(r: str, obj: Obj) -> bool:
                meta = obj["metadata"]
                return r == res and (ns is None or meta.get("namespace", "") == ns) \
                    and label_match(labels, meta.get("labels") or {}) and field_match(fields, obj)

            rv_text = query.get("resourceVersion") or ""
            with st.lock:
                if rv_text in ("", "0") or query.get("sendInitialEvents") == "true":
                    start = st.rv
                    initial = [o for o in st.items(res, ns) if wanted(res, o)]
                else:
                    start, initial = int(rv_text), []
            for obj in initial:
                emit("ADDED", obj)
            if query.get("sendInitialEvents") == "true":  # a WatchList: says where the list ends
                emit("BOOKMARK", {"kind": RESOURCES[res][0], "apiVersion": "v1", "metadata": {
                    "resourceVersion": str(start),
                    "annotations": {"k8s.io/initial-events-end": "true"}}})
            seen = start
            while time.monotonic() < deadline:
                with st.lock:
                    batch = [h for h in st.history if h[0] > seen]
                    if not batch:
                        st.changed.wait(min(0.5, max(0.01, deadline - time.monotonic())))
                        continue
                for rv, typ, r, obj in batch:
                    seen = rv
                    if wanted(r, obj):
                        emit(typ, obj)
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do

    return Handler


def _route_of(method: str, path: str, query: dict[str, str]) -> str:
    parts = [p for p in path.split("/") if p]
    res = next((p for p in reversed(parts) if p in RESOURCES), parts[-1] if parts else "")
    named = bool(parts) and parts[-1] not in RESOURCES
    verb = {"GET": "get" if named else ("watch" if str(query.get("watch", "")).lower() in ("true", "1") else "list"),
            "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection"}.get(method, method.lower())
    return f"{verb} {res}"


def write_kubeconfig(path: Path, contexts: dict[str, K8sFake], *, current: str | None = None,
                     namespace: str | None = None, tokens: dict[str, str] | None = None) -> Path:
    """A kubeconfig with one cluster + user + context per fake (bearer token, the fake's
    CA inline); `current` (default: the first) is the current context."""
    clusters, users, ctxs = [], [], []
    for name, fake in contexts.items():
        clusters.append({"name": name, "cluster": {
            "server": fake.endpoint,
            "certificate-authority-data": base64.b64encode(fake.ca_pem).decode()}})
        users.append({"name": f"{name}-user",
                      "user": {"token": (tokens or {}).get(name, TOKEN)}})
        c: dict[str, Any] = {"cluster": name, "user": f"{name}-user"}
        if namespace:
            c["namespace"] = namespace
        ctxs.append({"name": name, "context": c})
    body = {"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users,
            "contexts": ctxs, "current-context": current or next(iter(contexts)), "preferences": {}}
    path.write_text(yaml.safe_dump(body))
    return path


def wait_until(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `cond` (a fake's state, no event to wait on from outside) until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout}s")
        time.sleep(0.02)


@contextlib.contextmanager
def served(pod_net: str = "10.123.255.0/24", name: str = "fake") -> Iterator[K8sFake]:
    fake = K8sFake(pod_net, name).serve()
    try:
        yield fake
    finally:
        fake.close()
