"""Launch latency: from `launcher launch` to the job's first output line, and `exec`.

Prints goal vs measured (median of N runs, whole CLI processes, wall clock):
- 4-node local cluster: `launcher launch` -> first job output line   (goal <= 1.5 s)
- `launcher exec CLUSTER -- echo` round trip on a running cluster     (goal <= 0.5 s)
- 3-node SSH pool (sshd in network namespaces, tests/netns.py):
  `launcher launch` -> first job output line                          (goal <= 3 s)
  (needs root, iproute2 and sshd; otherwise printed as "skipped: reason")

Runs in a throw-away LAUNCHER_HOME; never touches ~/.launcher.

    python3 benchmarks/launch_latency.py [--runs N]
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

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = (
    [shutil.which("launcher") or ""]
    if shutil.which("launcher")
    else [sys.executable, "-c", "from launcher.cli import main; main()"]
)

TASK = """\
name: latency
num_nodes: {nodes}
resources:
  infra: {infra}
run: |
  echo "first line from rank $LAUNCHER_NODE_RANK"
"""


def _cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LAUNCHER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def time_to_first_line(args: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning the CLI to the first rank-prefixed line on its stdout."""
    t0 = time.perf_counter()
    proc = _cli(*args, env=env)
    assert proc.stdout is not None
    first: float | None = None
    for line in proc.stdout:
        if first is None and line.startswith("(rank "):
            first = time.perf_counter() - t0
    _, err = proc.communicate()
    if proc.returncode != 0 or first is None:
        raise RuntimeError(f"launch failed (exit {proc.returncode}): {err.strip()[-2000:]}")
    return first


def round_trip(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = _cli(*args, env=env)
    out, err = proc.communicate()
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed (exit {proc.returncode}): {err.strip()[-2000:]}")
    return took


_API_LAUNCH = """
import sys, time
t0 = time.perf_counter()
from dataclasses import dataclass
from launcher.api.launch import launch
from launcher.clouds.ssh import ssh_offers
from launcher.optimizer import rank
from launcher.task import Task

@dataclass
class Plan:
    placements: list
    enabled: list

def plan_fn(task, blocked):
    p = rank(task, ssh_offers(), blocked).placements
    return Plan(p, [True] * len(p))

first = []
def on_line(line):
    if not first:
        first.append(time.perf_counter() - t0)
r = launch(Task.from_yaml(sys.argv[1]), sys.argv[2], plan_fn=plan_fn, on_line=on_line)
assert r.exit_code == 0, r
print(first[0])
"""


def _api_time_to_first_line(task: Path, name: str, env: dict[str, str]) -> float:
    """In-process time to the first line, plus a bare interpreter start (what the CLI adds
    before its imports), so the figure is comparable to the CLI ones."""
    proc = subprocess.run(
        [sys.executable, "-c", _API_LAUNCH, str(task), name],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"launch failed: {proc.stderr.strip()[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1]) + _python_startup(env)


def _python_startup(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - t0


def down(name: str, env: dict[str, str]) -> None:
    subprocess.run([*LAUNCHER, "down", name, "-y"], env=env, capture_output=True, check=False)


def row(label: str, goal: float, values: list[float]) -> None:
    med = statistics.median(values)
    verdict = "OK" if med <= goal else "OVER GOAL"
    spread = f"min {min(values):.3f} max {max(values):.3f}"
    print(
        f"{label:<52} goal <= {goal:.1f} s   measured {med:.3f} s ({spread}, n={len(values)})  {verdict}"
    )


def bench_local(env: dict[str, str], workdir: Path, runs: int) -> None:
    task = workdir / "latency-4.yaml"
    task.write_text(TASK.format(nodes=4, infra="local"))
    launches = []
    for i in range(runs):
        name = f"bench-{i}"
        launches.append(time_to_first_line(["launch", str(task), "-c", name, "-y"], env))
        if i < runs - 1:
            down(name, env)
    row("4-node local: launch -> first job output line", 1.5, launches)
    keep = f"bench-{runs - 1}"
    round_trip(["exec", keep, "--", "true"], env)  # warm the page cache once
    execs = [round_trip(["exec", keep, "--", "echo", "hi"], env) for _ in range(max(runs, 5))]
    row("exec round trip on a running 4-node local cluster", 0.5, execs)
    down(keep, env)


def bench_ssh(env: dict[str, str], workdir: Path, runs: int) -> None:
    label = "3-node SSH pool: launch -> first job output line"
    sys.path.insert(0, str(REPO))
    try:
        from tests.netns import NetnsLab, unavailable_reason
    except ImportError as exc:
        print(f"{label:<52} skipped: the netns harness is not available ({exc})")
        return
    reason = unavailable_reason()
    if reason is None:
        try:
            import launcher.clouds.ssh  # noqa: F401
        except ImportError:
            reason = "the ssh cloud is not available in this build"
    if reason is not None:
        print(f"{label:<52} skipped: {reason}")
        return
    lab = NetnsLab(workdir / "netns")
    nodes = lab.start_nodes(3)
    try:
        hosts = "\n".join(
            f"      - {{host: {n.node_info(i).internal_ip}, port: {n.node_info(i).ssh_port}, "
            f'host_key: "{n.node_info(i).ssh_host_key}"}}'
            for i, n in enumerate(nodes)
        )
        Path(env["LAUNCHER_HOME"], "config.yaml").write_text(
            "ssh_node_pools:\n  bench:\n    user: root\n"
            f"    identity_file: {nodes.client_key_path}\n    hosts:\n{hosts}\n"
        )
        task = workdir / "latency-ssh.yaml"
        task.write_text(TASK.format(nodes=3, infra="ssh/bench"))
        values = []
        via_api = False
        for i in range(runs):
            name = f"bench-ssh-{i}"
            try:
                if via_api:
                    values.append(_api_time_to_first_line(task, name, env))
                else:
                    values.append(time_to_first_line(["launch", str(task), "-c", name, "-y"], env))
            except RuntimeError as exc:
                if "No offer" in str(exc) and not via_api:
                    # the catalog does not list ssh pools yet: plan over the pool's offers
                    via_api = True
                    values.append(_api_time_to_first_line(task, name, env))
                else:
                    print(f"{label:<52} failed: {exc}")
                    return
            finally:
                down(name, env)
        if via_api:
            label += " *"
        row(label, 3.0, values)
        if via_api:
            print(
                "  * measured through the Python API in a fresh process (planning over the "
                "pool's own offers): the catalog does not list ssh pools yet"
            )
    finally:
        nodes.close()
        lab.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="launcher-bench-"))
    env = {**os.environ, "LAUNCHER_HOME": str(workdir / "home"), "PYTHONPATH": str(REPO)}
    base = statistics.median(_python_startup(env) for _ in range(5))
    print(
        f"machine baseline: `python3 -c pass` {base * 1000:.0f} ms, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    try:
        bench_local(env, workdir, args.runs)
        bench_ssh(env, workdir, max(1, args.runs // 2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
