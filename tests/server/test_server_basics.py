"""The server's life and its gate: start/status/stop, bad binds, tokens (401/403/429),
body limit (413), version skew and an unreachable endpoint on the client side."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from launcher.errors import LauncherError
from tests.server.conftest import Server, cli, free_port


def test_start_status_port_in_use_and_bad_binds(server: Server, tmp_path: Path) -> None:
    st = server.embedded("api", "status", "--json")
    assert st.rc == 0 and json.loads(st.out)["url"] == server.url
    again = server.start()  # the same home: already running
    assert again.rc == 1 and "already runs on this home" in again.err
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    busy = cli(other, "api", "start", "--port", str(server.port))
    assert busy.rc == 1 and f"Port {server.port} on 127.0.0.1 is already in use" in busy.err
    assert "Traceback" not in busy.err
    open_bind = cli(other, "api", "start", "--host", "0.0.0.0", "--port", str(free_port()))
    assert open_bind.rc == 2 and "without TLS" in open_bind.err and "--insecure-behind-proxy" in open_bind.err
    assert not (other / "server" / "server.pid").exists()


def test_a_new_server_prints_its_first_admin_token_once(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    port = free_port()
    r = cli(home, "api", "start", "--port", str(port))
    try:
        assert r.rc == 0, r.err
        token = r.out.split("store it now): ")[1].split()[0]
        ok = httpx.get(f"http://127.0.0.1:{port}/info", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and ok.json()["role"] == "admin"
        assert token not in (home / "state.db").read_bytes().decode("latin-1")  # a hash only
    finally:
        cli(home, "api", "stop")
    again = cli(home, "api", "start", "--port", str(port))  # users exist: no new token
    try:
        assert again.rc == 0 and "First admin token" not in again.out
    finally:
        cli(home, "api", "stop")


def test_tokens_roles_rotation_and_limits(server: Server) -> None:
    url = server.url
    assert httpx.get(f"{url}/health").status_code == 200  # the one open route
    assert httpx.get(f"{url}/jobs").status_code == 401
    bad = httpx.get(f"{url}/jobs", headers={"Authorization": "Bearer lk_wrong"})
    assert bad.status_code == 401 and "not accepted" in bad.json()["error"]["message"]
    alice = {"Authorization": f"Bearer {server.tokens['alice']}"}
    assert httpx.get(f"{url}/jobs", headers=alice).status_code == 200
    assert httpx.get(f"{url}/users", headers=alice).status_code == 403  # admin only
    assert httpx.get(f"{url}/jobs", params={"all_users": True}, headers=alice).status_code == 403
    # a rotated token fails at once; the new one works
    home = server.client("alice")
    rotated = server.embedded("users", "rotate", "alice", "--json")
    assert rotated.rc == 0
    r = cli(home, "jobs", "queue")
    assert r.rc == 1 and "rotated" in r.err and "Traceback" not in r.err
    new = {"Authorization": f"Bearer {json.loads(rotated.out)['token']}"}
    assert httpx.get(f"{url}/jobs", headers=new).status_code == 200
    # a body over the limit (LAUNCHER_API_MAX_BODY=200000 in the fixture)
    big = httpx.post(f"{url}/jobs/launch", headers=new, content=b"x" * 300_000)
    assert big.status_code == 413
    # failed authentications are rate-limited per client address
    codes = [httpx.get(f"{url}/jobs", headers={"Authorization": f"Bearer lk_guess{i}"}).status_code
             for i in range(12)]
    assert codes[:7] == [401] * 7 and codes[-1] == 429  # 3 failures above + 7 = the limit (10)
    assert httpx.get(f"{url}/jobs", headers=new).status_code == 429  # the address, not the token


def test_version_skew_and_unreachable_endpoint(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.client import remote

    monkeypatch.setattr(remote, "__version__", "0.0.1")
    with pytest.raises(LauncherError, match=r"client is launcher 0\.0\.1 but the server .* runs"):
        remote.RemoteBackend(server.url, server.tokens["alice"]).jobs_queue(False)
    monkeypatch.undo()
    port = free_port()
    with pytest.raises(LauncherError) as err:
        remote.RemoteBackend(f"http://127.0.0.1:{port}", "t").jobs_queue(False)
    assert f"http://127.0.0.1:{port}" in str(err.value) and "launcher api status" in str(err.value)


def test_login_file_is_private_and_logout_goes_local(server: Server) -> None:
    home = server.client("bob")
    assert (home / "api_login.json").stat().st_mode & 0o777 == 0o600
    info = cli(home, "api", "info", "--json")
    assert info.rc == 0 and json.loads(info.out)["user"] == "bob"
    assert json.loads(info.out)["clouds"]["local"]["enabled"] is True
    assert cli(home, "api", "logout").rc == 0
    assert cli(home, "api", "info").rc == 2  # not logged in any more


def test_plain_cli_does_not_import_the_server_stack(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.test_import_hygiene import PROBE

    probe = PROBE.format(forbidden=("fastapi", "uvicorn", "httpx", "starlette", "cryptography"))
    for args in (["--help"], ["status"], ["jobs", "queue"], ["api", "--help"]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                              env={**os.environ, "LAUNCHER_HOME": str(tmp_path)}, timeout=60)
        line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
        assert json.loads(line[6:])["bad"] == [], args
