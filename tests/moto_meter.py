"""A WSGI middleware around moto's server: counts the AWS API requests that reach it, and
acts at the Nth (kill a process before or after moto handles it; answer with an EC2 error).

    meter = MotoMeter.install(moto_server)      # wraps the running server's app
    meter.reset()                                # count from 0
    meter.kill_at(7, pid, when="before")         # request 7: SIGKILL pid, drop the request
    meter.fail(("ec2", "RunInstances"), 5, "InsufficientInstanceCapacity")
    meter.fail_at(7, "UnauthorizedOperation", 403)  # request 7 alone gets that error
    meter.calls                                  # [("ec2", "DescribeVpcs"), ...]
    meter.handling_s                             # seconds moto spent handling requests
    meter.uninstall()

A request is counted when it is an EC2, SSM or STS API call (the `Action=` of the form
body for EC2/STS, `X-Amz-Target` for SSM's JSON protocol; the service from the SigV4
credential scope); S3 and anything else pass through uncounted. werkzeug's request
handler reads `server.app` on every request, so wrapping the app of the live
ThreadedMotoServer takes effect at once, and unwrapping restores it.

"before": the client is SIGKILLed when its request arrives, and the request is dropped
(EC2 never acts on it, as when the client dies before the request is sent). "after":
moto handles the request (EC2 acted on it), then the client is SIGKILLed before the
response is sent (it never learns the result).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

COUNTED = ("ec2", "ssm", "sts")
_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
_ACTION = re.compile(rb"(?:^|&)Action=([A-Za-z0-9]+)")

StartResponse = Callable[..., Any]


def ec2_error_body(code: str, message: str) -> bytes:
    """EC2's error response body (its Query API's XML shape)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message>"
        "</Error></Errors><RequestID>00000000-0000-0000-0000-000000000000</RequestID>"
        "</Response>"
    ).encode()


@dataclass
class _Kill:
    match: Callable[[int, tuple[str, str], list[tuple[str, str]]], bool]
    pid: int | Callable[[], int | None]
    when: str  # "before" | "after"
    own: bool = False  # count only the requests `pid` itself sends
    seen: list[tuple[str, str]] = field(default_factory=list)
    fired: bool = False


@dataclass
class _Fail:
    call: tuple[str, str]
    remaining: int
    code: str
    status: int


