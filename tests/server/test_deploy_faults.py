"""`launcher api deploy` failing at any step leaves nothing behind (moto + sshd bodies).

First a clean deploy records the AWS API calls it makes (`tests/moto_meter.py`), then
`--down`. Then the deploy runs again once per recorded call, that call alone answered
with an EC2 error (UnauthorizedOperation), and at every third call a Ctrl-C instead
(`_thread.interrupt_main`, while the deploy waits for that answer); and once per step
after provisioning (the wheel upload, the install, the copies, the server's start, the
login check), that step failing. After each run moto must hold no pending/running
instance, Elastic IP, cluster security group (the API port's rule lives there), volume
or live body, this home no cluster and no login; a deploy that failed raised one
paragraph (DeployError) naming its step. A run the fault did not stop (failover
around it) must have ended deployed: it is taken down, and checked the same way.
"""

from __future__ import annotations

import _thread
import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.client import deploy as deploy_mod
from launcher.client.deploy import DeployError, DeployOptions, deploy, undeploy
from launcher.errors import LauncherError
from tests.aws_moto import AWSFake, MotoServer, aws_cloud, aws_moto, moto_server
from tests.cloud_e2e import NETNS_ONLY
from tests.moto_meter import MotoMeter
from tests.server.deploy_env import deploy_cloud
from tests.waiting import wait_until

__all__ = ["aws_cloud", "aws_moto", "deploy_cloud", "moto_server"]
pytestmark = [*NETNS_ONLY, pytest.mark.slow]

OPTS = DeployOptions(cloud="aws", region="us-east-1")
STEPS = ("uploading the launcher wheel", "installing launcher[server] on the VM",
         "copying the configuration and credentials", "starting the server",
         "logging in to the deployed server")


@pytest.fixture
def meter(moto_server: MotoServer) -> Iterator[MotoMeter]:
    m = MotoMeter.install(moto_server)
    try:
        yield m
    finally:
        m.uninstall()


def _volumes(fake: AWSFake) -> list[str]:
    return [v.id for r in fake.touched_regions()
            for v in list(fake.ec2_backend(r).volumes.values())]


def _left(fake: AWSFake, home: Path) -> list[str]:
    from launcher.state.db import StateDB

    leaks = fake.leaks()
    out = [f"{k}: {v}" for k, v in vars(leaks).items() if v]
    out += [f"volume {v}" for v in _volumes(fake)]
    with StateDB() as db:
        out += [f"cluster {c.name}" for c in db.list_clusters()]
    if (home / "api_login.json").exists():
        out.append("a login")
    return out


def _assert_nothing_left(fake: AWSFake, home: Path, what: str) -> None:
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not _left(fake, home), 20, "")
    assert not _left(fake, home), f"{what}: left {_left(fake, home)}"


def _unprepare(fake: AWSFake, home: Path) -> None:
    """The region as before the first deploy (no key pair, shared group or cache), so
    every run makes the calls the recorded one made, in the same order."""
    shutil.rmtree(home / "aws", ignore_errors=True)
    ec2 = fake.client("ec2")
    for pair in ec2.describe_key_pairs()["KeyPairs"]:
        ec2.delete_key_pair(KeyName=pair["KeyName"])
    for group in ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": ["launcher"]}])["SecurityGroups"]:
        ec2.delete_security_group(GroupId=group["GroupId"])


def _run(fake: AWSFake, meter: MotoMeter, home: Path, what: str) -> str:
    """Deploy once; 'failed' (checked: one paragraph naming its step) or 'deployed'
    (then taken down). Nothing may be left either way."""
    t0 = time.monotonic()
    try:
        deploy(OPTS, lambda _: None)
        outcome = "deployed"
    except DeployError as exc:
        text, *table = str(exc).splitlines()  # a failed launch adds its attempts, one a line
        assert text.startswith("launcher api deploy failed while "), text
        assert all(line.startswith("  - ") for line in table), table
        assert "Traceback" not in text and ("removed" in text or "Nothing was left" in text), text
        outcome = "failed"
    meter.reset()  # the fault was the deploy's alone
    meter.on_request = None
    if outcome == "deployed":
        undeploy(lambda _: None, lambda _: True, yes=True)
    _assert_nothing_left(fake, home, what)
    print(f"{what}: {outcome} ({time.monotonic() - t0:.1f}s)", flush=True)
    return outcome


def test_a_fault_at_every_cloud_call_and_step_of_a_deploy_leaves_nothing(
        deploy_cloud: AWSFake, meter: MotoMeter, launcher_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = deploy_cloud
    _unprepare(fake, launcher_home)
    meter.reset()
    deploy(OPTS, lambda _: None)
    calls = list(meter.calls)
    assert ("ec2", "RunInstances") in calls and ("ec2", "AuthorizeSecurityGroupIngress") in calls
    undeploy(lambda _: None, lambda _: True, yes=True)
    _assert_nothing_left(fake, launcher_home, "the clean deploy and --down")

    outcomes: dict[str, str] = {}
    for n, call in enumerate(calls, start=1):
        _unprepare(fake, launcher_home)
        meter.reset()
        if n % 3 == 0:
            what = f"Ctrl-C at call {n} {call[1]}"
            meter.on_request = lambda k, _c, n=n: k == n and _thread.interrupt_main()
        else:
            what = f"{call[1]} (call {n}) failing"
            meter.fail_at(n, "UnauthorizedOperation", 403)
        try:
            outcomes[what] = _run(fake, meter, launcher_home, what)
        finally:
            meter.on_request = None
    assert sum(o == "failed" for o in outcomes.values()) >= len(calls) // 2, outcomes

    real_at = deploy_mod._Progress.at
    for step in STEPS:
        @contextlib.contextmanager
        def at(self: deploy_mod._Progress, name: str, step: str = step) -> Iterator[None]:
            with real_at(self, name):
                if name == step:
                    raise LauncherError(f"injected failure at {step}")
                yield

        monkeypatch.setattr(deploy_mod._Progress, "at", at)
        assert _run(fake, meter, launcher_home, step) == "failed", step
    monkeypatch.setattr(deploy_mod._Progress, "at", real_at)
    print(f"{len(calls)} cloud calls:", *(f"{k}: {v}" for k, v in outcomes.items()), sep="\n")
