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
setup, job submitted, first output line) is a kill point: 2N + 4 runs (40 today, ~60 s)
with LAUNCHER_FULL_SWEEPS=1; by default the first request of each distinct call (after
it, and before it too for a call that changes EC2) and every phase: 27 today. The points
are split round robin over `sweeps.PARTS` tests (each makes its own clean launch first),
which pytest-xdist runs on different workers.
After each kill: `launcher down NAME -y` (a subprocess) must leave moto with no
pending/running instance, no Elastic IP, no per-cluster security group, no body, and
`launcher status` must no longer list the cluster. Between runs the region is made unprepared again (no
cache, key pair or shared group), so request N is the same call every time (checked).

Controller (a managed 2-node spot job, as in test_e2e_jobs.py; its own process): SIGKILLed
at a request of (a) the first launch and (b) the relaunch after `preempt(...)`, counting
only the requests the controller itself sends (its sockets, by /proc: the test process
plans too), for the 10 points of CONTROLLER_POINTS (6 in the launch incl. one while it
watches the running job, 4 in the recovery: the old gang's teardown, RunInstances before
and after, the rank tags) — a job life per point is 3-8 s (~70 s in all); the every-request
sweep is the client's above, which runs the same provisioning code. The controller is
restarted; the job must succeed, no cluster may ever have had more than one gang live
(instances sampled every 20 ms; a resumed controller may terminate a half-made gang and
make a new one under a new ClientToken: the old one is gone first), and nothing may be
left afterwards. Client: 40 kill points (27 by default); controller: 10; all leak-free today.

Also: a launch with `ports:` killed after its security group was made and before
RunInstances, then `status --refresh` (which must tear that group down before it forgets
the cluster); and a launch killed once its nodes are up but its agent is not, which
`status` must call gone and `launch -c NAME` must resume on the same gang.

Not covered here: placement groups and Elastic IPs (an EFA gang's): this m6i.large path
makes neither; `leaks()` still checks both. That path's faults and kills are tested on
recorded responses (test_aws_efa.py).
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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import netns, sweeps
from tests.aws_moto import CLUSTER_TAG, AWSFake, MotoServer
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


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=_env())


