"""The skeleton the Lambda and Vast fakes share: a stdlib ThreadingHTTPServer on
127.0.0.1, JSON in and out, bearer-key auth, fault injection, IPs inside the lab; and
their two fixtures' bodies (`configured_fake`: one fake per session, reset per test,
the key and the config section pointing at it; `fake_with_bodies`: its instances'
addresses inside the netns lab, with an sshd body per live instance).

A subclass defines `route(method, path, query, body) -> (status, body)`, the
`unauthorized()` body of its API, `reset()` (back to a fresh account) and
`list_instances()` (the live instances' (id, address, authorized key)). Faults: `fake.fail(name, status, body, times=1, skip=0,
apply=False)` answers the next `times` requests of the route `name` (as `route_name`
names them), after letting `skip` through, with that status and body (`apply`: the
request is carried out first and only its answer is lost, as when a connection drops); `fake.rate_limit(name, times)` answers 429 with `Retry-After: 0`
(and the API's own 429 body). `fake.calls` records (route name, status) per request.
`on_delete` callbacks get the ids of instances that disappear (bodies die with them).
`fake.hold(name, skip=0)`: the next request of `name` (after `skip`) is carried out but
its answer is held back until `fake.release()` (`fake.arrived` is set when it comes):
a client can be killed between a create and its answer.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

Answer = tuple[int, Any]


class RestFake:
    """See the module docstring. `subnet` is the lab's /24; `ip_range` the part of it
    this cloud's instances take (e.g. ".16/29")."""

    key = "fake-api-key"

    def __init__(self, subnet: str, ip_range: str) -> None:
        net = ipaddress.ip_network(subnet)
        base, bits = ip_range[1:].split("/")
        self.ip_net = ipaddress.ip_network(f"{net.network_address + int(base)}/{bits}")
        self.lock = threading.RLock()
        self.faults: list[list[Any]] = []  # [name, status, body, times, headers, skip, apply]
        self.calls: list[tuple[str, int]] = []
        self.on_delete: list[Callable[[list[str]], None]] = []
        self.bodies: Any = None
        self._hold: list[Any] = []  # [name, skip]
        self._release = threading.Event()
        self.arrived = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self.endpoint = ""

    # ---- what subclasses define ----
    def route_name(self, method: str, path: str) -> str:
        raise NotImplementedError

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        raise NotImplementedError

    def unauthorized(self) -> Answer:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def list_instances(self) -> list[tuple[str, str | None, str | None]]:
        raise NotImplementedError

    def too_many(self) -> Any:
        return {"error": "rate limited"}

    def authorized(self, headers: Any, query: dict[str, list[str]]) -> bool:
        return bool(headers.get("Authorization", "") == f"Bearer {self.key}")

    # ---- faults and helpers ----
    def fail(self, name: str, status: int, body: Any, times: int = 1, skip: int = 0,
             apply: bool = False) -> None:
        with self.lock:
            self.faults.append([name, status, body, times, {}, skip, apply])

    def rate_limit(self, name: str, times: int = 1) -> None:
        with self.lock:
            self.faults.append([name, 429, self.too_many(), times, {"Retry-After": "0"}, 0, False])

    def hold(self, name: str, skip: int = 0) -> None:
        with self.lock:
            self._hold = [name, skip]
            self._release.clear()
            self.arrived.clear()

    def release(self) -> None:
        with self.lock:
            self._hold = []
        self._release.set()

    def _held(self, name: str) -> bool:
        if not self._hold or self._hold[0] != name:
            return False
        if self._hold[1] > 0:
            self._hold[1] -= 1
            return False
        self._hold = []
        return True

    def free_ip(self, taken: set[str]) -> str:
        for host in self.ip_net.hosts():
            if str(host) not in taken:
                return str(host)
        raise RuntimeError(f"no free address in {self.ip_net}")

    def deleted(self, ids: list[str]) -> None:
        for cb in list(self.on_delete):
            cb(ids)

    # ---- server ----
    def serve(self) -> RestFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                name = fake.route_name(self.command, url.path)
                headers: dict[str, str] = {}
                with fake.lock:
                    if not fake.authorized(self.headers, query):
                        status, out = fake.unauthorized()
                    else:
                        fault = next((f for f in fake.faults if f[0] == name), None)
                        if fault is not None and fault[5] > 0:
                            fault[5] -= 1
                            fault = None
                        if fault is not None:
                            fault[3] -= 1
                            if fault[3] <= 0:
                                fake.faults.remove(fault)
                            if fault[6]:
                                fake.route(self.command, url.path, query, body)
                            status, out, headers = fault[1], fault[2], fault[4]
                        else:
                            status, out = fake.route(self.command, url.path, query, body)
                    fake.calls.append((name, status))
                    held = fake._held(name)
                if held:
                    fake.arrived.set()
                    fake._release.wait(30)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client is gone (killed while its answer was held)

            do_GET = do_POST = do_PUT = do_DELETE = _do

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


