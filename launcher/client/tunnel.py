"""The SSH local forward a client uses to reach a server deployed with `launcher api
deploy --ssh-tunnel` (whose API port is bound to the VM's 127.0.0.1 and opened to
nobody).

The tunnel is one `ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:REMOTE user@vm` process, in its
own session so it outlives the command that started it; its pid is kept in
`$LAUNCHER_HOME/api_tunnel.pid`. Every command that talks to the server first calls
`ensure(spec)`: when that process is gone (a reboot, a dropped connection: ssh exits
on ServerAliveInterval failures) it starts a new one and waits until the local port
accepts connections. So the tunnel is re-opened on demand by the next command, and
`launcher api logout` (or `deploy --down`) stops it. The VM's host key is pinned (the
key recorded at provision) in a known_hosts file of the client's own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.errors import LauncherError


@dataclass(frozen=True)
class TunnelSpec:
    host: str  # the VM's address, as SSH reaches it
    ssh_port: int
    user: str
    key_path: str
    host_key: str | None  # "ssh-ed25519 AAAA...", pinned at provision
    local_port: int
    remote_port: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TunnelSpec:
        return TunnelSpec(**{k: d[k] for k in TunnelSpec.__dataclass_fields__})


def _home() -> Path:
    from launcher.config.settings import launcher_home

    return launcher_home()


def pid_path() -> Path:
    return _home() / "api_tunnel.pid"


def _known_hosts(spec: TunnelSpec) -> Path | None:
    if not spec.host_key:
        return None
    from launcher.state import files as state_files

    path = _home() / "api_tunnel_known_hosts"
    name = spec.host if spec.ssh_port == 22 else f"[{spec.host}]:{spec.ssh_port}"
    state_files.write_private(path, f"{name} {spec.host_key}\n".encode())
    return path


def _tunnel_pid() -> int | None:
    """The pid of our live ssh tunnel process, if any."""
    try:
        pid = int(pid_path().read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if cmdline.startswith(b"ssh") or b"/ssh\0" in cmdline else None


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_local_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def argv(spec: TunnelSpec) -> list[str]:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise LauncherError("The server is reached through an SSH tunnel, but there is no "
                            "`ssh` command on this machine (install OpenSSH's client).")
    known = _known_hosts(spec)
    checking = (["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}"]
                if known else ["-o", "StrictHostKeyChecking=accept-new", "-o",
                               f"UserKnownHostsFile={_home() / 'api_tunnel_known_hosts'}"])
    return [ssh, "-N", "-i", spec.key_path, "-p", str(spec.ssh_port), *checking,
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
            "-L", f"127.0.0.1:{spec.local_port}:127.0.0.1:{spec.remote_port}",
            f"{spec.user}@{spec.host}"]


def ensure(spec: TunnelSpec, wait_s: float = 20.0) -> None:
    """The tunnel is up (started now when its process is gone). Raises LauncherError
    when ssh cannot open it."""
    if _tunnel_pid() is not None and _answers(spec.local_port):
        return
    stop()
    log = _home() / "api_tunnel.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv(spec), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, close_fds=True)
    from launcher.state import files as state_files

    state_files.write_private(pid_path(), str(proc.pid).encode())
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        if _answers(spec.local_port):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)  # nothing to wait on but the forwarded port
    stop()
    text = log.read_text(errors="replace").strip() if log.exists() else ""
    raise LauncherError(f"Cannot open the SSH tunnel to the server on {spec.user}@{spec.host}"
                        f":{spec.ssh_port} (local port {spec.local_port}): "
                        f"{text.splitlines()[-1] if text else 'ssh did not forward in time'}. "
                        "Is the VM up? `launcher status` shows its cluster.")


def stop() -> bool:
    """Stop the tunnel process; whether one was running."""
    pid = _tunnel_pid()
    with contextlib.suppress(FileNotFoundError):
        pid_path().unlink()
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return True
