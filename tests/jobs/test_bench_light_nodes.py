"""The controller scale benchmark's light nodes (benchmarks/light_nodes.py): the real
controller over agentless local-cloud clusters runs, preempts and recovers jobs, and the
benchmark's `--light` mode reports its figures end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.light_nodes import LightNodeOps
from launcher.clouds.local import LocalCloud, local_root
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore
from tests.jobs.harness import Running, submit, wait_for

REPO = Path(__file__).resolve().parents[2]


def test_the_controller_runs_and_recovers_jobs_on_light_nodes() -> None:
    ops = LightNodeOps(duration_s=1.5)
    r = Running(ops, cloud_poll_s=0.05)
    store = JobStore()
    try:
        ids = [submit(store, name=f"j{i}").id for i in range(5)]
        wait_for(lambda: all(store.job(i).status == S.RUNNING for i in ids), 20.0, "running")
        victim = store.attempts(ids[0])[-1].cluster_name
        LocalCloud().preempt(victim)
        wait_for(lambda: all(store.job(i).status.is_terminal for i in ids), 30.0, "ended")
        jobs = [store.job(i) for i in ids]
        wait_for(lambda: not [p for p in local_root().iterdir() if p.name.startswith("mj-")],
                 20.0, "clusters torn down")
    finally:
        r.stop()
        store.close()
    assert [j.status for j in jobs] == [S.SUCCEEDED] * 5
    assert [j.recoveries for j in jobs] == [1, 0, 0, 0, 0]


def test_the_benchmarks_light_mode_reports_its_figures(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "controller_scale.py"), "--light",
         "--jobs", "10", "--sleep", "6", "--preempt", "0.2", "--timeout", "90"],
        env=env, capture_output=True, text=True, timeout=150, check=True).stdout
    assert time.monotonic() - t0 < 120
    assert "10 managed jobs" in out and "light nodes" in out
    assert "preempted 2 running jobs; relaunched 2" in out
    assert "missed 0; duplicate relaunches 0" in out
    assert "{'SUCCEEDED': 10}" in out and "clusters left: 0" in out
    assert "launches/s" in out and "p99" in out
