"""The VM side of `launcher api deploy`: run on the server's VM, from the venv the deploy
installed (`~/.launcher-api/venv/bin/python -m launcher.server.deploy_vm ...`).

    install --host H --port P [--tls]   (stdin: {"admin_token": "..."})
        The server home (~/.launcher-api/home), its key and its first admin (the token
        the client generated; only its hash is stored), a self-signed TLS certificate
        (`--tls`, made once and kept across upgrades, so pins stay valid), then the
        service, (re)started: a systemd unit (Restart=on-failure) when systemd is PID 1,
        else a supervisor process started with nohup that restarts the server whenever
        it exits with a failure or is killed. Waits until /health answers and prints one
        JSON line: {"mode", "url", "fingerprint", "cert_pem", "version"}.
    stop        stops the service (either kind); the home stays.
    supervise   the supervisor loop itself (what `install` starts without systemd).

Nothing here imports FastAPI (the server it starts does).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BASE = Path("~/.launcher-api").expanduser()
HOME = BASE / "home"
TLS_DIR = BASE / "tls"
SUPERVISOR_PID = BASE / "supervisor.pid"
SUPERVISOR_LOG = BASE / "supervisor.log"
UNIT = "launcher-api.service"
UNIT_PATH = Path("/etc/systemd/system") / UNIT
RESTART_DELAY_S = 1.0


def _has_systemd() -> bool:
    """systemd manages this machine (PID 1), so units can be started."""
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def make_certificate(cert_path: Path, key_path: Path) -> None:
    """A self-signed certificate (EC P-256, 10 years) and its key (0600)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "launcher-api")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def fingerprint(cert_pem: str) -> str:
    """SHA-256 of the certificate's DER bytes, lower-case hex."""
    import ssl

    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_pem)).hexdigest()


def server_argv(host: str, port: int, tls: bool) -> list[str]:
    argv = [str(Path(sys.executable).parent / "launcher"), "api", "start", "--foreground",
            "--host", host, "--port", str(port)]
    if tls:
        argv += ["--tls-cert", str(TLS_DIR / "cert.pem"), "--tls-key", str(TLS_DIR / "key.pem")]
    return argv


# ---- the service: systemd or the supervisor ---------------------------------------------


def _sudo() -> list[str]:
    """How to run a command as root here (the SSH user of a cloud image is not root
    but has password-less sudo)."""
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def _unit_text(argv: list[str]) -> str:
    import getpass

    log = HOME / "server" / "server.log"
    user = "" if os.geteuid() == 0 else f"User={getpass.getuser()}\n"
    return (
        "[Unit]\nDescription=launcher API server (launcher api deploy)\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\n" + user +
        f"Environment=LAUNCHER_HOME={HOME}\n"
        f"Environment=HOME={Path.home()}\n"
        f"ExecStart={' '.join(argv)}\n"
        "Restart=on-failure\nRestartSec=1\n"
        f"StandardOutput=append:{log}\nStandardError=append:{log}\n\n"
        "[Install]\nWantedBy=multi-user.target\n")


def _supervisor_pid() -> int | None:
    try:
        pid = int(SUPERVISOR_PID.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"launcher.server.deploy_vm" in cmdline and b"supervise" in cmdline else None


def stop_service(timeout: float = 30.0) -> str:
    """Stop whichever service runs the server; what was stopped ("systemd",
    "supervisor" or "none")."""
    if _has_systemd() and UNIT_PATH.exists():
        subprocess.run([*_sudo(), "systemctl", "stop", UNIT], check=False, capture_output=True)
        return "systemd"
    pid = _supervisor_pid()
    if pid is None:
        return "none"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)  # the supervisor stops the server, then exits
    end = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
        time.sleep(0.05)  # not our child: nothing to wait() on
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        SUPERVISOR_PID.unlink()
    return "supervisor"


def start_service(argv: list[str]) -> str:
    """Start the server as a service; which kind ("systemd" or "supervisor")."""
    if _has_systemd():
        subprocess.run([*_sudo(), "tee", str(UNIT_PATH)], input=_unit_text(argv).encode(),
                       check=True, capture_output=True)
        for cmd in (["systemctl", "daemon-reload"], ["systemctl", "enable", UNIT],
                    ["systemctl", "restart", UNIT]):
            subprocess.run([*_sudo(), *cmd], check=True, capture_output=True)
        return "systemd"
    env = {**os.environ, "LAUNCHER_HOME": str(HOME)}
    with open(SUPERVISOR_LOG, "ab") as log:
        subprocess.Popen([sys.executable, "-m", "launcher.server.deploy_vm", "supervise",
                          "--", *argv], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         env=env, start_new_session=True, close_fds=True)
    return "supervisor"


def supervise(argv: list[str]) -> int:
    """Run `argv` (the server in the foreground) and start it again after a failure
    (a non-zero exit or a signal), as systemd's Restart=on-failure does. SIGTERM stops
    the server and then this loop."""
    SUPERVISOR_PID.write_text(str(os.getpid()))
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, on_term)
    log_path = HOME / "server" / "server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    while not stopping:
        with open(log_path, "ab") as log:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        rc = child.wait()
        if stopping or rc == 0:
            break
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} server exited ({rc}); restarting",
              flush=True)
        time.sleep(RESTART_DELAY_S)
    with contextlib.suppress(FileNotFoundError):
        SUPERVISOR_PID.unlink()
    return 0


# ---- install ----------------------------------------------------------------------------


def install(host: str, port: int, tls: bool, admin_token: str, wait_s: float = 60.0) -> dict[str, str]:
    os.environ["LAUNCHER_HOME"] = str(HOME)
    HOME.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert_pem = ""
    if tls:
        cert, key = TLS_DIR / "cert.pem", TLS_DIR / "key.pem"
        if not (cert.exists() and key.exists()):
            make_certificate(cert, key)
        cert_pem = cert.read_text()
    stop_service()  # an upgrade: the old server goes first (its jobs keep running)
    from launcher.server import process

    os.environ["LAUNCHER_API_ADMIN_TOKEN"] = admin_token
    try:
        process.ensure_key()
        process.bootstrap_admin()  # only on a home with no user yet
    finally:
        os.environ.pop("LAUNCHER_API_ADMIN_TOKEN", None)
    argv = server_argv(host, port, tls)
    mode = start_service(argv)
    url = f"{'https' if tls else 'http'}://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    end = time.monotonic() + wait_s
    version = None
    while version is None and time.monotonic() < end:
        version = process.health(url, timeout=1.0)
        if version is None:
            time.sleep(0.1)  # the port answers or not: nothing to wait on
    if version is None:
        tail = "\n".join(process.tail_log(15))
        raise SystemExit(f"The server did not answer at {url} within {wait_s:g}s ({mode}); "
                         f"the end of its log:\n{tail}")
    return {"mode": mode, "url": url, "version": version, "cert_pem": cert_pem,
            "fingerprint": fingerprint(cert_pem) if cert_pem else ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m launcher.server.deploy_vm")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install")
    i.add_argument("--host", required=True)
    i.add_argument("--port", type=int, required=True)
    i.add_argument("--tls", action="store_true")
    sub.add_parser("stop")
    s = sub.add_parser("supervise")
    s.add_argument("argv", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.cmd == "install":
        token = json.loads(sys.stdin.read())["admin_token"]
        print(json.dumps(install(a.host, a.port, a.tls, token)))
        return 0
    if a.cmd == "stop":
        print(json.dumps({"stopped": stop_service()}))
        return 0
    return supervise([x for x in a.argv if x != "--"])


if __name__ == "__main__":
    sys.exit(main())
