"""The parts of `launcher api deploy` that need no cloud: the wheel of the running
launcher, the pinned TLS context, the credential files, and the refusals that come
before anything is provisioned."""

from __future__ import annotations

import base64
import hashlib
import http.server
import ssl
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.client.deploy import DeployOptions, deploy
from launcher.client.deploy_credentials import credential_files, parse_clouds
from launcher.client.deploy_wheel import build_wheel
from launcher.client.login import Login, load_login, save_login
from launcher.client.pinning import (
    PinMismatchError,
    fetch_certificate,
    fingerprint_of_pem,
    normalize_fingerprint,
    pinned_context,
)
from launcher.errors import LauncherError, UsageError
from launcher.server.deploy_vm import make_certificate


def test_the_wheel_holds_the_running_code_and_the_server_extra(tmp_path: Path) -> None:
    import launcher

    whl = build_wheel(tmp_path)
    assert whl.name == f"launcher-{launcher.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        dist = f"launcher-{launcher.__version__}.dist-info"
        meta = zf.read(f"{dist}/METADATA").decode()
        assert "launcher/server/deploy_vm.py" in names and "launcher/catalog/data" in " ".join(names)
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        here = Path(launcher.__file__).parent / "client" / "deploy.py"
        assert zf.read("launcher/client/deploy.py") == here.read_bytes()
        assert f"Version: {launcher.__version__}" in meta
        assert 'Requires-Dist: fastapi>=0.110; extra == "server"' in meta
        assert "Requires-Dist: paramiko>=3.4\n" in meta
        assert "launcher = launcher.cli:main" in zf.read(f"{dist}/entry_points.txt").decode()
        for line in zf.read(f"{dist}/RECORD").decode().splitlines():  # every hash right
            name, digest, size = line.split(",")
            if digest:
                data = zf.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                assert digest == "sha256=" + want.decode() and int(size) == len(data), name


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """An HTTPS server on loopback with a certificate deploy_vm makes: (port, its PEM)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    make_certificate(cert, key)
    assert key.stat().st_mode & 0o777 == 0o600
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1], cert.read_text()
    finally:
        srv.shutdown()
        srv.server_close()


def _get(port: int, ctx: ssl.SSLContext) -> str:
    from launcher.client.http import load_httpx

    httpx = load_httpx()
    with httpx.Client(verify=ctx) as c:
        return str(c.get(f"https://127.0.0.1:{port}/").text)


def test_the_pinned_context_trusts_that_certificate_alone(tls_server: tuple[int, str],
                                                          tmp_path: Path) -> None:
    port, pem = tls_server
    fp = fingerprint_of_pem(pem)
    assert _get(port, pinned_context(pem, fp)) == "ok"  # no CA, no host name: the pin

    other_cert = tmp_path / "other.pem"
    make_certificate(other_cert, tmp_path / "other.key")
    other = other_cert.read_text()
    with pytest.raises(Exception, match="certificate verify failed"):
        _get(port, pinned_context(other, fingerprint_of_pem(other)))
    ctx = pinned_context(pem, fp)
    ctx.pin = fingerprint_of_pem(other)  # type: ignore[attr-defined]  # chain ok, pin not
    with pytest.raises(Exception, match="not the pinned one"):
        _get(port, ctx)
    with pytest.raises(LauncherError, match="does not match its stored fingerprint"):
        pinned_context(pem, fingerprint_of_pem(other))
    assert issubclass(PinMismatchError, ssl.SSLError)


def test_login_by_fingerprint_reads_the_certificate_and_refuses_another(
        tls_server: tuple[int, str]) -> None:
    port, pem = tls_server
    fp = fingerprint_of_pem(pem)
    url = f"https://127.0.0.1:{port}"
    assert fetch_certificate(url, normalize_fingerprint("SHA256:" + fp.upper())) == pem
    with pytest.raises(LauncherError, match="refusing to log in"):
        fetch_certificate(url, "0" * 64)
    with pytest.raises(LauncherError, match="64 hex digits"):
        normalize_fingerprint("abc")
    with pytest.raises(LauncherError, match="https://"):
        fetch_certificate(f"http://127.0.0.1:{port}", fp)


def test_credentials_only_of_the_named_clouds(tmp_path: Path, launcher_home: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_clouds("aws, gcp,aws") == ("aws", "gcp")
    with pytest.raises(UsageError, match="unknown cloud 'ibm'"):
        parse_clouds("aws,ibm")
    creds = tmp_path / "aws-creds"
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    with pytest.raises(UsageError, match=f"no credential file found .*{creds}"):
        credential_files(("aws",), "aws")
    creds.write_text("[default]\n")
    (got,) = credential_files(("aws",), "aws")
    assert (got.cloud, got.local, got.remote) == ("aws", creds, ".aws/credentials")
    (launcher_home / "config.yaml").write_text("aws:\n  iam_instance_profile: api-role\n")
    assert credential_files(("aws",), "aws") == []  # the VM's own role instead
    assert credential_files(("aws",), "gcp")  # the role is AWS's: elsewhere, the file


def test_deploy_refuses_before_provisioning(launcher_home: Path) -> None:
    with pytest.raises(UsageError, match="--cpus"):
        deploy(DeployOptions(cpus="two"), lambda _: None)
    save_login(Login("http://10.0.0.9:46590", "t" * 40))
    with pytest.raises(UsageError, match="logged in to the server at http://10.0.0.9:46590"):
        deploy(DeployOptions(), lambda _: None)
    assert load_login() == Login("http://10.0.0.9:46590", "t" * 40)


def test_down_of_a_server_that_does_not_answer_asks_then_goes_on(launcher_home: Path) -> None:
    from launcher.client.deploy import DeployError, undeploy

    with pytest.raises(UsageError, match="Nothing to take down"):
        undeploy(lambda _: None, lambda _: True, yes=False)
    save_login(Login("http://127.0.0.1:9", "t" * 40, deployment={"cluster": "launcher-api"}))
    asked: list[str] = []
    with pytest.raises(DeployError, match="Aborted: nothing was removed"):
        undeploy(lambda _: None, lambda q: asked.append(q) is not None, yes=False)
    assert len(asked) == 1 and "does not answer" in asked[0] and load_login() is not None
    said: list[str] = []
    undeploy(said.append, lambda _: False, yes=True)  # --yes: no question
    assert load_login() is None and said[-1].startswith("Logged out"), said


def test_the_supervisor_restarts_a_failed_server_and_the_unit_says_on_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from launcher.server import deploy_vm

    monkeypatch.setattr(deploy_vm, "HOME", tmp_path / "home")
    monkeypatch.setattr(deploy_vm, "SUPERVISOR_PID", tmp_path / "supervisor.pid")
    monkeypatch.setattr(deploy_vm, "RESTART_DELAY_S", 0.0)
    runs = tmp_path / "runs"
    # exits 1, then is killed (SIGKILL, as `kill -9`), then exits 0: two restarts, then done
    script = ("import os, signal, sys; from pathlib import Path; p = Path(sys.argv[1]); "
              "n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); "
              "sys.exit(1) if n == 0 else os.kill(os.getpid(), signal.SIGKILL) if n == 1 "
              "else sys.exit(0)")
    assert deploy_vm.supervise([sys.executable, "-c", script, str(runs)]) == 0
    assert runs.read_text() == "xxx" and not (tmp_path / "supervisor.pid").exists()

    unit = deploy_vm._unit_text(["/v/bin/launcher", "api", "start", "--foreground"])
    assert "Restart=on-failure" in unit and "ExecStart=/v/bin/launcher api start --foreground" in unit
    assert f"Environment=LAUNCHER_HOME={tmp_path / 'home'}" in unit


def test_a_failed_deploy_is_one_paragraph_and_a_non_zero_exit(tmp_path: Path,
                                                               launcher_home: Path) -> None:
    """Through the CLI: AWS without credentials fails at provisioning, before any call."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(LAUNCHER_HOME=str(launcher_home), AWS_EC2_METADATA_DISABLED="true",
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"))
    proc = subprocess.run([sys.executable, "-c", "from launcher.cli import main; main()",
                           "api", "deploy", "--cloud", "aws", "--region", "us-east-1"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    first = next(ln for ln in proc.stderr.splitlines() if ln.startswith("Error: "))
    assert first.startswith("Error: launcher api deploy failed while provisioning the VM: ")
    assert "Nothing was left behind" in first, proc.stderr
    assert not (launcher_home / "api_login.json").exists()
