"""Catalog query timings from fresh processes: cold (first use builds the cache), warm,
and warm with AWS refreshed (`launcher catalog refresh`: ~50k AWS rows in the
refreshed-rows store, replacing the snapshot's, as a refresh of every region gives).

    python benchmarks/catalog_query.py [-n RUNS] [--json]

Each run is a new Python process with its own LAUNCHER_HOME (cold) or a prepared one
(warm), timing inside the process with perf_counter; the parent also times the whole
process. Prints the median of RUNS for each figure, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, time
t0 = time.perf_counter()
from launcher.catalog import query
t1 = time.perf_counter()
h100 = query.offers(["H100"])
t2 = time.perf_counter()
query.offers(["H100"])
t3 = time.perf_counter()
gcp = query.offers(["H100"], clouds=["gcp"])
t4 = time.perf_counter()
names = query.accelerator_names()
t5 = time.perf_counter()
query.status()
t6 = time.perf_counter()
everything = query.offers() if WANT_ALL else []
t7 = time.perf_counter()
ms = lambda a, b: round((b - a) * 1000, 2)
print(json.dumps({
    "import launcher.catalog.query": ms(t0, t1),
    "offers(['H100']) first call": ms(t1, t2),
    "offers(['H100']) again": ms(t2, t3),
    "offers(['H100'], clouds=['gcp'])": ms(t3, t4),
    "accelerator_names()": ms(t4, t5),
    "status()": ms(t5, t6),
    "offers(None) (every row)": ms(t6, t7) if WANT_ALL else None,
    "rows": [len(h100), len(gcp), len(names), len(everything)],
}))
"""


def _child(home: str, want_all: bool) -> tuple[dict[str, float | None], list[int], float]:
    env = {**os.environ, "LAUNCHER_HOME": home}
    env.pop("LAUNCHER_CATALOG_DIR", None)
    code = _CHILD.replace("WANT_ALL", "True" if want_all else "False")
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    wall = (time.perf_counter() - start) * 1000
    doc = json.loads(out.stdout)
    rows = [int(n) for n in doc.pop("rows")]
    return {str(k): (None if v is None else float(v)) for k, v in doc.items()}, rows, wall


_PREPARE_REFRESHED = r"""
import dataclasses
from launcher.catalog import query, refreshed
bundled = query.offers(clouds=["aws"])
rows = [dataclasses.replace(o, zone=f"{o.zone or o.region}-{k}", source="bench refresh",
                            fetched_at="2026-11-24T00:00:00Z")
        for o in bundled for k in range(8)]
refreshed.replace_cloud(refreshed.FetchedCatalog(
    cloud="aws", offers=tuple(rows), source="bench refresh", upstream="synthetic",
    fetched_at="2026-11-24T00:00:00Z", regions=("us-east-1",)))
print(len(rows))
"""


def _prepare_refreshed(home: str) -> int:
    env = {**os.environ, "LAUNCHER_HOME": home}
    env.pop("LAUNCHER_CATALOG_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", _PREPARE_REFRESHED], env=env, capture_output=True, text=True,
        check=True,
    )
    return int(out.stdout.strip())


def _python_startup_ms() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - start) * 1000


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("-n", "--runs", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    results: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}, "refreshed": {}}
    walls: dict[str, list[float]] = {"cold": [], "warm": [], "refreshed": [], "python -c pass": []}
    rows: list[int] = []
    with tempfile.TemporaryDirectory(prefix="launcher-bench-") as tmp:
        warm_home = os.path.join(tmp, "warm")
        _child(warm_home, want_all=False)  # prepare the warm cache
        fresh_home = os.path.join(tmp, "refreshed")
        _child(fresh_home, want_all=False)
        refreshed_rows = _prepare_refreshed(fresh_home)
        for i in range(args.runs):
            walls["python -c pass"].append(_python_startup_ms())
            for kind, home in (
                ("cold", os.path.join(tmp, f"cold-{i}")),
                ("warm", warm_home),
                ("refreshed", fresh_home),
            ):
                figures, rows, wall = _child(home, want_all=kind == "warm")
                walls[kind].append(wall)
                for k, v in figures.items():
                    if v is not None:
                        results[kind].setdefault(k, []).append(float(v))

    med = {
        kind: {k: round(statistics.median(v), 1) for k, v in figs.items()}
        for kind, figs in results.items()
    }
    med_walls = {k: round(statistics.median(v), 1) for k, v in walls.items()}
    if args.json:
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "in_process_ms": med,
                    "process_wall_ms": med_walls,
                    "rows": rows,
                    "refreshed_aws_rows": refreshed_rows,
                }
            )
        )
        return 0
    print(f"catalog query timings, median of {args.runs} fresh processes (ms)")
    print(
        f"rows: H100 {rows[0]}, H100 on gcp {rows[1]}, accelerator names {rows[2]}, all {rows[3]}"
    )
    what = {
        "cold": "cache built by this process",
        "warm": "cache already built",
        "refreshed": f"warm, AWS refreshed: {refreshed_rows} rows in the refreshed store",
    }
    for kind in ("cold", "warm", "refreshed"):
        print(f"\n{kind} ({what[kind]}):")
        for k, v in med[kind].items():
            print(f"  {k:<36} {v:>8.1f}")
        print(f"  {'whole process (wall)':<36} {med_walls[kind]:>8.1f}")
    print(f"\npython -c pass (wall)                  {med_walls['python -c pass']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
