"""Server time of the dashboard's pages with many jobs and clusters in the DB.

Seeds a temporary LAUNCHER_HOME with N managed jobs (two attempts each: a preempted one
and a running one, with prices, their cost-ledger intervals and the RUNNING event with
the recovery's breakdown) and M clusters (2 nodes each with their last reported state
and health, launched by one of 20 users, plus as many already taken down: their ledger
intervals stay), then times each page as an admin (who sees everything) in process
through the ASGI app (no network, no browser): the server's own time per page. Goal
(issue 20): <= 200 ms per page at 2,000 jobs and 200 clusters.

    python benchmarks/dashboard_pages.py [--jobs 2000] [--clusters 200] [--n 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def seed(jobs: int, clusters: int) -> str:
    from launcher.api.server_store import ServerStore
    from launcher.clouds.base import NodeInfo, NodeState
    from launcher.jobs.state_machine import ManagedJobStatus as S
    from launcher.jobs.store import JobStore
    from launcher.state import node_state
    from launcher.state.db import ClusterStatus, PlacementRecord, StateDB

    now = time.time()
    no_agent = str(Path(os.environ["LAUNCHER_HOME"]) / "no-agent")
    Path(no_agent).mkdir()
    ledger: list[tuple[object, ...]] = []
    store = JobStore()
    try:
        for i in range(jobs):
            job = store.add_job(name=f"train-{i}", task_yaml="run: echo hi\n", task_source=None,
                                strategy="FAILOVER", max_restarts_on_errors=0,
                                recover_on_exit_codes=())
            store.add_attempt(job.id, 1, f"mj-{job.id}-1", "initial", "spot")
            store.update_attempt(job.id, 1, cloud="aws", region="us-east-1",
                                 instance_type="p5.48xlarge", num_nodes=2, use_spot=True,
                                 node_price=12.5, running_at=now - 7200, ended_at=now - 3600,
                                 outcome="PREEMPTED", preempted_at=now - 3610)
            store.add_attempt(job.id, 2, f"mj-{job.id}-2", "preemption", "spot")
            store.update_attempt(job.id, 2, cloud="aws", region="us-east-2",
                                 instance_type="p5.48xlarge", num_nodes=2, use_spot=True,
                                 node_price=13.0, running_at=now - 3000, recovery_s=610.0)
            for target in (S.STARTING, S.RUNNING, S.RECOVERING):
                store.transition(job.id, target, "seeded", attempt=1)
            store.transition(job.id, S.RUNNING, "running on aws/us-east-2 (p5.48xlarge, "
                             "cluster c) 610.0 s after the preemption (detect 10.0 s, decide "
                             "0.0 s, old cluster 90.0 s, record 0.0 s, provision 300.0 s, "
                             "setup+submit 210.0 s, to running 0.0 s)", attempt=2)
            ledger += [(f"mj-{job.id}-1", 25.0, now - 7300, now - 3600, f"managed-job:{job.id}"),
                       (f"mj-{job.id}-2", 26.0, now - 3100, None, f"managed-job:{job.id}")]
    finally:
        store.close()
    with StateDB() as db:
        with db.transaction() as conn:
            conn.executemany(
                "INSERT INTO cost_ledger (cluster, cloud, region, zone, instance_type, num_nodes,"
                " use_spot, hourly_cost, started_at, ended_at, owner) VALUES (?, 'aws', "
                "'us-east-1', NULL, 'p5.48xlarge', 2, 1, ?, ?, ?, ?)", ledger)
        for i in range(clusters):
            rec = db.create_cluster(f"c-{i}", PlacementRecord(
                "aws", "us-east-1", "us-east-1a", "p5.48xlarge", 2, True, "H100", 8, 98.3,
                "2x p5.48xlarge (H100:8)"))
            # no agent anywhere: its (local) runner's home is an empty dir of this home
            db.set_nodes(rec.name, [NodeInfo(0, f"i-{i}a", "10.0.0.1", local_root=no_agent),
                                    NodeInfo(1, f"i-{i}b", "10.0.0.2", local_root=no_agent)])
            # c-7, the one whose page is timed, is STOPPED: its page does not wait on an
            # agent for the queue (that is the agent's time, not the server's)
            db.set_status(rec.name, ClusterStatus.STOPPED if i == 7 else ClusterStatus.UP,
                          "seeded")
            rec = db.require_cluster(rec.name)
            db.open_usage(rec, started_at=now - 3600)
            node_state.record_view(db, rec, {f"i-{i}a": NodeState.RUNNING,
                                             f"i-{i}b": NodeState.UNKNOWN}, now, "aws")
            node_state.record_health(db, rec, [(0, "ok", "fine"), (1, "warn", "hot")], now,
                                     "health gate")
    with ServerStore() as s:
        users = [f"user{k}" for k in range(20)]
        for u in users:
            s.create_user(u, "user")
        for i in range(jobs):
            s.set_job_launcher(i + 1, users[i % len(users)])
        for i in range(clusters):
            s.set_cluster_launcher(f"c-{i}", users[i % len(users)])
        for i in range(clusters):  # as many taken down already, each launched by a user
            name = f"old-{i}"
            with StateDB() as db:
                rec = db.create_cluster(name, PlacementRecord(
                    "aws", "us-west-2", None, "p5.48xlarge", 2, True, hourly_cost=98.3))
                db.open_usage(rec, started_at=rec.launched_at)
            s.set_cluster_launcher(name, users[i % len(users)])
            with StateDB() as db:
                db.delete_cluster(name)
        return s.create_user("bench", "admin")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["LAUNCHER_HOME"] = home
        sys.path.insert(0, str(REPO))
        from fastapi.testclient import TestClient

        from launcher.server.app import create_app

        t = time.perf_counter()
        token = seed(args.jobs, args.clusters)
        seeded_s = time.perf_counter() - t
        out: dict[str, object] = {"jobs": args.jobs, "clusters": args.clusters,
                                  "seed_s": round(seeded_s, 1)}
        with TestClient(create_app(run_controller=False)) as c:
            assert c.post("/dashboard/login", data={"token": token}).status_code == 200
            for path in ("/dashboard/jobs", "/dashboard/jobs?page=40", "/dashboard/jobs/1",
                         "/dashboard/clusters", "/dashboard/clusters/c-7",
                         "/dashboard/clusters/c-7/nodes", "/dashboard/cost",
                         "/dashboard/users"):
                c.get(path)  # warm
                ms, cpu = [], []
                for _ in range(args.n):
                    t, p = time.perf_counter(), time.process_time()
                    r = c.get(path)
                    ms.append((time.perf_counter() - t) * 1000)
                    cpu.append((time.process_time() - p) * 1000)
                    assert r.status_code == 200, (path, r.status_code)
                # cpu: this process's CPU time (the app runs in it): what a busy machine
                # (other processes on its cores) does not inflate as much as wall time
                out[path] = {"p50_ms": round(statistics.median(ms), 1),
                             "max_ms": round(max(ms), 1),
                             "cpu_p50_ms": round(statistics.median(cpu), 1)}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:28} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
