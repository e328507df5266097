"""In-process optimizer time on the full bundled catalog.

    python benchmarks/optimizer.py [--runs 50]

The headline case is a 4-way `any_of` (A100-80GB:8, H100:8, H200:8, B200:8) on 2
nodes with an RDMA fabric, ranked over the offers the planning API hands to `rank`
(every catalog row of those accelerators, read through the catalog's index).
Goal: median <= 20 ms. Also printed, for scale: the same task over every catalog
row (no pre-filter), a CPU-only task over every row, and the whole `plan()` call.
Exits 1 if the headline median misses its goal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from launcher.api import planning
from launcher.catalog import query
from launcher.optimizer.ranking import rank
from launcher.task.model import Task

GOAL_MS = 20.0

ANY_OF_4 = """
name: any-of-4
num_nodes: 2
resources:
  accelerators: {A100-80GB:8, H100:8, H200:8, B200:8}
  network: {fabric: rdma}
"""

CPU_ONLY = """
name: cpu
resources:
  cpus: 8+
  memory: 32+
"""


def median_ms(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    # A throwaway home: the catalog's per-user cache is built there, not in ~/.launcher.
    home = tempfile.TemporaryDirectory(prefix="launcher-bench-")
    os.environ.setdefault("LAUNCHER_HOME", home.name)

    task = Task.from_yaml_str(ANY_OF_4)
    accs = sorted({c.accelerator for c in task.candidates() if c.accelerator})
    matching = list(query.offers(accelerators=accs))
    everything = list(query.offers())
    cpu_task = Task.from_yaml_str(CPU_ONLY)

    ranking = rank(task, matching)
    print(f"catalog: {len(everything)} rows; {len(matching)} rows of {', '.join(accs)}")
    print(f"4-way any_of: {len(ranking.placements)} placements, {len(ranking.rejected)} rejected")
    print(f"{'case':<58} {'goal':>8} {'median':>9} {'min':>8}")
    med, best = median_ms(lambda: rank(task, matching), args.runs)
    ok = med <= GOAL_MS
    print(
        f"{'rank: 4-way any_of, pre-filtered rows (what plan() does)':<58} {GOAL_MS:>6.0f}ms "
        f"{med:>7.2f}ms {best:>6.2f}ms  {'ok' if ok else 'MISSED'}"
    )
    runs_big = max(5, args.runs // 10)
    for label, fn in (
        ("rank: 4-way any_of, every catalog row", lambda: rank(task, everything)),
        ("rank: CPU-only task, every catalog row", lambda: rank(cpu_task, everything)),
        ("plan(): 4-way any_of (catalog read + canonicalize + rank)", lambda: planning.plan(task)),
    ):
        m, b = median_ms(fn, runs_big)
        print(f"{label:<58} {'-':>8} {m:>7.2f}ms {b:>6.2f}ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