def _task(tmp_path: Path, resources: str = "") -> Path:
    work = tmp_path / "wd"
    work.mkdir(exist_ok=True)
    (work / "f.txt").write_text("synced")
    path = tmp_path / "task.yaml"
    path.write_text(
        f"name: kill\nnum_nodes: 2\nworkdir: {work}\n"
        "resources:\n  cloud: aws\n  region: us-east-1\n  instance_type: m6i.large\n"
        + resources +
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

    def wait(self, timeout: float = 180) -> int:
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


def _client_points(calls: list[tuple[str, str]]) -> list[tuple[str, int | str, str]]:
    """The kill points: ("request", n, when) for the requests, ("phase", name, marker)
    for the phases. By default (tests/sweeps.py) the first request of each distinct call,
    after it, and before it too for a call that changes EC2 (not Describe*/Get*), and
    before the very first request; every phase. LAUNCHER_FULL_SWEEPS=1: every request
    x {before, after}."""
    every = [(n, when) for n in range(1, len(calls) + 1) for when in ("before", "after")]
    if sweeps.full_sweeps():
        chosen = every
    else:
        firsts = sweeps.first_of_each(range(1, len(calls) + 1), lambda n: calls[n - 1])
        chosen = [(1, "before")] + [
            (n, when) for n in firsts for when in ("before", "after")
            if when == "after" or (n > 1 and not calls[n - 1][1].startswith(("Describe", "Get")))
        ]
    return ([("request", n, when) for n, when in chosen]
            + [("phase", phase, marker) for phase, marker in PHASES.items()])


@pytest.mark.parametrize("part", range(sweeps.PARTS))
def test_client_kill9_at_every_request_and_phase(
    aws_cloud: AWSFake, meter: MotoMeter, tmp_path: Path, launcher_home: Path, part: int
) -> None:
    task = _task(tmp_path)
    t0 = time.monotonic()
    calls = _clean_run(aws_cloud, meter, task, launcher_home)
    print(f"clean launch: {len(calls)} requests: {Counter(a for _, a in calls)}")
    problems: list[str] = []
    all_points = _client_points(calls)
    points = sweeps.part_of(all_points, part)
    for kind, at, arg in points:
        if kind == "request":
            assert isinstance(at, int)
            n, when = at, arg
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
        else:
            phase, marker = str(at), arg
            name, what = f"p-{phase}", f"phase {phase}"
            client = Client(task, name, kill_on=marker)
            try:
                client.wait()
            finally:
                client.kill()
            if not client.killed_on_line:
                problems.append(f"{what}: {marker!r} never printed: {client.lines[-5:]}")
        problems += _down_and_check(aws_cloud, name, what)
        _unprepare(aws_cloud, launcher_home)
    print(f"part {part}: {len(points)} of {len(all_points)} kill points "
          f"({len(calls)} requests, {len(PHASES)} phases) in {time.monotonic() - t0:.1f}s")
    assert not problems, "\n".join(problems)


def test_client_killed_between_ports_group_and_run_instances_then_status_refresh(
    aws_cloud: AWSFake, meter: MotoMeter, tmp_path: Path, launcher_home: Path
) -> None:
    """SIGKILL `launch` (a task with `ports:`) once it has made `launcher-NAME-ports` and
    before RunInstances reaches EC2: no instance exists, only the group (and the INIT
    row). `status --refresh` must remove the group before it forgets the cluster."""
    task = _task(tmp_path, "  ports: [8080]\n")
    meter.reset()
    client = Client(task, "sgkill")
    meter.kill_on(("ec2", "RunInstances"), 1, client.pid, "before")
    try:
        client.wait()
    finally:
        client.kill()
    meter.disarm()
    assert meter.killed, (client.lines, meter.calls)
    assert ("ec2", "CreateSecurityGroup") in meter.calls
    left = aws_cloud.leaks()
    assert left.instances == [] and any("sgkill-ports" in g for g in left.security_groups), left
    refresh = _cli("status", "--refresh")
    out = refresh.stdout + refresh.stderr
    assert refresh.returncode == 0 and "Traceback" not in out, out
    assert aws_cloud.leaks().empty(), (aws_cloud.leaks(), out)
    assert "sgkill: no node is left on aws" in out and "No clusters." in out, out
    assert not (launcher_home / "aws" / "clusters" / "sgkill.json").exists()
    assert json.loads(_cli("status", "--json").stdout) == []


def test_client_killed_after_provisioning_then_relaunch_reuses_the_gang(
    aws_cloud: AWSFake, meter: MotoMeter, tmp_path: Path
) -> None:
    """Issue 16 (4.4): SIGKILL `launch` once its nodes are provisioned (it prints
    `Syncing`; the agent is not running yet): the cluster stays INIT, `status` says its
    launch is gone, and `launch -c NAME` reuses the gang (its nodes answer over SSH)
    without a RunInstances."""
    task = _task(tmp_path)
    client = Client(task, "reuse", kill_on=PHASES["ssh-up"])
    try:
        client.wait()
    finally:
        client.kill()
    assert client.killed_on_line, client.lines
    status = _cli("status")
    shown = status.stdout + status.stderr
    assert f"reuse: INIT, but the launch that was bringing it up (pid {client.pid} " in shown, \
        shown
    assert "launcher launch -c reuse TASK" in shown, shown
    meter.reset()
    again = _cli("launch", str(task), "-c", "reuse", "-y", "--detach-run")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "Resuming cluster reuse" in out and "2 node(s) answer" in out, out
    assert ("ec2", "RunInstances") not in meter.calls, meter.calls
    rows = json.loads(_cli("status", "--json").stdout)
    assert [(r["name"], r["status"], r["status_reason"]) for r in rows] == [
        ("reuse", "UP", None)], rows
    assert not _down_and_check(aws_cloud, "reuse", "relaunched INIT gang")


# ---- the controller ------------------------------------------------------------------

RUN = ("ec2", "RunInstances")
TAG = ("ec2", "CreateTags")
DESCRIBE = ("ec2", "DescribeInstances")
TERMINATE = ("ec2", "TerminateInstances")
# (stage, name, (call or None = the first request of the stage, occurrence), when);
# occurrences count from the start of the stage (the controller's start for "launch";
# the preemption for "recovery", where the watch's own DescribeInstances come first)
CONTROLLER_POINTS = [
    ("launch", "first-request", (None, 1), "before"),
    ("launch", "run-instances", (RUN, 1), "before"),
    ("launch", "run-instances", (RUN, 1), "after"),
    ("launch", "rank-tags", (TAG, 1), "after"),
    ("launch", "wait-running", (DESCRIBE, 1), "after"),
    ("launch", "job-running", (None, 0), "after"),  # no request: once the job RUNs
    ("recovery", "teardown", (TERMINATE, 1), "after"),
    ("recovery", "run-instances", (RUN, 1), "before"),
    ("recovery", "run-instances", (RUN, 1), "after"),
    ("recovery", "rank-tags", (TAG, 1), "after"),
]


@pytest.fixture
def jobs_env(
    aws_cloud: AWSFake, launcher_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[AWSFake]:
    from launcher.api import clusters
    from launcher.api import jobs as api

    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    try:
        yield aws_cloud
    finally:
        api.jobs_controller_stop()
        for row in clusters.status():
            clusters.down(row.name)


def _spot_task(tmp_path: Path, seconds: float) -> str:
    path = tmp_path / "spot.yaml"
    path.write_text(
        "name: spotkill\nnum_nodes: 2\n"
        "resources:\n  cloud: aws\n  region: us-east-1\n  instance_type: m6i.large\n"
        "  use_spot: true\n  job_recovery:\n    strategy: FAILOVER\n"
        f'run: echo "started $LAUNCHER_NODE_RANK"; sleep {seconds}\n'
    )
    return str(path)


def _until(cond: Callable[[], bool], timeout: float, what: str | Callable[[], str]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def _gangs(fake: AWSFake) -> dict[str, Counter[str]]:
    """cluster tag -> {client token: instances ever created with it} (any state)."""
    out: dict[str, Counter[str]] = {}
    for region in fake.touched_regions():
        for inst in fake._instances(region):
            tags = {t.get("key"): t.get("value") for t in inst.get_tags()}
            cluster = tags.get(CLUSTER_TAG)
            if cluster:
                out.setdefault(cluster, Counter())[inst.client_token] += 1
    return out


class LiveSampler:
    """Samples moto every 20 ms: the most instances of one cluster live at once."""

    def __init__(self, fake: AWSFake) -> None:
        self.fake = fake
        self.peak: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            now: Counter[str] = Counter()
            for inst in self.fake.instances():
                tags = {t.get("key"): t.get("value") for t in inst.get_tags()}
                if tags.get(CLUSTER_TAG):
                    now[tags[CLUSTER_TAG]] += 1
            for cluster, n in now.items():
                self.peak[cluster] = max(self.peak[cluster], n)

    def stop(self) -> Counter[str]:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def _controller_pid() -> int | None:
    from launcher.api import jobs as api

    return api.jobs_controller_status().pid


@pytest.mark.parametrize(("stage", "name", "at", "when"), CONTROLLER_POINTS,
                         ids=[f"{p[0]}-{p[1]}-{p[3]}" for p in CONTROLLER_POINTS])
def test_controller_kill9_then_resume_makes_one_gang_per_attempt_and_leaves_nothing(
    jobs_env: AWSFake, meter: MotoMeter, tmp_path: Path,
    stage: str, name: str, at: tuple[tuple[str, str] | None, int], when: str,
) -> None:
    from launcher.api import jobs as api
    from launcher.jobs.store import JobStore

    fake = jobs_env
    call, occurrence = at

    def arm() -> None:  # count the controller's own requests only
        meter.reset()
        if occurrence:
            meter.kill_on(call, occurrence, _controller_pid, when, own=True)

    recovery = stage == "recovery"
    sampler = LiveSampler(fake)
    if not recovery:
        arm()
    job = api.jobs_launch(_spot_task(tmp_path, 3 if recovery else 1.5))
    store = JobStore()
    try:
        if recovery or occurrence == 0:
            _until(lambda: api.jobs_status(job.id).status == "RUNNING", 60, "RUNNING")
        if recovery:
            (first,) = store.attempts(job.id)
            ids = [i.id for i in fake.instances()
                   if {t.get("key"): t.get("value") for t in i.get_tags()}.get(CLUSTER_TAG)
                   == first.cluster_name]
            assert len(ids) == 2
            arm()
            fake.preempt(ids)
        pid = _controller_pid()
        if occurrence == 0:  # kill the controller while it watches the running job
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        else:
            _until(lambda: meter.killed, 60,
                   lambda: f"the controller's request {at}; all requests: {meter.calls}, "
                   f"the controller's: {meter.seen}")
            meter.disarm()
        _until(lambda: not api.jobs_controller_status().running, 30, "the controller dead")
        api.jobs_controller_start(wait_s=30)
        final = api.jobs_wait(job.id, timeout=180)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED", reasons
        attempts = store.attempts(job.id)
        _until(lambda: fake.leaks().empty(), 60, "nothing left")
        peak = sampler.stop()
        gangs = _gangs(fake)
        assert set(gangs) <= {a.cluster_name for a in attempts}, (gangs, attempts)
        for a in attempts:
            made = gangs.get(a.cluster_name, Counter())
            # never a duplicate gang: at most one gang (2 instances) of an attempt's
            # cluster live at any time, each gang from one RunInstances (one token);
            # a resumed controller may tear a half-made gang down and make a new one
            assert peak[a.cluster_name] <= 2, (a.cluster_name, peak, gangs, reasons)
            assert all(n == 2 for n in made.values()), (a.cluster_name, gangs)
        print(f"{stage}/{name}/{when}: {len(attempts)} attempt(s), gangs made per cluster "
              f"{ {c: len(t) for c, t in gangs.items()} }, peak live {dict(peak)}",
              *reasons, sep="\n  ")
    finally:
        sampler.stop()
        store.close()
