"""`launcher api cancel REQ` while a launch through the server is provisioning on AWS
(moto; no bodies, so the instance never answers SSH and the launch sits in its wait for
the node): the request ends CANCELLED, the client's launch fails, and moto holds no
pending/running instance, Elastic IP or security group of the cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.aws_moto import AWSFake, aws_moto, moto_server
from tests.server.conftest import ADMIN_TOKEN, CLI, FAST, Server, cli, free_port
from tests.waiting import wait_until

__all__ = ["aws_moto", "moto_server"]

TASK = """\
name: never-up
resources:
  cloud: aws
  region: us-east-1
  instance_type: m6i.large
run: echo hi
"""


def test_cancelling_a_launch_while_provisioning_leaves_nothing_in_moto(
        aws_moto: AWSFake, launcher_home: Path, tmp_path: Path) -> None:
    fake = aws_moto
    srv = Server(launcher_home, free_port(), tmp_path)
    r = srv.start()
    assert r.rc == 0, r.err
    srv.tokens["admin"] = ADMIN_TOKEN
    try:
        client = srv.client("admin")
        task = tmp_path / "task.yaml"
        task.write_text(TASK)
        err = tmp_path / "launch.err"
        with open(err, "w") as out:
            proc = subprocess.Popen([*CLI, "launch", "-y", "-c", "never-up", str(task)],
                                    stdout=subprocess.DEVNULL, stderr=out,
                                    env={**os.environ, **FAST, "LAUNCHER_HOME": str(client)})
        try:
            wait_until(lambda: "Server request " in err.read_text(), 30, "the request id")
            rid = err.read_text().split("Server request ")[1].split()[0]
            wait_until(lambda: fake.instances(), 60, "the instance created in moto")
            assert not fake.leaks().empty()
            r = cli(client, "api", "cancel", rid)
            assert r.rc == 0 and "cancel requested" in r.err, r.err
            assert proc.wait(90) != 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "cancelled" in err.read_text().lower(), err.read_text()[-2000:]
        wait_until(lambda: fake.leaks().empty(), 30, "nothing left in moto")
        r = cli(client, "status", "--json")
        assert r.rc == 0 and r.out.strip() == "[]", r.out + r.err
    finally:
        cli(launcher_home, "api", "stop")
