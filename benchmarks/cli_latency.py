"""Whole-process CLI latency: median of 5 runs (after one warm-up) per command.

    python benchmarks/cli_latency.py [--runs 5] [--launcher PATH]

Runs the installed `launcher` console script (or `python -c 'from launcher.cli import
main; main()'` when it is not on PATH) with LAUNCHER_HOME set to a fresh temporary
directory, so the warm-up run also builds whatever per-user cache the catalog uses,
exactly as a user's first call would. Prints goal and measured median per command
(wall clock), and the median CPU time (user + system) of the process, which moves
less than the wall clock on a busy machine; exits 1 if any median misses its goal.
The last case is what one Tab press costs (`launcher logs <TAB>`, bash's protocol).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (label, arguments, goal in seconds, extra environment)
CASES: list[tuple[str, list[str], float, dict[str, str]]] = [
    ("launcher --help", ["--help"], 0.15, {}),
    ("launcher gpus H100:8", ["gpus", "H100:8"], 0.30, {}),
    (
        "launcher launch task_examples/train-2node-rdma.yaml --dryrun",
        ["launch", str(REPO / "task_examples" / "train-2node-rdma.yaml"), "--dryrun"],
        0.40,
        {},
    ),
    (
        "launcher logs <TAB> (shell completion)",
        [],
        0.30,
        {"_LAUNCHER_COMPLETE": "complete_bash", "COMP_WORDS": "launcher logs ", "COMP_CWORD": "2"},
    ),
]


def time_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


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
        print(f"{'case':<64} {'goal':>7} {'median':>8} {'min':>7} {'max':>7} {'cpu':>7}")
        # The bare interpreter, for scale: on a loaded or slow machine every row moves with it.
        bare = [sys.executable, "-c", "pass"]
        time_once(bare, env)
        runs = [time_once(bare, env) for _ in range(args.runs)]
        times = [w for w, _ in runs]
        print(
            f"{'(baseline) python -c pass':<64} {'-':>7} {statistics.median(times):>7.3f}s"
            f" {min(times):>6.3f}s {max(times):>6.3f}s"
            f" {statistics.median(c for _, c in runs):>6.3f}s"
        )
        for label, cmd_args, goal, extra in CASES:
            cmd = base + cmd_args
            case_env = {**env, **extra}
            time_once(cmd, case_env)  # warm-up: page cache, per-user catalog cache
            runs = [time_once(cmd, case_env) for _ in range(args.runs)]
            times = [w for w, _ in runs]
            median = statistics.median(times)
            ok = median <= goal
            failed |= not ok
            print(
                f"{label:<64} {goal:>6.2f}s {median:>7.3f}s {min(times):>6.3f}s {max(times):>6.3f}s"
                f" {statistics.median(c for _, c in runs):>6.3f}s  {'ok' if ok else 'MISSED'}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