_reserved: set[tuple[int, str]] = set()


def lab_ip_net(lab: Any, ip_range: str) -> Any:
    """`ip_range` (".16/29") inside the lab's /24, reserved there once per lab so automatic
    nodes never take it; with no lab, inside 10.123.255.0/24 (never given a body)."""
    subnet = lab.subnet if lab is not None else "10.123.255.0/24"
    net = ipaddress.ip_network(subnet)
    base, bits = ip_range[1:].split("/")
    out = ipaddress.ip_network(f"{net.network_address + int(base)}/{bits}")
    if lab is not None and (id(lab), ip_range) not in _reserved:
        lab.reserve(str(out))
        _reserved.add((id(lab), ip_range))
    return out


def lab_or_none(request: pytest.FixtureRequest) -> Any:
    """The test's netns lab when it can make sshd nodes, else None."""
    try:
        lab = request.getfixturevalue("netns_lab")
    except pytest.skip.Exception:
        return None
    return lab if lab.netns_mode else None


def write_config(launcher_home: Path, section: str, values: dict[str, Any]) -> None:
    """Set `section` of $LAUNCHER_HOME/config.yaml to `values` (other sections kept)."""
    config = launcher_home / "config.yaml"
    body: dict[str, Any] = (yaml.safe_load(config.read_text()) if config.exists() else {}) or {}
    body[section] = values
    config.write_text(yaml.safe_dump(body))


F = TypeVar("F", bound=RestFake)


@contextlib.contextmanager
def configured_fake(served: list[F], make: Callable[[], F], launcher_home: Path,
                    monkeypatch: pytest.MonkeyPatch, env: str, section: str,
                    config: Callable[[F], dict[str, Any]]) -> Iterator[F]:
    """The session's fake (`served` holds it; `make()` builds it the first time), reset
    for this test; `{env}_API_KEY` set to its key, `{env}_API_ENDPOINT` unset, config
    section `section` = `config(fake)`; the cloud registry's cache cleared around it."""
    if not served:
        fake0 = make()
        fake0.serve()
        served.append(fake0)
    fake = served[0]
    fake.reset()
    monkeypatch.setenv(f"{env}_API_KEY", fake.key)
    monkeypatch.delenv(f"{env}_API_ENDPOINT", raising=False)
    write_config(launcher_home, section, config(fake))
    from launcher.clouds import registry

    registry.get_cloud.cache_clear()
    try:
        yield fake
    finally:
        registry.get_cloud.cache_clear()


@contextlib.contextmanager
def fake_with_bodies(request: pytest.FixtureRequest, fake: F, ip_range: str,
                     name: str, title: str, *,
                     gpu_image: Callable[[Path], dict[str, str]] | None = None) -> Iterator[F]:
    """`fake` handing out addresses of `ip_range` inside the lab, with an sshd body per
    live instance (killed when the instance goes); skips without a netns lab. Fails the
    test if anything connected outside the lab. `gpu_image(lab workdir)`: the bodies'
    environment (a fake GPU machine for the health gate: tests/fakes)."""
    from tests.aws_moto import ConnectGuard
    from tests.cloud_bodies import CloudBodies

    lab = lab_or_none(request)
    if lab is None:
        pytest.skip(f"{title} bodies need network-namespace sshd nodes (netns lab unavailable)")
    fake.ip_net = lab_ip_net(lab, ip_range)
    env = gpu_image(Path(lab.workdir)) if gpu_image is not None else None
    bodies = CloudBodies(lab, fake.list_instances, name=name, env=env).start()
    fake.on_delete.append(bodies.kill)
    fake.bodies = bodies
    try:
        with ConnectGuard(lab.subnet) as guard:
            yield fake
    finally:
        fake.bodies = None
        bodies.close()
        fake.ip_net = lab_ip_net(None, ip_range)
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"
