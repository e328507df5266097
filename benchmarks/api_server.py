"""Latency of `status` and `jobs queue` through the API server vs embedded (in process).

Starts a server on a temporary LAUNCHER_HOME (loopback, a free port) with
LAUNCHER_API_ADMIN_TOKEN, then times N calls of each verb through
`launcher.client.remote.RemoteBackend` and through `EmbeddedBackend` on the same home,
and prints p50/p99 and the remote overhead (p50 remote - p50 embedded).

    python benchmarks/api_server.py [--n 200] [--json]

Not measured yet (issue 18): a remote launch's added time, server RSS with 100 live jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TOKEN = "lk_benchmark-admin-token-0123456789abcdefghij"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _time(fn: Callable[[], object], n: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="launcher-bench-api-"))
    os.chmod(home, 0o700)
    os.environ["LAUNCHER_HOME"] = str(home)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = [sys.executable, "-c", "from launcher.cli import main; main()"]
    env = {**os.environ, "LAUNCHER_API_ADMIN_TOKEN": TOKEN}
    t0 = time.perf_counter()
    subprocess.run([*cli, "api", "start", "--port", str(port)], env=env, check=True,
                   capture_output=True)
    start_s = time.perf_counter() - t0
    try:
        from launcher.api.backend import EmbeddedBackend
        from launcher.client.remote import RemoteBackend

        remote = RemoteBackend(f"http://127.0.0.1:{port}", TOKEN)
        local = EmbeddedBackend()
        res: dict[str, object] = {"n": a.n, "api_start_s": round(start_s, 2)}
        for verb, r, e in (
            ("status", lambda: remote.status(False, True), lambda: local.status(False, True)),
            ("jobs_queue", lambda: remote.jobs_queue(True), lambda: local.jobs_queue(True)),
        ):
            rt, et = _time(r, a.n), _time(e, a.n)
            res[verb] = {"remote_p50_ms": round(statistics.median(rt), 2),
                         "remote_p99_ms": round(_pct(rt, 0.99), 2),
                         "embedded_p50_ms": round(statistics.median(et), 2),
                         "embedded_p99_ms": round(_pct(et, 0.99), 2),
                         "overhead_p50_ms": round(statistics.median(rt) - statistics.median(et), 2)}
    finally:
        subprocess.run([*cli, "api", "stop"], env=env, capture_output=True)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
