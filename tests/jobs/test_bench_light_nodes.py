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


def test_the_benchmarks_replica_mode_survives_a_killed_replica() -> None:
    """`--db postgresql --replicas 2`: a throwaway PostgreSQL, two controller processes
    under leases, the busiest killed with SIGKILL mid-run; the survivor takes its jobs
    over and every job still succeeds once, on one cluster at a time."""
    import re

    import pytest

    from tests.pg import bin_dir

    if bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run does)")
    # short leases and small claims, so 6 jobs split and the takeover is quick
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAUNCHER_LEASE_TTL_S": "3",
           "LAUNCHER_LEASE_CLAIM_BATCH": "2"}
    env.pop("LAUNCHER_DB_URL", None)
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "controller_scale.py"), "--light",
         "--db", "postgresql", "--replicas", "2", "--kill-one-at", "5", "--jobs", "6",
         "--sleep", "12", "--preempt", "0.2", "--timeout", "90"],
        env=env, capture_output=True, text=True, timeout=180, check=True).stdout
    assert "6 managed jobs" in out and "2 controller replicas" in out
    assert "PostgreSQL (leases)" in out
    assert "missed 0; duplicate relaunches 0" in out and "two live clusters 0" in out
    assert "{'SUCCEEDED': 6}" in out and "clusters left: 0" in out
    assert "(the busiest) at 5 s" in out
    m = re.search(r"takeover: its (\d+) live jobs all held by the survivors after ([\d.]+) s",
                  out)
    assert m, out
    assert int(m.group(1)) >= 3  # 6 jobs claimed 2 at a time: the busiest holds half or more
    assert float(m.group(2)) <= 10.0


def test_the_benchmark_refuses_replicas_without_a_database_server() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "controller_scale.py"), "--light",
         "--replicas", "2"], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--replicas needs --light and --db postgresql" in proc.stderr
    assert "Traceback" not in proc.stderr
