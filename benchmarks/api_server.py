"""Latency of `status` and `jobs queue` through the API server vs embedded (in process).

Starts a server on a temporary LAUNCHER_HOME (loopback, a free port) with
LAUNCHER_API_ADMIN_TOKEN, then times N calls of each verb through
`launcher.client.remote.RemoteBackend` and through `EmbeddedBackend` on the same home,
and prints p50/p99 and the remote overhead (p50 remote - p50 embedded); `status_user`
is a plain user's status (the owner filter reads the server's tables too).

Then, on the local cloud:
- `launch_added_s`: the median wall time of `launcher launch -y` of a one-line task
  through the server (a logged-in client home) minus the same in embedded mode (its
  own home), both as CLI processes (`--launches` each; each cluster downed untimed);
- `rss_idle_mib` / `rss_jobs_mib`: the server's resident memory idle, and with
  `--jobs` live managed jobs (`sleep 600`, submitted through the server, all RUNNING).

Everything is cleaned up at the end, also on failure: jobs cancelled, clusters downed,
the server stopped, any local node left terminated, the temporary homes removed.

    python benchmarks/api_server.py [--n 200] [--launches 3] [--jobs 100] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
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


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _server_pid(home: Path) -> int:
    return int(json.loads((home / "server" / "server.pid").read_text())["pid"])


def _launch_added(cli: list[str], server_home: Path, client_home: Path, embedded_home: Path,
                  launches: int) -> dict[str, float]:
    """Median wall time of `launch -y` through the server and embedded, and the gap."""
    task = server_home.parent / "bench-launch.yaml"
    task.write_text("name: bench\nresources:\n  infra: local\nrun: echo hi\n")
    times: dict[str, list[float]] = {"remote": [], "embedded": []}
    for i in range(launches):
        for mode, home in (("remote", client_home), ("embedded", embedded_home)):
            env = {**os.environ, "LAUNCHER_HOME": str(home)}
            name = f"bench-{mode}-{i}"
            t = time.perf_counter()
            subprocess.run([*cli, "launch", str(task), "-c", name, "-y"], env=env, check=True,
                           capture_output=True)
            times[mode].append(time.perf_counter() - t)
            subprocess.run([*cli, "down", name, "-y"], env=env, check=True, capture_output=True)
    r, e = statistics.median(times["remote"]), statistics.median(times["embedded"])
    return {"remote_launch_s": round(r, 2), "embedded_launch_s": round(e, 2),
            "launch_added_s": round(r - e, 2)}


def _rss_with_jobs(remote: object, home: Path, jobs: int) -> dict[str, float]:
    """Submit `jobs` light managed jobs, wait until all run, read the server's RSS."""
    from launcher.task.model import Task

    task = Task.from_yaml_str("name: sleeper\nresources:\n  infra: local\nrun: sleep 600\n")
    for i in range(jobs):
        remote.jobs_launch(task, f"sleeper-{i}")  # type: ignore[attr-defined]
    end = time.monotonic() + 60 + 3 * jobs
    while time.monotonic() < end:
        rows = remote.jobs_queue(True)  # type: ignore[attr-defined]
        if sum(r.status == "RUNNING" for r in rows) >= jobs:
            break
        time.sleep(1.0)  # polling another process's progress: nothing to wait on here
    else:
        raise RuntimeError(f"not all {jobs} managed jobs were RUNNING in time")
    return {"jobs": jobs, "rss_jobs_mib": _rss_mib(_server_pid(home))}


def _clean(cli: list[str], remote: object | None, homes: list[Path]) -> None:
    """Cancel every managed job, down every cluster, stop the server, terminate any local
    node left, remove the homes. Best effort: a benchmark must not leave things running."""
    if remote is not None:
        with contextlib.suppress(Exception):
            for r in remote.jobs_queue(True):  # type: ignore[attr-defined]
                if not r.status.endswith(("SUCCEEDED", "FAILED", "CANCELLED")):
                    remote.jobs_cancel(r.id)  # type: ignore[attr-defined]
    for home in homes:
        env = {**os.environ, "LAUNCHER_HOME": str(home)}
        names = subprocess.run([*cli, "status", "--json"], env=env, capture_output=True,
                               text=True)
        with contextlib.suppress(ValueError):
            for row in json.loads(names.stdout or "[]"):
                subprocess.run([*cli, "down", row["name"], "-y"], env=env, capture_output=True)
    subprocess.run([*cli, "api", "stop"], env={**os.environ, "LAUNCHER_HOME": str(homes[0])},
                   capture_output=True)
    from launcher.clouds.local import LocalCloud

    for home in homes:
        os.environ["LAUNCHER_HOME"] = str(home)
        root = home / "local"
        if root.exists():
            for cdir in root.iterdir():
                with contextlib.suppress(Exception):
                    LocalCloud().terminate(cdir.name)
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="launcher-bench-api-"))
    home, client_home, embedded_home = base / "server", base / "client", base / "embedded"
    for h in (home, client_home, embedded_home):
        h.mkdir(mode=0o700)
    os.environ["LAUNCHER_HOME"] = str(home)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-c", "from launcher.cli import main; main()"]
    env = {**os.environ, "LAUNCHER_API_ADMIN_TOKEN": TOKEN}
    t0 = time.perf_counter()
    subprocess.run([*cli, "api", "start", "--port", str(port)], env=env, check=True,
                   capture_output=True)
    start_s = time.perf_counter() - t0
    remote = None
    try:
        from launcher.api.backend import EmbeddedBackend
        from launcher.client.remote import RemoteBackend

        remote = RemoteBackend(url, TOKEN)
        made = subprocess.run([*cli, "users", "create", "bench", "--json"], env=env, check=True,
                              capture_output=True, text=True)
        user = RemoteBackend(url, json.loads(made.stdout)["token"])
        local = EmbeddedBackend()
        res: dict[str, object] = {"n": a.n, "api_start_s": round(start_s, 2)}
        for verb, r, e in (
            ("status", lambda: remote.status(False, True), lambda: local.status(False, True)),
            ("status_user", lambda: user.status(False, False),
             lambda: local.status(False, False)),
            ("jobs_queue", lambda: remote.jobs_queue(True), lambda: local.jobs_queue(True)),
        ):
            rt, et = _time(r, a.n), _time(e, a.n)
            res[verb] = {"remote_p50_ms": round(statistics.median(rt), 2),
                         "remote_p99_ms": round(_pct(rt, 0.99), 2),
                         "embedded_p50_ms": round(statistics.median(et), 2),
                         "embedded_p99_ms": round(_pct(et, 0.99), 2),
                         "overhead_p50_ms": round(statistics.median(rt) - statistics.median(et), 2)}
        subprocess.run([*cli, "api", "login", "-e", url, "--token", TOKEN], check=True,
                       env={**os.environ, "LAUNCHER_HOME": str(client_home)}, capture_output=True)
        if a.launches:
            res["launch"] = _launch_added(cli, home, client_home, embedded_home, a.launches)
        res["rss_idle_mib"] = _rss_mib(_server_pid(home))
        if a.jobs:
            res["rss_with_jobs"] = _rss_with_jobs(remote, home, a.jobs)
    finally:
        _clean(cli, remote, [home, client_home, embedded_home])
        shutil.rmtree(base, ignore_errors=True)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
