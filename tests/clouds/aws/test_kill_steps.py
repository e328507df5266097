"""kill -9 of the client and of the controller at each step of an AWS launch (moto + bodies).

Steps are "the Nth EC2/SSM/STS request reached moto's server" (tests/moto_meter.py wraps
the live server's WSGI app and parses each request's action): the process is SIGKILLed
when request N arrives, either BEFORE moto handles it (the request is dropped: EC2 never
acts on it) or AFTER (EC2 acted; the process never sees the answer). Then the phases
after the API calls are killed the same way, on the client's own progress lines.

Client (`launcher launch` of a 2-node m6i.large task, a subprocess with the e2e test's
environment): a clean first launch in an unprepared region makes N requests (counted at
run time; 18 today: STS, instance type, SSM image, key pair, VPC, subnets, security
group and its rules, RunInstances, tags, DescribeInstances). Each of the N requests x
{before, after}, then each of the 4 phases after the last request (SSH up and syncing,
setup, job submitted, first output line) is a kill point: 2N + 4 runs (40 today, ~60 s).
After each kill: `launcher down NAME -y` (a subprocess) must leave moto with no pending/running
instance, no Elastic IP, no per-cluster security group, no body, and `launcher status`
must no longer list the cluster. Between runs the region is made unprepared again (no
cache, key pair or shared group), so request N is the same call every time (checked).

Controller (a managed 2-node spot job, as in test_e2e_jobs.py): SIGKILLed at request N
of (a) the first launch and (b) the relaunch after `preempt(...)`, for a representative
subset of N (see CONTROLLER_POINTS: the first call, RunInstances before and after, the
rank tags and the running wait after) — a full job life per point is ~6 s; the every-
request sweep is the client's above, which runs the same provisioning code. The
controller is restarted; the job must finish, every attempt's cluster must have had
exactly one gang (2 instances ever created with its tag: no duplicate RunInstances), and
nothing may be left afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import netns
from tests.aws_moto import AWSFake, MotoServer
from tests.moto_meter import MotoMeter

pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
# client phases after the API calls: a kill when the client prints a line containing...
PHASES = {
    "ssh-up": "Syncing",
    "setup": "Running setup",
    "submitted": "submitted to",
    "first-output": "(rank 0) started",
}


@pytest.fixture
def meter(moto_server: MotoServer) -> Iterator[MotoMeter]:
    m = MotoMeter.install(moto_server)
    try:
        yield m
    finally:
        m.uninstall()


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=_env())


def _task(tmp_path: Path) -> Path:
    work = tmp_path / "wd"
    work.mkdir(exist_ok=True)
    (work / "f.txt").write_text("synced")
    path = tmp_path / "task.yaml"
    path.write_text(
        f"name: kill\nnum_nodes: 2\nworkdir: {work}\n"
        "resources:\n  cloud: aws\n  region: us-east-1\n  instance_type: m6i.large\n"
        "setup: echo setup done\n"
        'run: echo "started $LAUNCHER_NODE_RANK"; sleep 30\n'
    )
    return path


class Client:
    """`launcher launch` as a subprocess; its stderr/stdout lines collected, and an
    optional SIGKILL when a line contains `kill_on`."""

    def __init__(self, task: Path, name: str, kill_on: str | None = None) -> None:
        self.lines: list[str] = []
        self.kill_on = kill_on
        self.killed_on_line = False
        self.proc = subprocess.Popen(
            [*CLI, "launch", str(task), "-c", name, "-y"], cwd=REPO, env=_env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.kill_on and self.kill_on in line and not self.killed_on_line:
                self.killed_on_line = True
                os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float = 60) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def _unprepare(fake: AWSFake, home: Path) -> None:
    """Make the region unprepared again: no cache, no key pair, no shared group."""
    shutil.rmtree(home / "aws" / "regions", ignore_errors=True)
    backend = fake.ec2_backend("us-east-1")
    for name in list(backend.key_pairs):
        backend.delete_key_pair(name)
    for by_vpc in list(backend.groups.values()):
        for sg in list(by_vpc.values()):
            if sg.name == "launcher":
                backend.delete_security_group(group_id=sg.id)


def _down_and_check(fake: AWSFake, name: str, what: str) -> list[str]:
    """`launcher down NAME -y`, then leaks and status; the problems found."""
    problems = []
    down = _cli("down", name, "-y")
    if "Traceback" in down.stdout + down.stderr:
        problems.append(f"{what}: down crashed: {down.stderr[-800:]}")
    assert fake.bodies is not None
    fake.bodies.sync()
    leaks = fake.leaks()
    if not leaks.empty():
        problems.append(f"{what}: leaks after down (rc={down.returncode}, "
                        f"{down.stderr.strip()[-300:]!r}): {leaks}")
    status = _cli("status", "--json")
    rows = json.loads(status.stdout or "[]")
    if any(r.get("name") == name for r in rows):
        problems.append(f"{what}: status still lists {name}: {rows}")
    return problems


def _clean_run(fake: AWSFake, meter: MotoMeter, task: Path, home: Path) -> list[tuple[str, str]]:
    meter.reset()
    client = Client(task, "clean", kill_on=PHASES["first-output"])
    client.wait()
    calls = list(meter.calls)
    assert any("started 0" in ln for ln in client.lines), client.lines
    assert ("ec2", "RunInstances") in calls, calls
    assert not _down_and_check(fake, "clean", "clean run")
    _unprepare(fake, home)
    return calls


def test_client_kill9_at_every_request_and_phase(
    aws_cloud: AWSFake, meter: MotoMeter, tmp_path: Path, launcher_home: Path
) -> None:
    task = _task(tmp_path)
    t0 = time.monotonic()
    calls = _clean_run(aws_cloud, meter, task, launcher_home)
    print(f"clean launch: {len(calls)} requests: {Counter(a for _, a in calls)}")
    problems: list[str] = []
    runs = 0
    points = [(n, when) for n in range(1, len(calls) + 1) for when in ("before", "after")]
    for n, when in points:
        name = f"k{n}{when[0]}"
        meter.reset()
        client = Client(task, name)
        meter.kill_at(n, client.pid, when)
        try:
            rc = client.wait()
        finally:
            client.kill()
        meter.disarm()
        what = f"request {n} {calls[n - 1]} {when}"
        if not meter.killed:
            problems.append(f"{what}: never reached (rc={rc}, calls={meter.calls})")
        elif meter.calls[n - 1] != calls[n - 1]:
            problems.append(f"{what}: request {n} was {meter.calls[n - 1]} this time")
        problems += _down_and_check(aws_cloud, name, what)
        _unprepare(aws_cloud, launcher_home)
        runs += 1
    for phase, marker in PHASES.items():
        name = f"p-{phase}"
        client = Client(task, name, kill_on=marker)
        try:
            client.wait()
        finally:
            client.kill()
        if not client.killed_on_line:
            problems.append(f"phase {phase}: {marker!r} never printed: {client.lines[-5:]}")
        problems += _down_and_check(aws_cloud, name, f"phase {phase}")
        _unprepare(aws_cloud, launcher_home)
        runs += 1
    print(f"{runs} kill points ({len(calls)} requests x 2 + {len(PHASES)} phases) "
          f"in {time.monotonic() - t0:.1f}s")
    assert not problems, "\n".join(problems)
