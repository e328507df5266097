"""What the state DB's safety checks cost: the once-per-process integrity check on open,
a backup, and a whole `launcher status` call, for DBs of growing size.

    python benchmarks/state_db_checks.py [--events 10000 100000 300000]

Each DB holds one cluster and N cluster events (~250 bytes each), built in a fresh
temporary LAUNCHER_HOME. Prints the file size and the median of 5 runs of: opening
StateDB in a fresh process state (includes `PRAGMA quick_check`), opening it again
(no check), `store.backup_now`, and `launcher status` as a subprocess.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _median(fn: object, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(n: int) -> tuple[float, float, float, float, float]:
    """(size MB, open+check s, open s, backup s, `launcher status` s) for n events."""
    from launcher.state import files as state_files
    from launcher.state import store
    from launcher.state.db import PlacementRecord, StateDB

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        os.environ["LAUNCHER_HOME"] = str(home)
        with StateDB() as db:
            db.create_cluster("c1", PlacementRecord("local", "local", None, "local", 1, False))
            with db.transaction() as conn:
                conn.executemany(
                    "INSERT INTO cluster_events (cluster, ts, kind, cloud, message)"
                    " VALUES ('c1', ?, 'note', NULL, ?)",
                    [(time.time(), f"event {i} " + "x" * 230) for i in range(n)],
                )
        size = (home / "state.db").stat().st_size / 1e6

        def open_checked() -> None:
            state_files._verified.clear()
            StateDB().close()

        checked = _median(open_checked)
        plain = _median(lambda: StateDB().close())
        db = StateDB()
        try:
            backup = _median(lambda: store.backup_now(db._conn, db.path))
        finally:
            db.close()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        cli = [sys.executable, "-c", "from launcher.cli import main; main()", "status"]
        status = _median(lambda: subprocess.run(cli, env=env, capture_output=True, check=True))
    return size, checked, plain, backup, status


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    args = ap.parse_args()
    print(f"{'events':>8} {'MB':>6} {'open+check ms':>14} {'open ms':>8} {'backup ms':>10} "
          f"{'status s':>9}")
    for n in args.events:
        size, checked, plain, backup, status = measure(n)
        print(f"{n:>8} {size:>6.1f} {checked * 1e3:>14.1f} {plain * 1e3:>8.1f} "
              f"{backup * 1e3:>10.1f} {status:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
