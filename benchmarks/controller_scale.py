"""One controller, many managed jobs: N concurrent jobs (short sleeps) on the local cloud.

Submits N managed jobs (`sleep S`), preempts a random 10% of them once they run,
and waits for all to end. Prints: the controller's peak RSS (goal <= 500 MB),
how many jobs SUCCEEDED (goal: all), how many preempted jobs were recovered
(goal: all - none missed), submit-to-all-running and total wall times.

Every job is a real local cluster with its own head-node agent, so the machine
needs memory for N agents; the controller itself is one asyncio process.
Runs in a throw-away LAUNCHER_HOME.

    python3 benchmarks/controller_scale.py [--jobs 500] [--sleep 30] [--preempt 0.1]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TERMINAL = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE", "CANCELLED"}


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _job_running(ops: object, att: object) -> bool:
    """The head-node agent's own word: is the attempt's job still running?"""
    try:
        run = ops.job_status(att.cluster_name, att.cluster_job_id)  # type: ignore[attr-defined]
    except Exception:
        return False
    return str(run.status) == "RUNNING"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--sleep", type=float, default=30.0, help="seconds each job runs")
    ap.add_argument("--preempt", type=float, default=0.1, help="fraction of jobs to preempt")
    ap.add_argument("--timeout", type=float, default=3600.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="launcher-scale-bench-") as home:
        os.environ["LAUNCHER_HOME"] = home
        os.environ.setdefault("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
        sys.path.insert(0, str(REPO))
        from launcher.api import jobs as api
        from launcher.clouds.local import LocalCloud
        from launcher.errors import LauncherError
        from launcher.jobs.cluster_ops import RealClusterOps
        from launcher.jobs.store import JobStore
        from launcher.task.model import Task

        task = Task.from_dict(
            {
                "name": "sleeper",
                "resources": {"infra": "local", "use_spot": True},
                "run": f"echo start; sleep {args.sleep}; echo done",
            }
        )
        t0 = time.monotonic()
        ids = [
            api.jobs_launch(task, name=f"s{i}", start_controller=False).id for i in range(args.jobs)
        ]
        info = api.jobs_controller_start()
        assert info.pid is not None, "controller did not start"
        pid = info.pid
        peak = [0.0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_mb(pid))
                stop.wait(0.5)

        threading.Thread(target=sample, daemon=True).start()
        store = JobStore()
        rnd = random.Random(7)
        victims = set(rnd.sample(ids, int(round(args.jobs * args.preempt))))
        preempted: dict[int, str] = {}
        skipped: set[int] = set()  # victims whose job had ended before it could be preempted
        ops = RealClusterOps()
        all_running_s = None
        try:
            end = time.monotonic() + args.timeout
            while time.monotonic() < end:
                jobs = {j.id: j for j in store.jobs()}
                running = [i for i in ids if jobs[i].status == "RUNNING"]
                if all_running_s is None and all(
                    jobs[i].status in ("RUNNING", *TERMINAL) for i in ids
                ):
                    all_running_s = time.monotonic() - t0
                for i in running:
                    if i in victims and i not in preempted and i not in skipped:
                        att = store.attempts(i)[-1]
                        if not att.running_at or time.time() - att.running_at <= 1.0:
                            continue
                        # Only a preemption that hits a running job counts: the DB says
                        # RUNNING until the controller's next poll (up to ~10 s with 500
                        # jobs), by when the job's sleep may have ended already.
                        if not _job_running(ops, att):
                            skipped.add(i)
                            continue
                        try:
                            LocalCloud().preempt(att.cluster_name)
                        except LauncherError:
                            skipped.add(i)  # torn down meanwhile: the job had ended
                            continue
                        preempted[i] = att.cluster_name
                if all(jobs[i].status in TERMINAL for i in ids):
                    break
                time.sleep(1.0)
            total = time.monotonic() - t0
            jobs = {j.id: j for j in store.jobs()}
        finally:
            stop.set()
            store.close()
            api.jobs_controller_stop()
        statuses: dict[str, int] = {}
        for i in ids:
            s = jobs[i].status.value
            statuses[s] = statuses.get(s, 0) + 1
        recovered = sum(1 for i in preempted if jobs[i].recoveries >= 1)
        # the job ended between the agent's answer and the preemption: nothing to recover
        store = JobStore()
        try:
            ended_first = sum(1 for i in preempted if jobs[i].recoveries == 0
                              and store.attempts(i)[0].outcome == "SUCCEEDED")
        finally:
            store.close()
        spurious = sum(1 for i in ids if i not in preempted and jobs[i].recoveries > 0)
        print(
            f"controller scale: {args.jobs} managed jobs (sleep {args.sleep:g} s) on one "
            "controller, local cloud"
        )
        print(f"  controller peak RSS: {peak[0]:.0f} MB   goal <= 500 MB")
        print(f"  final statuses: {statuses}   goal: all SUCCEEDED")
        print(
            f"  preempted {len(preempted)} running jobs; recovered {recovered}; ended just "
            f"before the preemption hit: {ended_first}; missed "
            f"{len(preempted) - recovered - ended_first}; recoveries of never-preempted jobs: "
            f"{spurious}; victims not preempted (their job had already ended): {len(skipped)}"
        )
        print(
            f"  all submitted -> all running: "
            f"{'-' if all_running_s is None else f'{all_running_s:.0f} s'}; "
            f"total {total:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
