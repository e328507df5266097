"""Whole-process CLI latency: median of 5 runs (after one warm-up) per command.

    python benchmarks/cli_latency.py [--runs 5] [--launcher PATH]

Runs the installed `launcher` console script (or `python -c 'from launcher.cli import
main; main()'` when it is not on PATH) with LAUNCHER_HOME set to a fresh temporary
directory, so the warm-up run also builds whatever per-user cache the catalog uses,
exactly as a user's first call would. Prints goal and measured median per command;
exits 1 if any median misses its goal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (label, arguments, goal in seconds)
CASES: list[tuple[str, list[str], float]] = [
    ("launcher --help", ["--help"], 0.15),
    ("launcher gpus H100:8", ["gpus", "H100:8"], 0.30),
    (
        "launcher launch task_examples/train-2node-rdma.yaml --dryrun",
        ["launch", str(REPO / "task_examples" / "train-2node-rdma.yaml"), "--dryrun"],
        0.40,
    ),
]


def time_once(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}"
        )
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--launcher", default=shutil.which("launcher"))
    args = parser.parse_args()
    base = (
        [args.launcher]
        if args.launcher
        else [sys.executable, "-c", "from launcher.cli import main; main()"]
    )
    failed = False
    with tempfile.TemporaryDirectory(prefix="launcher-bench-") as home:
        env = {**os.environ, "LAUNCHER_HOME": home, "COLUMNS": "160"}
        print(f"command: {' '.join(base)}  (median of {args.runs} after 1 warm-up)")
        print(f"{'case':<64} {'goal':>7} {'median':>8} {'min':>7} {'max':>7}")
        # The bare interpreter, for scale: on a loaded or slow machine every row moves with it.
        bare = [sys.executable, "-c", "pass"]
        time_once(bare, env)
        times = [time_once(bare, env) for _ in range(args.runs)]
        print(
            f"{'(baseline) python -c pass':<64} {'-':>7} {statistics.median(times):>7.3f}s"
            f" {min(times):>6.3f}s {max(times):>6.3f}s"
        )
        for label, cmd_args, goal in CASES:
            cmd = base + cmd_args
            time_once(cmd, env)  # warm-up: page cache, per-user catalog cache
            times = [time_once(cmd, env) for _ in range(args.runs)]
            median = statistics.median(times)
            ok = median <= goal
            failed |= not ok
            print(
                f"{label:<64} {goal:>6.2f}s {median:>7.3f}s {min(times):>6.3f}s {max(times):>6.3f}s"
                f"  {'ok' if ok else 'MISSED'}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