class MotoMeter:
    def __init__(self, server: Any, app: Any) -> None:
        self._server = server  # werkzeug's BaseWSGIServer
        self.app = app
        self._lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []
        self.handling_s = 0.0  # moto's own time on counted requests
        # every counted request: (call, arrived, answered) on time.monotonic()
        self.log: list[tuple[tuple[str, str], float, float]] = []
        self._kill: _Kill | None = None
        self._fired = False
        self._fails: list[_Fail] = []
        self._fail_at: tuple[int, str, int] | None = None  # (n, code, status)
        self.on_request: Callable[[int, tuple[str, str]], None] | None = None

    @classmethod
    def install(cls, moto_server: Any) -> MotoMeter:
        """Wrap the app of a tests.aws_moto.MotoServer (a running ThreadedMotoServer)."""
        wsgi = moto_server.server._server
        app = wsgi.app
        if isinstance(app, MotoMeter):  # never nest
            app = app.app
        meter = cls(wsgi, app)
        wsgi.app = meter
        return meter

    def uninstall(self) -> None:
        if self._server.app is self:
            self._server.app = self.app

    # ---- configuration ----------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self.calls = []
            self.handling_s = 0.0
            self.log = []
            self._kill = None
            self._fired = False
            self._fails = []
            self._fail_at = None

    def kill_at(self, n: int, pid: int, when: str) -> None:
        """SIGKILL `pid` at counted request `n` (1-based), `when` "before" or "after"
        moto handles it."""
        self.kill_when(lambda i, _call, _calls: i == n, pid, when)

    def kill_on(self, call: tuple[str, str] | None, occurrence: int,
                pid: int | Callable[[], int | None], when: str, *, own: bool = False) -> None:
        """SIGKILL at the `occurrence`th request `call` (service, action; None: any)
        since now. `pid` may be a function, asked when a request arrives; with `own`,
        only the requests that `pid` itself sends count (its socket, by /proc)."""
        self.kill_when(lambda _i, c, seen: (call is None or c == call)
                       and sum(call is None or x == call for x in seen) == occurrence,
                       pid, when, own=own)

    def kill_when(self, match: Callable[[int, tuple[str, str], list[tuple[str, str]]], bool],
                  pid: int | Callable[[], int | None], when: str, *, own: bool = False) -> None:
        """SIGKILL at the first request where `match(n, call, calls seen so far)` holds
        (n counts from `reset`; the calls seen, from now, only `pid`'s with `own`)."""
        assert when in ("before", "after"), when
        with self._lock:
            self._kill = _Kill(match, pid, when, own)
            self._fired = False

    @property
    def killed(self) -> bool:
        """The last `kill_at` fired (kept after `disarm`, cleared by `reset`)."""
        return self._fired

    @property
    def seen(self) -> list[tuple[str, str]]:
        """The calls the armed kill has counted so far."""
        return list(self._kill.seen) if self._kill is not None else []

    def disarm(self) -> None:
        with self._lock:
            self._kill = None

    def fail(self, call: tuple[str, str], times: int, code: str, status: int = 500) -> None:
        """Answer the next `times` requests `call` (service, action) with EC2's error
        `code` (HTTP `status`; EC2 answers capacity errors with 500) instead of moto."""
        with self._lock:
            self._fails.append(_Fail(call, times, code, status))

    def fail_at(self, n: int, code: str, status: int = 400) -> None:
        """Answer counted request `n` (1-based, from `reset`) alone with EC2's error `code`."""
        with self._lock:
            self._fail_at = (n, code, status)

    # ---- WSGI -------------------------------------------------------------------------

    @staticmethod
    def _identify(environ: dict[str, Any]) -> tuple[str, str] | None:
        scope = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
        if scope is None or scope.group(2) not in COUNTED:
            return None
        service = scope.group(2)
        target = environ.get("HTTP_X_AMZ_TARGET")
        if target:
            return service, target.rsplit(".", 1)[-1]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        found = _ACTION.search(body)
        return service, found.group(1).decode() if found else "?"

    def handling_between(self, start: float, end: float) -> float:
        """Seconds moto spent on counted requests inside [start, end] (monotonic)."""
        with self._lock:
            return sum(max(0.0, min(b, end) - max(a, start)) for _, a, b in self.log)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        arrived = time.monotonic()
        call = self._identify(environ)
        if call is None:
            return self.app(environ, start_response)
        with self._lock:
            self.calls.append(call)
            n = len(self.calls)
            kill = self._kill
            if kill is not None and not kill.fired and (
                    not kill.own or _sent_by(kill.pid, environ)):
                kill.seen.append(call)
                if kill.match(n, call, kill.seen):
                    kill.fired = self._fired = True
                else:
                    kill = None
            else:
                kill = None
            fail = next((f for f in self._fails if f.call == call and f.remaining > 0), None)
            if fail is not None:
                fail.remaining -= 1
            elif self._fail_at is not None and self._fail_at[0] == n:
                fail = _Fail(call, 0, self._fail_at[1], self._fail_at[2])
        if self.on_request is not None:
            self.on_request(n, call)
        if kill is not None and kill.when == "before":
            _sigkill(kill.pid)
            return _respond(start_response, 503, ec2_error_body("Unavailable", "client gone"))
        if fail is not None:
            with self._lock:
                self.log.append((call, arrived, time.monotonic()))
            return _respond(start_response, fail.status,
                            ec2_error_body(fail.code, f"injected {fail.code}"))
        t0 = time.monotonic()
        body = list(self.app(environ, start_response))  # moto answers in one piece
        t1 = time.monotonic()
        with self._lock:
            self.handling_s += t1 - t0
            self.log.append((call, arrived, t1))
        if kill is not None:
            _sigkill(kill.pid)
        return body


def _sent_by(pid: int | Callable[[], int | None], environ: dict[str, Any]) -> bool:
    """The request's TCP connection belongs to process `pid` (same network namespace):
    its client port's socket inode (/proc/net/tcp*) is among the process's fds."""
    target = pid() if callable(pid) else pid
    port = int(environ.get("REMOTE_PORT") or 0)
    if target is None or not port:
        return False
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                cols = line.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{cols[9]}]")
    fd_dir = f"/proc/{target}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"{fd_dir}/{fd}") in inodes:
                return True
    return False


def _sigkill(pid: int | Callable[[], int | None]) -> None:
    target = pid() if callable(pid) else pid
    if target is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(target, signal.SIGKILL)


def _respond(start_response: StartResponse, status: int, body: bytes) -> list[bytes]:
    reason = {500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
    start_response(f"{status} {reason}", [("Content-Type", "text/xml"),
                                         ("Content-Length", str(len(body)))])
    return [body]
