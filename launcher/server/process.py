"""`launcher api start|stop|status|logs`: the server daemon's life. Imports no FastAPI
(it runs in the plain CLI); the daemon itself is `python -m launcher.server`.

`start` refuses, each with one paragraph: a non-loopback bind without TLS (unless
`insecure_behind_proxy`), a server already running on this home, a port in use, the
`[server]` extra missing. It creates the secrets key (0600) and, on a home with no
user yet, the first admin (token from LAUNCHER_API_ADMIN_TOKEN, else a new one that
is returned to be shown once), then starts the daemon and returns once `/health`
answers (or reports the daemon's last log lines when it died).
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import LauncherError, UsageError
from launcher.server.settings import key_path, log_path, pid_path, server_dir


@dataclass(frozen=True)
class ServerInfo:
    running: bool
    pid: int | None
    url: str | None
    version: str | None
    home: str
    log: str


@dataclass(frozen=True)
class Started:
    info: ServerInfo
    admin_token: str | None  # the first admin's token, when this start created it


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(host: str, port: int, tls: bool) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


def check_bind(host: str, port: int, tls_cert: str | None, tls_key: str | None,
               insecure_behind_proxy: bool) -> None:
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("Give both --tls-cert and --tls-key, or neither.")
    if not is_loopback(host) and tls_cert is None and not insecure_behind_proxy:
        raise UsageError(
            f"Refusing to serve on {host} without TLS: tokens would cross the network in "
            "clear. Give --tls-cert and --tls-key, or bind 127.0.0.1 (the default), or, only "
            "behind a proxy that terminates TLS, pass --insecure-behind-proxy.")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # as uvicorn binds: connections a killed server left in TIME_WAIT do not count,
        # a socket listening there does
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LauncherError(
                    f"Port {port} on {host} is already in use by another program, so the "
                    f"server cannot listen there. Pick another with `launcher api start "
                    f"--port N`, or stop what holds it (`launcher api status` shows whether "
                    "it is a launcher server).") from None
            raise LauncherError(f"Cannot listen on {host}:{port}: {exc.strerror}.") from None


def _read_pid_file() -> dict[str, object] | None:
    try:
        data = json.loads(pid_path().read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(FileNotFoundError):  # a zombie of ours is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True


def health(url: str, timeout: float = 2.0) -> str | None:
    """The server's version when `url` answers /health, else None."""
    scheme, _, rest = url.partition("://")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    conn: http.client.HTTPConnection
    if scheme == "https":  # our own server: its certificate may be self-signed
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        if resp.status != 200:
            return None
        return str(json.loads(resp.read()).get("version"))
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def status() -> ServerInfo:
    from launcher.config.settings import launcher_home

    data = _read_pid_file() or {}
    pid = data.get("pid")
    url = data.get("url")
    running = isinstance(pid, int) and _alive(pid)
    version = health(str(url)) if running and url else None
    return ServerInfo(running and version is not None, pid if running else None,  # type: ignore[arg-type]
                      str(url) if url else None, version, str(launcher_home()), str(log_path()))


def ensure_key() -> Path:
    """The Fernet key that encrypts secrets at rest (created once, 0600)."""
    from launcher.state import files as state_files

    path = key_path()
    if not path.exists():
        from cryptography.fernet import Fernet

        server_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        state_files.write_private(path, Fernet.generate_key())
    return path


def bootstrap_admin() -> str | None:
    """On a home with no user: create `admin`. Returns its token when it was generated
    here (to show once); None when users exist or LAUNCHER_API_ADMIN_TOKEN gave it."""
    from launcher.api.server_store import ServerStore

    with ServerStore() as store:
        if store.has_users():
            return None
        given = os.environ.get("LAUNCHER_API_ADMIN_TOKEN", "").strip()
        if given and len(given) < 32:
            raise UsageError("LAUNCHER_API_ADMIN_TOKEN is too short: give at least 32 random "
                             "characters (e.g. `python3 -c 'import secrets; "
                             "print(secrets.token_urlsafe(32))'`).")
        token = store.create_user("admin", "admin", token=given or None)
        return None if given else token


def _require_extra() -> None:
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "cryptography", "jinja2")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise LauncherError(f"The API server needs {', '.join(missing)}: "
                            "pip install 'launcher[server]'.")


def start(host: str, port: int, *, foreground: bool = False, tls_cert: str | None = None,
          tls_key: str | None = None, insecure_behind_proxy: bool = False,
          wait_s: float = 60.0) -> Started:
    _require_extra()
    running = status()
    if running.running:
        raise LauncherError(f"A server already runs on this home ({running.home}) at "
                            f"{running.url} (pid {running.pid}); `launcher api stop` first.")
    check_bind(host, port, tls_cert, tls_key, insecure_behind_proxy)
    ensure_key()
    token = bootstrap_admin()
    url = _url(host, port, tls_cert is not None)
    args = ["--host", host, "--port", str(port)]
    if tls_cert and tls_key:
        args += ["--tls-cert", os.path.abspath(tls_cert), "--tls-key", os.path.abspath(tls_key)]
    if foreground:
        from launcher.state import files as state_files

        state_files.write_private(pid_path(), json.dumps({"pid": os.getpid(), "url": url}).encode())
        return Started(ServerInfo(True, os.getpid(), url, None, "", str(log_path())), token)
    server_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(log_path(), "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", "launcher.server", *args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True)
    from launcher.state import files as state_files

    state_files.write_private(pid_path(), json.dumps({"pid": proc.pid, "url": url}).encode())
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        version = health(url, timeout=1.0)
        if version is not None:
            return Started(status(), token)
        if proc.poll() is not None:
            break
        time.sleep(0.05)  # nothing to wait on but the port: it answers or the process dies
    if proc.poll() is None:
        proc.terminate()
    raise LauncherError(f"The server did not come up at {url}; the end of its log "
                        f"({log_path()}):\n" + "\n".join(tail_log(15)))


def run_foreground(host: str, port: int, tls_cert: str | None, tls_key: str | None) -> int:
    from launcher.server.__main__ import serve

    try:
        return serve(host, port, tls_cert, tls_key)
    finally:
        with contextlib.suppress(FileNotFoundError):
            pid_path().unlink()


def stop(timeout: float = 30.0) -> ServerInfo | None:
    """SIGTERM the server and wait for it to exit (SIGKILL after `timeout`). Returns
    what was running, None when nothing was. Jobs keep running on their clusters; the
    next server's controller resumes them."""
    data = _read_pid_file()
    pid = data.get("pid") if data else None
    if not isinstance(pid, int) or not _alive(pid):
        with contextlib.suppress(FileNotFoundError):
            pid_path().unlink()
        return None
    before = status()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)  # not our child: no wait() to block on
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        pid_path().unlink()
    return before


def tail_log(lines: int = 50) -> list[str]:
    try:
        return log_path().read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []
