"""One controller, many managed jobs: N concurrent jobs (short sleeps) on the local cloud.

Submits N managed jobs (`sleep S`), starts one controller, preempts a random 10% of the
jobs once they run (`LocalCloud.preempt`: the node is marked PREEMPTED and its processes
killed), and waits for all to end. Prints:

- the controller's peak RSS (goal <= 500 MB at 2,000 jobs);
- launches per second while capacity is there (goal >= 10/s) and all submitted -> all
  running (every job is submitted before the controller starts);
- p50/p99 time from a preemption to the relaunch starting (the new attempt recorded,
  right before it provisions; goal p99 <= 5 s), and to the relaunch running;
- missed recoveries (a preempted job never relaunched, and its run had not ended first)
  and duplicates (more than one relaunch for one preemption, a recovery of a job never
  preempted, or two live clusters of one job seen at once) - goal 0 and 0;
- final statuses (goal: all SUCCEEDED) and clusters left behind (goal 0).

Two node kinds:
- default: every job is a real local cluster with its own head-node agent (the daemon's
  RealClusterOps), so the machine needs memory and CPU for N agents (~200 on 2 cores);
- `--light`: light nodes (benchmarks/light_nodes.py): real local-cloud clusters without
  an agent, so 2,000 fit on a small machine. The controller is the real one (the same
  loop, poller, launch slots, recovery and SQLite store the daemon runs) in its own
  process; only the ClusterOps below it is light.

The state DB: the SQLite file (default), or PostgreSQL (`--db postgresql`: a throwaway
server started like the tests' own, tests/pg.py; or `--db-url URL`). On PostgreSQL each
controller works under leases, as a server replica's does (launcher/jobs/leases.py), and
`--light --replicas N` starts N controller processes on the one database, each in its
own LAUNCHER_HOME sharing one local cloud: it reports how the jobs split between them,
`kill -9`s the one holding the most jobs at `--kill-one-at S` seconds after the start
(default: a random moment in the first 60 % of a job's run) and reports the takeover (until no live job is still
held by the killed replica: goal <= 10 s), besides every figure above.

Runs in a throw-away LAUNCHER_HOME.

    python3 benchmarks/controller_scale.py [--jobs 500] [--sleep 30] [--preempt 0.1]
    python3 benchmarks/controller_scale.py --light --jobs 2000 --sleep 300
    python3 benchmarks/controller_scale.py --light --db postgresql --replicas 2 --jobs 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TERMINAL = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE", "CANCELLED"}


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of `values`, nearest rank; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def serve_light(sleep_s: float) -> int:
    """The controller process of `--light`: the real Controller over LightNodeOps, holding
    the controller lock like the daemon; SIGTERM stops it."""
    import logging

    from benchmarks.light_nodes import LightNodeOps
    from launcher.jobs import leases, paths
    from launcher.jobs.controller import Controller
    from launcher.jobs.daemon import config_from_env, hold_lock, load_task

    paths.jobs_dir().mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s",
                        handlers=[logging.FileHandler(paths.controller_log_path())])

    async def runner() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        ctrl = Controller(LightNodeOps(sleep_s), load_task,  # type: ignore[arg-type]
                          config=config_from_env())
        if leases.enabled():  # as the server's controller does (launcher/server/controller.py)
            ctrl.leases = leases.Leases(ctrl.store, leases.REPLICA_ID)
        await ctrl.run(stop)  # a clean stop gives the leases back

    with hold_lock() as got:
        if not got:
            return 1
        asyncio.run(runner())
    return 0


def _job_running(ops: object, att: object) -> bool:
    """The head's own word (agent, or the light node's record): is the job still running?"""
    try:
        run = ops.job_status(att.cluster_name, att.cluster_job_id)  # type: ignore[attr-defined]
    except Exception:
        return False
    return str(run.status) == "RUNNING"


_CLUSTER = re.compile(r"mj-(\d+)-(\d+)\Z")


def live_clusters_per_job() -> dict[int, int]:
    """job id -> how many of its local clusters have every node RUNNING now."""
    from launcher.clouds.base import NodeState
    from launcher.clouds.local import LocalCloud, local_root

    root = local_root()
    names = [p.name for p in root.iterdir()] if root.exists() else []
    out: dict[int, int] = {}
    cloud = LocalCloud()
    for name in names:
        m = _CLUSTER.match(name)
        if not m:
            continue
        try:
            view = cloud.query(name)
        except Exception:
            continue
        if view and set(view.values()) == {NodeState.RUNNING}:
            jid = int(m.group(1))
            out[jid] = out.get(jid, 0) + 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--sleep", type=float, default=30.0, help="seconds each job runs")
    ap.add_argument("--preempt", type=float, default=0.1, help="fraction of jobs to preempt")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--light", action="store_true",
                    help="light local nodes without an agent (2,000 jobs on a small machine)")
    ap.add_argument("--keep-home", metavar="DIR",
                    help="use (and keep) this LAUNCHER_HOME, to look at the controller's log "
                    "and the jobs' events afterwards")
    ap.add_argument("--db", choices=("sqlite", "postgresql"), default=None,
                    help="the state DB's engine (default sqlite; postgresql starts a "
                    "throwaway server unless --db-url is given)")
    ap.add_argument("--db-url", metavar="URL",
                    help="an existing, empty PostgreSQL database to use (implies --db postgresql)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="controller processes sharing the database under leases "
                    "(--light --db postgresql only)")
    ap.add_argument("--kill-one-at", metavar="S|random", default=None,
                    help="with --replicas >= 2: kill -9 one replica S seconds after the start "
                    "(default: random)")
    ap.add_argument("--seed", type=int, default=None, help="for the random moment of the kill")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    if args.serve:
        return serve_light(args.sleep)
    problem = _check_args(args)
    if problem:
        print(f"controller_scale.py: {problem}", file=sys.stderr)
        return 2
    os.environ.setdefault("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    # `timeout`/SIGTERM: unwind, so the controllers and the throwaway database go too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as stack:
        if args.db == "postgresql":
            from benchmarks.replica_bench import database

            os.environ["LAUNCHER_DB_URL"] = stack.enter_context(database(args.db_url))
        else:
            os.environ.pop("LAUNCHER_DB_URL", None)
        if args.keep_home:
            os.makedirs(args.keep_home, mode=0o700, exist_ok=True)
            os.environ["LAUNCHER_HOME"] = os.path.abspath(args.keep_home)
            return run(args)
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="launcher-scale-bench-"))
        os.environ["LAUNCHER_HOME"] = home
        return run(args)


def _check_args(args: argparse.Namespace) -> str | None:
    """Fills in the defaults that depend on other options; returns what is wrong, if any."""
    if args.db_url:
        if args.db == "sqlite":
            return "--db-url names a PostgreSQL database: it cannot go with --db sqlite"
        if not args.db_url.startswith(("postgresql:", "postgresql+psycopg:", "postgres:")):
            return f"--db-url {args.db_url!r}: expected a postgresql://... URL"
        args.db = "postgresql"
    args.db = args.db or "sqlite"
    if args.replicas < 1:
        return f"--replicas {args.replicas}: must be 1 or more"
    if args.replicas > 1 and not (args.light and args.db == "postgresql"):
        return "--replicas needs --light and --db postgresql (replicas share a database server)"
    if args.kill_one_at is not None and args.replicas < 2:
        return "--kill-one-at needs --replicas 2 or more (a survivor takes the jobs over)"
    rnd = random.Random(args.seed)
    if args.replicas > 1:
        if args.kill_one_at in (None, "random"):
            args.kill_one_at = round(rnd.uniform(1.0, max(1.5, 0.6 * args.sleep)), 1)
        else:
            try:
                args.kill_one_at = float(args.kill_one_at)
            except ValueError:
                return f"--kill-one-at {args.kill_one_at!r}: expected seconds or 'random'"
    args.victim = None  # chosen at the kill: the replica holding the most jobs
    return None


def run(args: argparse.Namespace) -> int:
    from launcher.api import jobs as api
    from launcher.clouds.local import LocalCloud, local_root
    from launcher.errors import LauncherError
    from launcher.jobs.store import JobStore
    from launcher.task.model import Task

    task = Task.from_dict(
        {
            "name": "sleeper",
            "resources": {"infra": "local", "use_spot": True},
            "run": f"echo start; sleep {args.sleep}; echo done",
        }
    )
    t_submit = time.monotonic()
    ids = [
        api.jobs_launch(task, name=f"s{i}", start_controller=False, check=i == 0).id
        for i in range(args.jobs)
    ]
    submit_s = time.monotonic() - t_submit
    t0, t0_epoch = time.monotonic(), time.time()
    procs: list[subprocess.Popen[bytes]] = []
    if args.light:
        from benchmarks.light_nodes import LightNodeOps
        from benchmarks.replica_bench import replica_homes

        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        homes = [Path(os.environ["LAUNCHER_HOME"])] if args.replicas == 1 else \
            replica_homes(Path(os.environ["LAUNCHER_HOME"]), args.replicas)
        procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve",
                                   "--sleep", str(args.sleep)],
                                  env={**env, "LAUNCHER_HOME": str(h)}) for h in homes]
        pids = [p.pid for p in procs]
        ops: object = LightNodeOps(args.sleep)
    else:
        from launcher.jobs.cluster_ops import RealClusterOps

        info = api.jobs_controller_start()
        assert info.pid is not None, "controller did not start"
        pids = [info.pid]
        ops = RealClusterOps()
    peaks = [0.0] * len(pids)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for k, pid in enumerate(pids):
                peaks[k] = max(peaks[k], rss_mb(pid))
            stop.wait(0.5)

    threading.Thread(target=sample, daemon=True).start()
    store = JobStore()
    watch = None
    if args.replicas > 1:
        from benchmarks.replica_bench import LeaseWatch

        watch = LeaseWatch(store, pids)
    rnd = random.Random(7)
    victims = set(rnd.sample(ids, int(round(args.jobs * args.preempt))))
    preempted: dict[int, float] = {}  # job -> when it was preempted (epoch s)
    skipped: set[int] = set()  # victims whose job had ended before it could be preempted
    doubled: set[int] = set()  # jobs seen with two live clusters at once
    all_running_s = None
    tick = 0.5 if args.light else 1.0
    try:
        end = time.monotonic() + args.timeout
        while time.monotonic() < end:
            jobs = {j.id: j for j in store.jobs()}
            if all_running_s is None and all(
                jobs[i].status in ("RUNNING", *TERMINAL) for i in ids
            ):
                all_running_s = time.monotonic() - t0
            for i in ids:
                if jobs[i].status != "RUNNING" or i not in victims or i in preempted \
                        or i in skipped:
                    continue
                att = store.attempts(i)[-1]
                if not att.running_at or time.time() - att.running_at <= 1.0:
                    continue
                # Only a preemption that hits a running job counts: the DB says RUNNING
                # until the controller's next look, by when the job may have ended.
                if not _job_running(ops, att):
                    skipped.add(i)
                    continue
                at = time.time()
                try:
                    LocalCloud().preempt(att.cluster_name)
                except LauncherError:
                    skipped.add(i)  # torn down meanwhile: the job had ended
                    continue
                preempted[i] = at
            doubled |= {j for j, n in live_clusters_per_job().items() if n > 1}
            for k, p in enumerate(procs):
                if k != args.victim and p.poll() is not None:
                    raise RuntimeError(f"controller {k} (pid {p.pid}) exited by itself with "
                                       f"status {p.returncode}: see its log above")
            if watch is not None:
                watch.sample()
                if watch.killed_at is None and time.monotonic() - t0 >= args.kill_one_at:
                    args.victim = watch.kill_busiest()
            if all(jobs[i].status in TERMINAL for i in ids):
                break
            time.sleep(tick)
        total = time.monotonic() - t0
        jobs = {j.id: j for j in store.jobs()}
        attempts = {i: store.attempts(i) for i in ids}
    finally:
        stop.set()
        store.close()
        if procs:
            for k, p in enumerate(procs):
                if k != args.victim and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(120)
        else:
            api.jobs_controller_stop()
    left = sorted(p.name for p in local_root().iterdir() if _CLUSTER.match(p.name)) \
        if local_root().exists() else []
    statuses: dict[str, int] = {}
    for i in ids:
        s = jobs[i].status.value
        statuses[s] = statuses.get(s, 0) + 1
    to_start: list[float] = []
    to_running: list[float] = []
    missed = ended_first = duplicates = 0
    start_by_job: dict[int, float] = {}
    for i, at in preempted.items():
        relaunches = [a for a in attempts[i] if a.cause == "preemption" and a.created_at >= at]
        if not relaunches:
            if attempts[i][0].outcome == "SUCCEEDED":
                ended_first += 1  # the run ended between the check and the preemption
            else:
                missed += 1
            continue
        duplicates += len(relaunches) - 1
        to_start.append(relaunches[0].created_at - at)
        start_by_job[i] = relaunches[0].created_at - at
        if relaunches[0].running_at:
            to_running.append(relaunches[0].running_at - at)
    spurious = sum(1 for i in ids if i not in preempted and jobs[i].recoveries > 0)
    # From the attempt rows (exact): the first attempts' RUNNING times since the start
    firsts = [t for i in ids if attempts[i] and (t := attempts[i][0].running_at) is not None]
    if all_running_s is not None and firsts:
        all_running_s = max(firsts) - t0_epoch
    launch_rate = len(firsts) / all_running_s if all_running_s else 0.0
    kind = "light nodes (no agent)" if args.light else "a head-node agent per cluster"
    engine = "SQLite" if args.db == "sqlite" else "PostgreSQL (leases)"
    who = "one controller" if args.replicas == 1 else f"{args.replicas} controller replicas"
    print(f"controller scale: {args.jobs} managed jobs (sleep {args.sleep:g} s) on {who}, "
          f"local cloud, {kind}, {engine}")
    print(f"  submitted {args.jobs} jobs in {submit_s:.0f} s (before the controller started); "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"  controller peak RSS: {' / '.join(f'{p:.0f} MB' for p in peaks)}   goal <= 500 MB")
    print(f"  all submitted -> all running: "
          f"{'-' if all_running_s is None else f'{all_running_s:.1f} s'}; "
          f"launches/s: {launch_rate:.1f}   goal >= 10/s; total {total:.0f} s")

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    print(f"  preemption -> relaunch start: p50 {fmt(pct(to_start, 0.5))}, p99 "
          f"{fmt(pct(to_start, 0.99))}, max {fmt(max(to_start, default=None))}   goal p99 <= 5 s")
    print(f"  preemption -> relaunch running: p50 {fmt(pct(to_running, 0.5))}, p99 "
          f"{fmt(pct(to_running, 0.99))}")
    if watch is not None and watch.killed_at is not None:
        # a preemption of a dead replica's job (not relaunched by it before it died, or
        # hit before the takeover) waits for its lease to lapse: apart
        end = watch.killed_at + (watch.takeover_s if watch.takeover_s is not None else 1e9)
        waited = {i for i, s in start_by_job.items()
                  if i in watch.orphan_ids and preempted[i] + s >= watch.killed_at
                  and preempted[i] <= end}
        during = [s for i, s in start_by_job.items() if i in waited]
        other = [s for i, s in start_by_job.items() if i not in waited]
        print(f"    of which the killed replica's jobs, relaunched by the survivor: "
              f"{len(during)}, p50 {fmt(pct(during, 0.5))}, "
              f"max {fmt(max(during, default=None))}; the other {len(other)}: p50 "
              f"{fmt(pct(other, 0.5))}, p99 {fmt(pct(other, 0.99))}")
    print(f"  preempted {len(preempted)} running jobs; relaunched {len(to_start)}; ended just "
          f"before the preemption hit: {ended_first}; missed {missed}; duplicate relaunches "
          f"{duplicates}; recoveries of never-preempted jobs {spurious}; jobs seen with two "
          f"live clusters {len(doubled)}   goal: 0 missed, 0 duplicates")
    print(f"  final statuses: {statuses}   goal: all SUCCEEDED; clusters left: {len(left)}")
    if watch is not None:
        _report_replicas(watch, args)
    return 0


def _report_replicas(watch: object, args: argparse.Namespace) -> None:
    from benchmarks.replica_bench import LeaseWatch

    assert isinstance(watch, LeaseWatch)
    split = ", ".join(f"{watch.name(r)} {n}" for r, n in sorted(watch.peak_held.items()))
    print(f"  jobs held per replica (most at once): {split}")
    at_kill = ", ".join(f"{watch.name(r)} {n}" for r, n in sorted(watch.held_at_kill.items()))
    if args.victim is None:
        print(f"  no replica killed: the run ended before {args.kill_one_at:g} s")
        return
    print(f"  kill -9 of replica {args.victim} (the busiest) at {args.kill_one_at:g} s; held "
          f"at that moment: {at_kill or '-'}")
    took = "-" if watch.takeover_s is None else f"{watch.takeover_s:.1f} s"
    print(f"  takeover: its {watch.orphans} live jobs all held by the survivors after {took}"
          f"   goal <= 10 s")


if __name__ == "__main__":
    sys.exit(main())
