"""AWS on moto + sshd bodies: launcher's own time and EC2 calls (tests/aws_moto.py machinery).

Prints goal vs measured (median of N runs). moto's server runs in this process on the
netns lab's gateway, wrapped by tests/moto_meter.py (counts each EC2/SSM/STS request,
times moto's handling of it, injects EC2 errors); tests/cloud_bodies.py starts an sshd
node at each instance's private IP, as cloud-init would on a VM.

- 2-node launch -> the job's first output line (`launcher launch` as a CLI process,
  prepared region), launcher's own time: wall clock MINUS (a) the simulated boot: from
  moto answering RunInstances until both bodies accept TCP (on EC2: the VM boot), and
  (b) moto's own handling of every request outside that window (on EC2: the API's
  latency). What remains: process start, imports, planning, the launcher's side of
  every call, its SSH wait granularity, sync, setup, job submit, streaming.   goal <= 3 s
- EC2 API calls per launch (requests that reached the server; SSM/STS listed apart):
  a first launch in a fresh region (new LAUNCHER_HOME, fresh moto), and a second
  launch (another cluster) in the prepared region.                  goal <= 10 (second)
- failover across 5 capacity errors: the first 5 RunInstances are answered with EC2's
  own InsufficientInstanceCapacity (HTTP 500, EC2's XML error body); launcher's time
  from the first RunInstances request to the one that succeeds, minus moto's handling
  in between.                                                            goal <= 1 s
- managed-job recovery (controller with its default settings): from EC2 reporting the
  preemption (instances terminated with Server.SpotInstanceTermination, bodies killed)
  to the job RUNNING again, minus provisioning (moto's handling of the new gang's
  requests and the simulated boot of its bodies).                        goal <= 5 s

Needs root, iproute2 and sshd (network namespaces); otherwise prints "skipped".
Runs in throw-away LAUNCHER_HOMEs; reaches only loopback and the lab's bridge.

    python3 benchmarks/aws_moto.py [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LAUNCHER = [sys.executable, "-c", "from launcher.cli import main; main()"]

TASK = """\
name: bench
num_nodes: 2
resources:
  cloud: aws
{where}  instance_type: m6i.large
run: |
  echo "first line from rank $LAUNCHER_NODE_RANK"
"""
IN_US_EAST_1 = "  region: us-east-1\n"
# 5 AZs of us-east-1 have a test subnet; the 6th placement is in us-east-2
ANY_OF_TWO_REGIONS = "  any_of:\n    - region: us-east-1\n    - region: us-east-2\n"
SPOT_TASK = """\
name: bench-spot
num_nodes: 2
resources:
  cloud: aws
  region: us-east-1
  instance_type: m6i.large
  use_spot: true
  job_recovery:
    strategy: FAILOVER
run: |
  echo "up on rank $LAUNCHER_NODE_RANK"; sleep 600
"""


class Lab:
    """The netns lab, moto's server on its gateway (metered), the test VPCs, bodies."""

    def __init__(self, workdir: Path) -> None:
        from moto.server import ThreadedMotoServer

        from tests import aws_moto
        from tests.moto_meter import MotoMeter
        from tests.netns import NetnsLab

        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
        self.workdir = workdir
        self.netns = NetnsLab(workdir / "netns")
        for suffix in aws_moto.RESERVED_FOR_INSTANCES:
            self.netns.reserve(self.netns.prefix + suffix)
        server = ThreadedMotoServer(ip_address=self.netns.gateway, port=0, verbose=False)
        server.start()
        port = server.get_host_and_port()[1]
        self.moto = aws_moto.MotoServer(f"http://{self.netns.gateway}:{port}",
                                        self.netns.gateway, server)
        self.meter = MotoMeter.install(self.moto)
        self.fake: Any = None
        self.bodies: Any = None
        self.home: Path | None = None
        self._homes = 0
        os.environ.update({
            "AWS_ENDPOINT_URL": self.moto.endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": aws_moto.REGION,
            "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true", "NO_COLOR": "1", "COLUMNS": "200",
        })
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION"):
            os.environ.pop(var, None)
        import boto3

        boto3.client("ec2", region_name=aws_moto.REGION,
                     endpoint_url=self.moto.endpoint).describe_vpcs()  # moto's first call

    def fresh(self) -> None:
        """A fresh moto (test VPCs, AMI parameters) and a new LAUNCHER_HOME: an
        unprepared region."""
        import yaml
        from moto.moto_api._internal.models import moto_api_backend

        from tests import aws_moto
        from tests.cloud_bodies import CloudBodies

        if self.bodies is not None:
            self.bodies.close()
        moto_api_backend.reset()
        self._homes += 1
        self.home = self.workdir / f"home{self._homes}"
        self.home.mkdir(mode=0o700)
        os.environ["LAUNCHER_HOME"] = str(self.home)
        self.fake = aws_moto.AWSFake(self.moto, self.netns.subnet)
        self.fake.seed()
        (self.home / "config.yaml").write_text(yaml.safe_dump({"aws": {
            "use_internal_ips": True, "ssh_user": "root", "vpc_name": aws_moto.VPC_NAME}}))
        self.bodies = CloudBodies(self.netns, self.fake.list_instances, name="aws").start()
        self.fake.bodies = self.bodies

    def close(self) -> None:
        if self.bodies is not None:
            with contextlib.suppress(Exception):
                self.bodies.close()
        self.meter.uninstall()
        self.moto.server.stop()
        self.netns.close()


