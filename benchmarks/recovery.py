"""Recovery time of managed jobs on the local cloud: preemption -> the job running again.

For each run: a managed counting job (no setup) runs on the local cloud; it is
preempted the way `launcher local preempt` does it, and the time until the
controller has the job RUNNING again on a new cluster is measured (wall clock,
from the moment the preemption starts). Two modes:
- hard: no notice - the node's processes are killed and the cloud reports PREEMPTED;
- notice: `--notice 5` - the agent relays SIGTERM, the job checkpoints and exits,
  the controller starts the replacement as soon as it sees the notice.

The controller runs with its default settings. Goal: median <= 5 s (excluding the
job's own setup; this job has none). Runs in a throw-away LAUNCHER_HOME.

    python3 benchmarks/recovery.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASK = f"""\
name: recovery-bench
workdir: {REPO / "task_examples"}
resources:
  infra: local
  use_spot: true
envs:
  COUNT_TO: "100000"
  STEP_S: "0.1"
run: |
  python3 count_resumable.py
"""


def _wait(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.01)
    raise RuntimeError("timed out")


def one_run(notice: float) -> tuple[float, float | None]:
    """(seconds from preemption start to RUNNING again, controller's recovery_s)."""
    from launcher.api import jobs as api
    from launcher.clouds.local import LocalCloud
    from launcher.jobs.store import JobStore

    path = Path(os.environ["LAUNCHER_HOME"]) / f"task-{time.monotonic_ns()}.yaml"
    path.write_text(TASK)
    job = api.jobs_launch(str(path))
    store = JobStore()
    try:
        _wait(lambda: store.job(job.id).status == "RUNNING")
        time.sleep(1.0)  # let it run a little
        cluster = store.attempts(job.id)[-1].cluster_name
        t0 = time.time()
        preempter = threading.Thread(
            target=LocalCloud().preempt, args=(cluster, None, notice), daemon=True
        )
        preempter.start()
        _wait(
            lambda: (
                len(store.attempts(job.id)) >= 2
                and store.attempts(job.id)[1].running_at is not None
            )
        )
        a2 = store.attempts(job.id)[1]
        assert a2.running_at is not None
        elapsed = a2.running_at - t0
        preempter.join(30)
        api.jobs_cancel(job.id)
        _wait(lambda: store.job(job.id).status == "CANCELLED")
        return elapsed, a2.recovery_s
    finally:
        store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--notice", type=float, default=5.0, help="notice seconds (notice mode)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="launcher-recovery-bench-") as home:
        os.environ["LAUNCHER_HOME"] = home
        os.environ.setdefault("LAUNCHER_JOBS_IDLE_EXIT_S", "60")
        sys.path.insert(0, str(REPO))
        from launcher.api import jobs as api

        try:
            results: dict[str, list[tuple[float, float | None]]] = {"hard": [], "notice": []}
            for mode, notice in (("hard", 0.0), ("notice", args.notice)):
                for _ in range(args.runs):
                    results[mode].append(one_run(notice))
        finally:
            api.jobs_controller_stop()
        print(
            f"managed-job recovery on the local cloud (median of {args.runs} runs, "
            "default controller settings)"
        )
        for mode, rows in results.items():
            walls = [w for w, _ in rows]
            ctrl = [c for _, c in rows if c is not None]
            label = "preempted, no notice" if mode == "hard" else f"{args.notice:g} s notice"
            print(
                f"  {label:22s} preemption -> running again: median {statistics.median(walls):.2f} s "
                f"(min {min(walls):.2f}, max {max(walls):.2f}); controller-recorded "
                f"{statistics.median(ctrl):.2f} s   goal <= 5 s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
