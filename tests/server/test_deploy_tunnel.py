"""`launcher api deploy --ssh-tunnel` on moto with sshd bodies, and `--down` asking first.

With --ssh-tunnel no port is opened (no per-cluster security group; the server listens
on the VM's 127.0.0.1 only) and the client's endpoint is an SSH local forward; a
command finding the tunnel gone opens it again. Deploying again upgrades in place (the
same VM and admin). A managed job live on the server makes
`--down` ask: "no" removes nothing; `--yes` cancels the job, takes its cluster down,
stops the server, takes the VM down, closes the tunnel and logs out: nothing left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

from tests.aws_moto import AWSFake, aws_cloud, aws_moto, moto_server
from tests.cloud_e2e import NETNS_ONLY
from tests.server.deploy_env import cli, deploy_cloud
from tests.waiting import wait_until

__all__ = ["aws_cloud", "aws_moto", "deploy_cloud", "moto_server"]
pytestmark = NETNS_ONLY

LONG_TASK = """\
name: long
resources:
  cloud: aws
  region: us-east-1
  instance_type: m6i.large
  use_spot: true
run: sleep 600
"""


def _tunnel_pid(home: Path) -> int | None:
    try:
        pid = int((home / "api_tunnel.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def _refused(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(3)
        return s.connect_ex((host, port)) != 0


def test_deploy_over_an_ssh_tunnel_and_down_asking_first(deploy_cloud: AWSFake,
                                                         launcher_home: Path,
                                                         tmp_path: Path) -> None:
    fake = deploy_cloud
    r = cli(launcher_home, "api", "deploy", "--cloud", "aws", "--region", "us-east-1",
            "--ssh-tunnel", "--with-credentials", "aws", timeout=240)
    assert r.rc == 0, r.err
    endpoint = r.out.split("Logged in to ")[1].split()[0]
    assert endpoint.startswith("http://127.0.0.1:"), r.out
    assert "SSH tunnel" in r.err and "TLS certificate" not in r.err, r.err
    assert not fake.leaks().security_groups  # no port opened: no ports group at all
    (vm,) = [i.id for i in fake.instances()]
    assert _refused(fake.instance(vm).private_ip, 46590)  # bound to the VM's loopback
    login = json.loads((launcher_home / "api_login.json").read_text())
    assert login["tunnel"]["remote_port"] == 46590 and "tls_fingerprint" not in login

    first = _tunnel_pid(launcher_home)
    assert first is not None
    os.kill(first, signal.SIGKILL)  # the tunnel drops (a laptop's network change)
    wait_until(lambda: _tunnel_pid(launcher_home) is None, 10, "the tunnel gone")
    info = cli(launcher_home, "api", "info", "--json")  # re-opens it on demand
    assert info.rc == 0 and json.loads(info.out)["user"] == "admin", info.err
    assert _tunnel_pid(launcher_home) not in (None, first)

    # re-running deploy upgrades in place: the same VM, the same admin, a new forward
    token = json.loads((launcher_home / "api_login.json").read_text())["token"]
    r = cli(launcher_home, "api", "deploy", "--cloud", "aws", "--region", "us-east-1",
            "--ssh-tunnel", timeout=240)
    assert r.rc == 0 and "Upgraded launcher" in r.err, r.err
    assert [i.id for i in fake.instances()] == [vm]
    assert json.loads((launcher_home / "api_login.json").read_text())["token"] == token
    info = cli(launcher_home, "api", "info", "--json")
    assert info.rc == 0 and json.loads(info.out)["user"] == "admin", info.err

    task = tmp_path / "long.yaml"
    task.write_text(LONG_TASK)
    r = cli(launcher_home, "jobs", "launch", "-y", "--detach", str(task))
    assert r.rc == 0, r.err
    wait_until(lambda: json.loads(cli(launcher_home, "jobs", "queue", "--json").out)[0][
        "status"] == "RUNNING", 90, "the job RUNNING")

    r = cli(launcher_home, "api", "deploy", "--down", env={}, timeout=60)  # stdin: empty = no
    assert r.rc != 0 and "still runs: managed job 1 (long, RUNNING)" in r.err, r.err
    assert "Aborted: nothing was removed." in r.err and "Traceback" not in r.err, r.err
    assert len(fake.instances()) == 2 and (launcher_home / "api_login.json").exists()

    r = cli(launcher_home, "api", "deploy", "--down", "--yes", timeout=180)
    assert r.rc == 0, r.err
    assert "Cancelled managed job 1." in r.err and "Stopped the server." in r.err, r.err
    assert _tunnel_pid(launcher_home) is None
    assert not (launcher_home / "api_login.json").exists()
    wait_until(lambda: fake.leaks().empty(), 30, "nothing left in moto")