class BootWatch:
    """When did RunInstances answer, and when did every body of that gang accept TCP?"""

    def __init__(self, lab: Lab, nodes: int = 2) -> None:
        self.lab, self.nodes = lab, nodes
        self.up: float | None = None
        self._stop = threading.Event()
        self._before = set(lab.bodies.live_nodes())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            new = set(self.lab.bodies.live_nodes()) - self._before
            if len(new) >= self.nodes:
                self.up = time.monotonic()
                return
            time.sleep(0.002)

    def window(self) -> tuple[float, float] | None:
        """(RunInstances answered, bodies up), the last gang's."""
        self._stop.set()
        self._thread.join(5)
        runs = [b for call, _a, b in self.lab.meter.log if call == ("ec2", "RunInstances")]
        if not runs or self.up is None:
            return None
        return runs[-1], self.up


def _task(lab: Lab, name: str, body: str) -> Path:
    assert lab.home is not None
    path = lab.home / f"{name}.yaml"
    path.write_text(body)
    return path


def _launch(lab: Lab, task: Path, cluster: str) -> tuple[float, float]:
    """`launcher launch` -> first rank line. (spawned, first line) on the monotonic clock."""
    t0 = time.monotonic()
    proc = subprocess.Popen([*LAUNCHER, "launch", str(task), "-c", cluster, "-y"], cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first: float | None = None
    for line in proc.stdout:
        if first is None and line.startswith("(rank "):
            first = time.monotonic()
    _, err = proc.communicate()
    if proc.returncode != 0 or first is None:
        raise RuntimeError(f"launch failed (exit {proc.returncode}): {err.strip()[-1500:]}")
    return t0, first


def _down(cluster: str) -> None:
    subprocess.run([*LAUNCHER, "down", cluster, "-y"], cwd=REPO, capture_output=True,
                   timeout=120, check=True)


def _own_launch_time(lab: Lab, task: Path, cluster: str) -> tuple[float, float, float, float]:
    """(own, wall, boot, moto) seconds of one launch to first output."""
    lab.meter.reset()
    watch = BootWatch(lab)
    t0, first = _launch(lab, task, cluster)
    window = watch.window()
    if window is None:
        raise RuntimeError("no RunInstances or bodies seen")
    boot = window[1] - window[0]
    moto = lab.meter.handling_between(t0, window[0]) + lab.meter.handling_between(window[1], first)
    wall = first - t0
    return wall - boot - moto, wall, boot, moto


def _split(calls: list[tuple[str, str]]) -> tuple[int, str]:
    ec2 = [a for s, a in calls if s == "ec2"]
    other = Counter(f"{s}:{a}" for s, a in calls if s != "ec2")
    return len(ec2), ", ".join(f"{k} {v}" for k, v in sorted(other.items())) or "none"


def bench_launch(lab: Lab, runs: int) -> dict[str, Any]:
    own, wall, boot, moto = [], [], [], []
    first_calls: list[tuple[str, str]] = []
    second_calls: list[tuple[str, str]] = []
    for r in range(runs):
        lab.fresh()
        task = _task(lab, "t", TASK.format(where=IN_US_EAST_1))
        lab.meter.reset()
        _launch(lab, task, f"first{r}")  # fresh region: key pair, group, caches made
        first_calls = list(lab.meter.calls)
        _down(f"first{r}")
        o, w, b, m = _own_launch_time(lab, task, f"second{r}")
        second_calls = list(lab.meter.calls)
        _down(f"second{r}")
        own.append(o)
        wall.append(w)
        boot.append(b)
        moto.append(m)
    return {"own": own, "wall": wall, "boot": boot, "moto": moto,
            "first_calls": first_calls, "second_calls": second_calls}


def bench_failover(lab: Lab, runs: int) -> tuple[list[float], list[int], list[float]]:
    own, requests, wall = [], [], []
    for r in range(runs):
        lab.fresh()
        prep = _task(lab, "prep", TASK.format(where=IN_US_EAST_1))
        _launch(lab, prep, f"prep{r}")  # a prepared region: measure failover, not setup
        _down(f"prep{r}")
        task = _task(lab, "t", TASK.format(where=ANY_OF_TWO_REGIONS))
        lab.meter.reset()
        lab.meter.fail(("ec2", "RunInstances"), 5, "InsufficientInstanceCapacity")
        _launch(lab, task, f"fo{r}")
        runs_at = [(a, b) for call, a, b in lab.meter.log if call == ("ec2", "RunInstances")]
        if len(runs_at) < 6:
            raise RuntimeError(f"expected 6 RunInstances, saw {len(runs_at)}")
        start, end = runs_at[0][0], runs_at[-1][0]
        own.append(end - start - lab.meter.handling_between(start, end))
        wall.append(end - start)
        requests.append(len(runs_at))
        _down(f"fo{r}")
    return own, requests, wall


def bench_recovery(lab: Lab, runs: int) -> tuple[list[float], list[float], list[str]]:
    from launcher.api import jobs as api
    from launcher.jobs.store import JobStore
    from tests.aws_moto import CLUSTER_TAG

    own, wall, notes = [], [], []
    for _ in range(runs):
        lab.fresh()
        task = _task(lab, "spot", SPOT_TASK)
        job = api.jobs_launch(str(task))
        store = JobStore()
        try:
            _wait(lambda job=job: api.jobs_status(job.id).status == "RUNNING", 60)
            (first,) = store.attempts(job.id)
            ids = [i.id for i in lab.fake.instances() if any(
                t.get("key") == CLUSTER_TAG and t.get("value") == first.cluster_name
                for t in i.get_tags())]
            lab.meter.reset()
            watch = BootWatch(lab)
            lab.fake.preempt(ids)
            t0 = time.monotonic()
            _wait(lambda job=job, store=store: len(store.attempts(job.id)) == 2
                  and api.jobs_status(job.id).status == "RUNNING", 120, poll=0.01)
            t1 = time.monotonic()
            window = watch.window()
            provisioning = 0.0
            if window is not None:
                run_arrived = [a for call, a, _b in lab.meter.log
                               if call == ("ec2", "RunInstances")][-1]
                # moto's handling of the new gang's requests, and its bodies' boot
                provisioning = (lab.meter.handling_between(run_arrived, window[0])
                                + window[1] - window[0])
            own.append(t1 - t0 - provisioning)
            wall.append(t1 - t0)
            detail = api.jobs_detail(job.id)
            notes.append(next((e.reason for e in reversed(detail.events)
                               if "after the preemption" in (e.reason or "")), ""))
            api.jobs_cancel(job.id)
            api.jobs_wait(job.id, timeout=60)
        finally:
            store.close()
            api.jobs_controller_stop()
    return own, wall, notes


def _wait(cond: Any, timeout: float, poll: float = 0.05) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(poll)
    raise RuntimeError("timed out")


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _row(label: str, measured: str, goal: str, ok: bool | None) -> None:
    mark = "" if ok is None else ("  ok" if ok else "  MISSED")
    print(f"{label:<58} {measured:>18}   goal {goal}{mark}")


@contextlib.contextmanager
def _lab() -> Iterator[Lab | None]:
    from tests import netns

    reason = netns.unavailable_reason()
    if reason:
        print(f"skipped: sshd nodes unavailable ({reason})")
        yield None
        return
    work = Path(tempfile.mkdtemp(prefix="aws-moto-bench-"))
    lab = Lab(work)
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.chdir(REPO)
    with _lab() as lab:
        if lab is None:
            return
        print(f"AWS on moto + sshd bodies, median of {args.runs} run(s)")
        r = bench_launch(lab, args.runs)
        _row("2-node launch -> first output, launcher's own time", f"{_med(r['own']):.2f} s",
             "<= 3 s", _med(r["own"]) <= 3)
        print(f"    wall {_med(r['wall']):.2f} s = own + simulated boot "
              f"{_med(r['boot']):.2f} s + moto handling {_med(r['moto']):.2f} s")
        n1, other1 = _split(r["first_calls"])
        n2, other2 = _split(r["second_calls"])
        _row("EC2 calls, first launch in a fresh region", f"{n1}", "-", None)
        print(f"    {', '.join(a for s, a in r['first_calls'] if s == 'ec2')}; also {other1}")
        _row("EC2 calls, second launch in a prepared region", f"{n2}", "<= 10", n2 <= 10)
        print(f"    {', '.join(a for s, a in r['second_calls'] if s == 'ec2')}; also {other2}")
        own, requests, wall = bench_failover(lab, args.runs)
        _row("failover across 5 capacity errors, launcher's time", f"{_med(own):.2f} s",
             "<= 1 s", _med(own) <= 1)
        print(f"    first to 6th (successful) RunInstances: wall {_med(wall):.2f} s, "
              f"{max(requests)} RunInstances requests")
        own, wall, notes = bench_recovery(lab, args.runs)
        _row("managed-job recovery minus provisioning", f"{_med(own):.2f} s", "<= 5 s",
             _med(own) <= 5)
        print(f"    preemption -> RUNNING wall {_med(wall):.2f} s; controller: {notes[-1]}")


if __name__ == "__main__":
    main()
