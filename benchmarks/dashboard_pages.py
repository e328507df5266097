"""Server time of the dashboard's pages with many jobs and clusters in the DB.

Seeds a temporary LAUNCHER_HOME with N managed jobs (two attempts each: a preempted one
and a running one, with prices) and M clusters, then times each page as an admin (who
sees everything) in process through the ASGI app (no network, no browser): the server's
own time per page. Goal (issue 20): <= 200 ms per page at 2,000 jobs and 200 clusters.

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
    from launcher.jobs.store import JobStore
    from launcher.state.db import PlacementRecord, StateDB

    now = time.time()
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
                                 outcome="PREEMPTED")
            store.add_attempt(job.id, 2, f"mj-{job.id}-2", "preemption", "spot")
            store.update_attempt(job.id, 2, cloud="aws", region="us-east-2",
                                 instance_type="p5.48xlarge", num_nodes=2, use_spot=True,
                                 node_price=13.0, running_at=now - 3000)
    finally:
        store.close()
    with StateDB() as db:
        for i in range(clusters):
            db.create_cluster(f"c-{i}", PlacementRecord(
                "aws", "us-east-1", "us-east-1a", "p5.48xlarge", 2, True, "H100", 8, 98.3,
                "2x p5.48xlarge (H100:8)"))
    with ServerStore() as s:
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
                         "/dashboard/clusters", "/dashboard/cost"):
                c.get(path)  # warm
                ms = []
                for _ in range(args.n):
                    t = time.perf_counter()
                    r = c.get(path)
                    ms.append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200, (path, r.status_code)
                out[path] = {"p50_ms": round(statistics.median(ms), 1),
                             "max_ms": round(max(ms), 1)}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:28} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
