"""`launcher api deploy` end to end on moto with real sshd bodies (TESTING.md, "Clouds end
to end"): the deploy provisions the VM through the launch path, uploads a wheel of this
launcher, installs it in a venv on the body and runs the real server from it, under
the supervisor (the bodies have no systemd); the client pins its certificate.

The closed laptop, through the deployed server: a user's client submits a managed spot
job, is SIGKILLed and its LAUNCHER_HOME deleted; the job's node is preempted (the body
dies, EC2 says SpotInstanceTermination); the server on the VM relaunches it with no
client anywhere (the replacement instance appears in moto before any client exists
again); a fresh client logs in and sees the job SUCCEEDED after one recovery, with both
attempts' output. Then `deploy --down` from the deploying home: nothing left in moto.

The deploying home (an operator's, holding the VM's cluster record) is not the user's
client: only the deploying home can take the VM down, so it is the user's that is lost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.aws_moto import CLUSTER_TAG, AWSFake, aws_cloud, aws_moto, moto_server
from tests.cloud_e2e import NETNS_ONLY
from tests.server.deploy_env import CLI, REPO, cli, client_home, deploy_cloud
from tests.waiting import wait_until

__all__ = ["aws_cloud", "aws_moto", "deploy_cloud", "moto_server"]
pytestmark = NETNS_ONLY

SPOT_TASK = """\
name: tick
resources:
  cloud: aws
  region: us-east-1
  instance_type: m6i.large
  use_spot: true
run: |
  for i in $(seq 1 24); do echo "tick $i on $(hostname)"; sleep 0.5; done
"""


def _instances_of(fake: AWSFake, cluster: str) -> list[str]:
    return [i.id for i in fake.instances()
            if any(t.get("key") == CLUSTER_TAG and t.get("value") == cluster for t in i.get_tags())]


def _explain_on_failure(vm_home: Path, check: Callable[[], None], admin: Path) -> None:
    """Run `check`; when it fails, add the server's and the controller's log tails."""
    try:
        check()
    except AssertionError as exc:
        logs = [vm_home / ".launcher-api/home/server/server.log",
                vm_home / ".launcher-api/home/managed_jobs/controller.log"]
        tails = "\n".join(f"--- {p}\n" + "\n".join(p.read_text().splitlines()[-40:])
                          for p in logs if p.exists())
        queue = cli(admin, "jobs", "queue", "--all-users", "--json")
        raise AssertionError(f"{exc}\n{queue.out}{queue.err}\n{tails}") from None


def _queue(home: Path) -> list[dict[str, object]]:
    r = cli(home, "jobs", "queue", "--json")
    assert r.rc == 0, r.err
    return list(json.loads(r.out))


def test_deploy_closed_laptop_and_down_leave_nothing(deploy_cloud: AWSFake, launcher_home: Path,
                                                     tmp_path: Path) -> None:
    fake = deploy_cloud
    t0 = time.monotonic()
    r = cli(launcher_home, "api", "deploy", "--cloud", "aws", "--region", "us-east-1",
            "--with-credentials", "aws", timeout=240)
    deploy_s = time.monotonic() - t0
    assert r.rc == 0 and "Traceback" not in r.err, r.err
    endpoint = r.out.split("Logged in to ")[1].split()[0]
    assert endpoint.startswith("https://") and endpoint.endswith(":46590"), r.out
    fingerprint = r.err.split("TLS certificate SHA-256 (pinned): ")[1].split()[0]
    assert "running under supervisor" in r.err and "Copied aws: " in r.err, r.err

    # the VM: on demand, its port opened by the cluster's own group; the real server from
    # the installed wheel (the supervisor's child runs the venv's `launcher`)
    (vm,) = _instances_of(fake, "launcher-api")
    assert fake.instance(vm).lifecycle != "spot"
    body = fake.bodies.node(vm)  # type: ignore[union-attr]
    assert body is not None
    venv_pkg = body.home / ".launcher-api/venv/lib/python3.11/site-packages/launcher"
    assert (venv_pkg / "server" / "deploy_vm.py").is_file()
    assert (body.home / ".aws/credentials").stat().st_mode & 0o777 == 0o600
    login = json.loads((launcher_home / "api_login.json").read_text())
    assert login["tls_fingerprint"] == fingerprint and "BEGIN CERTIFICATE" in login["tls_cert_pem"]
    assert login["deployment"]["cluster"] == "launcher-api"

    info = cli(launcher_home, "api", "info", "--json")
    assert info.rc == 0 and json.loads(info.out)["user"] == "admin", info.err
    made = cli(launcher_home, "users", "create", "alice", "--json")
    assert made.rc == 0, made.err
    alice = json.loads(made.out)["token"]

    # kill -9 of the server on the VM: the supervisor starts it again
    pid_file = body.home / ".launcher-api/home/server/server.pid"
    old_pid = int(json.loads(pid_file.read_text())["pid"])
    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: int(json.loads(pid_file.read_text())["pid"]) != old_pid, 30,
               "the server started again by the supervisor")
    wait_until(lambda: cli(launcher_home, "api", "info").rc == 0, 30, "the server answering")

    # a user's laptop: logs in pinning the printed fingerprint, submits, is killed
    laptop = client_home(tmp_path, "laptop")
    r = cli(laptop, "api", "login", "-e", endpoint, "--tls-fingerprint", fingerprint,
            "--token", alice)
    assert r.rc == 0, r.err
    task = tmp_path / "tick.yaml"
    task.write_text(SPOT_TASK)
    proc = subprocess.Popen([*CLI, "jobs", "launch", "-y", str(task)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "LAUNCHER_HOME": str(laptop)},
                            start_new_session=True)
    try:
        wait_until(lambda: any(j["status"] == "RUNNING" for j in _queue(laptop)), 90,
                   "the managed job RUNNING")
        (job,) = _queue(laptop)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the laptop closes
        proc.wait(10)
    shutil.rmtree(laptop)
    first = _instances_of(fake, str(job["cluster"]))
    assert len(first) == 1, first
    fake.preempt(first)

    # no client anywhere: the server on the VM relaunches the job
    def replaced() -> bool:
        return bool({i.id for i in fake.instances()} - {vm, *first})

    _explain_on_failure(body.home, lambda: wait_until(replaced,
               60, "the replacement instance (relaunched by the server, no client running)"),
                        launcher_home)

    fresh = client_home(tmp_path, "fresh")
    r = cli(fresh, "api", "login", "-e", endpoint, "--tls-fingerprint", fingerprint,
            "--token", alice)
    assert r.rc == 0, r.err
    wait_until(lambda: _queue(fresh)[0]["status"] == "SUCCEEDED", 90, "the job SUCCEEDED")
    (done,) = _queue(fresh)
    assert done["recoveries"] == 1, done
    logs = cli(fresh, "jobs", "logs", str(job["id"]))
    assert logs.rc == 0, logs.err
    assert "tick 24" in logs.out and "attempt 1 ended" in logs.out, logs.out[-2000:]

    # a wrong pin is refused
    other = client_home(tmp_path, "other")
    r = cli(other, "api", "login", "-e", endpoint, "--tls-fingerprint", "0" * 64,
            "--token", alice)
    assert r.rc != 0 and "refusing to log in" in r.err and "Traceback" not in r.err, r.err

    r = cli(launcher_home, "api", "deploy", "--down", "--yes", timeout=180)
    assert r.rc == 0, r.err
    assert not (launcher_home / "api_login.json").exists()
    wait_until(lambda: fake.leaks().empty(), 30, "nothing left in moto")
    print(f"deploy {deploy_s:.1f}s; whole test {time.monotonic() - t0:.1f}s")
