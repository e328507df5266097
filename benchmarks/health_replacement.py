"""Health replacement time of a managed job on the local cloud: an Xid 79 written into a
node's kernel log mid-run -> the head agent's watch finds it -> the controller excludes the
node and starts replacing it -> the gang is RUNNING again.

Each run: a 2-node managed counting job (no setup) runs on the local cloud, its nodes
given the fake GPU tools (tests/fakes/bin) first on PATH and their kernel log at
~/kern.log (LAUNCHER_HEALTH_KMSG_PATH, the documented override). An Xid 79 line is
appended to node 1's log; measured (wall clock):
- detection: the line written -> the watch's finding (its `detected_at`, the attempt's
  preempted_at);
- replacement start: the finding -> the controller's RECOVERING transition (goal: within
  60 s; the issue's bound);
- running again: the line written -> the replaced gang RUNNING.

The watch samples every `--watch-seconds` (default 5, the task default); the controller
runs with its default settings. Runs in a throw-away LAUNCHER_HOME.

    python3 benchmarks/health_replacement.py [--runs N] [--watch-seconds S]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
XID_79 = "[ 9123.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus."


def _task(watch_s: float) -> str:
    return f"""\
name: health-bench
num_nodes: 2
workdir: {REPO / "task_examples"}
resources:
  infra: local
  health: {{watch_seconds: {watch_s:g}}}
envs:
  COUNT_TO: "100000"
  STEP_S: "0.1"
run: |
  python3 count_resumable.py
"""


def _wait(cond: Callable[[], bool], timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.01)
    raise RuntimeError("timed out")


def one_run(watch_s: float) -> tuple[float, float, float]:
    """(detection s, detection -> replacement start s, line -> running again s)."""
    from launcher.api import jobs as api
    from launcher.clouds.local import LocalCloud
    from launcher.jobs.store import JobStore

    path = Path(os.environ["LAUNCHER_HOME"]) / f"task-{time.monotonic_ns()}.yaml"
    path.write_text(_task(watch_s))
    job = api.jobs_launch(str(path))
    store = JobStore()
    try:
        _wait(lambda: store.job(job.id).status == "RUNNING")
        att = store.attempts(job.id)[-1]
        # the watch's first samples (its baseline), then a random point of its period
        time.sleep(max(1.0, 2 * watch_s) + random.uniform(0, watch_s))
        node_log = LocalCloud().node_dir(att.cluster_name, 1) / "kern.log"
        gang_runs = att.gang_runs
        t0 = time.time()
        with open(node_log, "a") as f:
            f.write(XID_79 + "\n")

        def running_again() -> bool:
            a = store.attempts(job.id)[-1]
            return store.job(job.id).status == "RUNNING" and (
                a.attempt != att.attempt or a.gang_runs > gang_runs)

        _wait(running_again)
        back = time.time() - t0
        a = store.attempts(job.id)
        detected = min(x.preempted_at for x in a if x.preempted_at is not None)
        recovering = min(e.at for e in store.events(job.id) if e.to_status == "RECOVERING")
        api.jobs_cancel(job.id)
        _wait(lambda: store.job(job.id).status == "CANCELLED")
        return detected - t0, recovering - detected, back
    finally:
        store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--watch-seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="launcher-health-bench-") as home:
        os.environ["LAUNCHER_HOME"] = home
        os.environ.setdefault("LAUNCHER_JOBS_IDLE_EXIT_S", "60")
        os.environ["PATH"] = f"{REPO / 'tests' / 'fakes' / 'bin'}{os.pathsep}{os.environ['PATH']}"
        os.environ["LAUNCHER_HEALTH_KMSG_PATH"] = "~/kern.log"
        sys.path.insert(0, str(REPO))
        from launcher.api import jobs as api

        try:
            rows = [one_run(args.watch_seconds) for _ in range(args.runs)]
        finally:
            api.jobs_controller_stop()
    print(f"health replacement on the local cloud (watch every {args.watch_seconds:g} s, "
          f"median of {args.runs} runs, default controller settings)")
    for i, label in enumerate(("Xid line -> watch finding", "finding -> replacement start",
                               "Xid line -> gang running again")):
        vals = [r[i] for r in rows]
        goal = "   goal <= 60 s" if i == 1 else ""
        print(f"  {label:32s} median {statistics.median(vals):6.2f} s "
              f"(min {min(vals):.2f}, max {max(vals):.2f}){goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
