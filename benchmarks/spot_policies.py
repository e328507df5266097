"""Deadline-aware spot policies on the public spot traces, against the offline optimum.

    python benchmarks/spot_policies.py [--traces DIR] [--quick] [--offsets N]

Traces: every JSON under DIR (default: $LAUNCHER_SPOT_TRACES, else <repo>/../shared/spot-traces;
the SkyPilot "Can't Be Late" traces, not shipped with launcher). If the directory is absent, says
so and exits 0.

Runs: each single zone and, per collection and device, the set of its zones (up to 4; a multi-zone
job may start in any of them); 1-node traces run 1-node jobs, the 4-node traces gangs of 4, the
16-node traces gangs of 4 and 16 (a gang is up only when all its nodes are). Jobs of 12/24/48 h
with deadlines of 1.1x/1.5x/2x the job length, from several start offsets per trace (traces shorter
than the deadline are replayed cyclically). Every deadline is feasible (work + overhead <=
deadline).

Discretisation: fine traces are merged to a decision tick near 5 minutes (a merged tick is
available only if all its ticks are, see SpotTrace.coarsen); the work, deadline and restart
overhead are whole ticks (overhead = round(0.2 h / tick), so 0.16-0.22 h depending on the
collection), which makes the DP optimum exact under the simulator's model.

Prices: the trace's spot price when it has one (on-demand: the catalog's AWS list price of the
instance type, 3x the mean spot price if the catalog has none), else spot = 1/3 of on-demand.

A second, smaller table (one start offset) repeats the runs with a 0.5 h restart overhead.

Printed: per policy, runs, deadline-met rate, mean cost relative to on-demand only, mean and worst
gap to the optimum; then the goals: 100% of deadlines met by every deadline policy, ours' mean
cost <= Uniform Progress's, ours' mean gap to the optimum <= 10%. Exits 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `benchmarks.spot_optimum` when run as a script

from benchmarks.spot_optimum import optimum  # noqa: E402
from launcher.spot.policy import Greedy, OnDemandOnly, Ours, UniformProgress  # noqa: E402
from launcher.spot.simulate import Prices, simulate  # noqa: E402
from launcher.spot.traces import SpotTrace, TraceError, load_trace  # noqa: E402

DEFAULT_DIR = REPO.parent / "shared" / "spot-traces"
TARGET_TICK_S = 300.0
JOB_HOURS = (12.0, 24.0, 48.0)
SLACKS = (1.1, 1.5, 2.0)
MAX_ZONES = 4
# instance type of each trace device (file-name suffix), for the on-demand price of priced traces
DEVICE_TYPES = {"v100_1": "p3.2xlarge", "intel_64": "r5.16xlarge"}
POLICIES = (OnDemandOnly(), Greedy(), UniformProgress(), Ours())
OPT = "optimum"


@dataclass(frozen=True, slots=True)
class TraceSet:
    label: str
    traces: tuple[SpotTrace, ...]
    n_nodes: int
    prices: Prices
    price_note: str


@dataclass(frozen=True, slots=True)
class Run:
    policy: str
    cost: float
    od_cost: float
    met: bool
    opt: float


def _od_price(device: str, region: str) -> float | None:
    itype = DEVICE_TYPES.get(device)
    if itype is None:
        return None
    try:
        from launcher.catalog import query

        rows = [o for o in query.offers(clouds=["aws"]) if o.instance_type == itype and o.price]
    except Exception:  # the benchmark still runs without a catalog
        return None
    exact = [o.price for o in rows if o.region == region and o.price]
    pool = exact or [o.price for o in rows if o.price]
    return min(pool) if pool else None


def discover(root: Path) -> list[TraceSet]:
    groups: dict[tuple[str, str, str], list[tuple[Path, SpotTrace]]] = defaultdict(list)
    for path in sorted(root.rglob("*.json")):
        if "spot-advisor" in str(path):
            continue
        try:
            trace = load_trace(path)
        except TraceError as e:
            print(f"skipped: {e}")
            continue
        nodes_dir = next((p for p in path.parts if p.endswith("-node")), "1-node")
        device = path.stem.split("_", 1)[1] if "_" in path.stem else path.stem
        groups[(nodes_dir, path.parent.name, device)].append((path, trace))
    sets: list[TraceSet] = []
    for (nodes_dir, collection, device), members in sorted(groups.items()):
        nodes = int(nodes_dir.split("-")[0])
        gangs = [1] if nodes == 1 else ([4] if nodes == 4 else [4, 16])
        factor = max(1, round(TARGET_TICK_S / members[0][1].gap_s))
        coarse = [(p, t.coarsen(factor)) for p, t in members]
        combos: list[list[tuple[Path, SpotTrace]]] = [[m] for m in coarse]
        if len(coarse) > 1:
            combos.append(coarse[:MAX_ZONES])
        for combo in combos:
            traces = tuple(t for _, t in combo)
            if len({t.gap_s for t in traces}) > 1:
                continue
            n_min = min(t.n_ticks for t in traces)
            traces = tuple(t.window(0, n_min) for t in traces)
            priced = all(t.prices is not None for t in traces)
            if priced:
                spot_mean = statistics.fmean(p for t in traces for p in (t.prices or ()))
                region = traces[0].zone[:-1]
                od = _od_price(device, region)
                note = "trace spot prices, catalog on-demand"
                if od is None:
                    od, note = 3 * spot_mean, "trace spot prices, on-demand = 3x mean spot"
                prices = Prices(on_demand_h=od, spot_h=spot_mean)
            else:
                prices, note = Prices(on_demand_h=1.0, spot_h=1.0 / 3.0), "spot = 1/3 on-demand"
            zones = "+".join(t.zone for t in traces)
            for n in gangs:
                label = f"{nodes_dir}/{collection}/{device} {zones} x{n}"
                sets.append(TraceSet(label, traces, n, prices, note))
    return sets


def run_all(sets: list[TraceSet], overhead_h: float, offsets: int, jobs: tuple[float, ...]) -> list[Run]:
    runs: list[Run] = []
    for ts in sets:
        g = ts.traces[0].gap_s
        length = ts.traces[0].n_ticks
        k = max(1, round(overhead_h * 3600 / g))
        for hours in jobs:
            w = max(1, round(hours * 3600 / g))
            for slack in SLACKS:
                dl = max(w + k, math.floor(w * slack))
                for j in range(offsets):
                    start = (j * length) // offsets
                    kw = {
                        "work_s": w * g,
                        "deadline_s": dl * g,
                        "restart_overhead_s": k * g,
                        "prices": ts.prices,
                        "n_nodes": ts.n_nodes,
                        "start_tick": start,
                    }
                    opt = optimum(ts.traces, **kw).cost  # type: ignore[arg-type]
                    for pol in POLICIES:
                        r = simulate(ts.traces, pol, **kw)  # type: ignore[arg-type]
                        runs.append(Run(pol.name, r.cost, r.on_demand_cost, r.deadline_met, opt))
                    od_cost = kw["prices"].on_demand_h * ts.n_nodes * (w + k) * g / 3600  # type: ignore[attr-defined]
                    runs.append(Run(OPT, opt, od_cost, math.isfinite(opt), opt))
    return runs


def table(runs: list[Run], title: str) -> dict[str, dict[str, float]]:
    by: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by[r.policy].append(r)
    print(title)
    print(f"{'policy':<18} {'runs':>6} {'deadline met':>13} {'cost / on-demand':>17} "
          f"{'mean gap to opt':>16} {'worst gap':>10}")
    stats: dict[str, dict[str, float]] = {}
    for name in [p.name for p in POLICIES] + [OPT]:
        rs = by[name]
        if not rs:
            continue
        met = sum(r.met for r in rs) / len(rs)
        rel = statistics.fmean(r.cost / r.od_cost for r in rs)
        gaps = [r.cost / r.opt - 1 for r in rs if r.opt > 0 and math.isfinite(r.opt)]
        mean_gap, worst = statistics.fmean(gaps), max(gaps)
        stats[name] = {"met": met, "rel": rel, "gap": mean_gap, "worst": worst}
        print(f"{name:<18} {len(rs):>6} {met:>12.1%} {rel:>17.3f} {mean_gap:>15.1%} {worst:>10.1%}")
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=os.environ.get("LAUNCHER_SPOT_TRACES") or str(DEFAULT_DIR),
                        help="spot-traces directory (env LAUNCHER_SPOT_TRACES; default ../shared/spot-traces)")
    parser.add_argument("--quick", action="store_true", help="one start offset, 12/24 h jobs only")
    parser.add_argument("--offsets", type=int, default=2, help="start offsets per trace (default 2)")
    parser.add_argument("--overheads", default="0.2,0.5",
                        help="restart overheads in hours (the first is the main table; the others "
                             "run one start offset)")
    args = parser.parse_args()
    root = Path(args.traces)
    if not root.is_dir():
        print(f"spot traces not found at {root}: nothing to benchmark (set --traces or LAUNCHER_SPOT_TRACES)")
        return 0
    t0 = time.perf_counter()
    sets = discover(root)
    if not sets:
        print(f"no trace files under {root}: nothing to benchmark")
        return 0
    offsets = 1 if args.quick else args.offsets
    jobs = JOB_HOURS[:2] if args.quick else JOB_HOURS
    overheads = [float(x) for x in args.overheads.split(",") if x.strip()]
    print(f"{len(sets)} trace sets from {root}; jobs {'/'.join(f'{h:g}' for h in jobs)} h, "
          f"deadline slack {'/'.join(f'{s:g}x' for s in SLACKS)}, {offsets} start offset(s)")
    ok = True
    for i, oh in enumerate(overheads):
        n_off = offsets if i == 0 else 1  # the other overheads: one start offset, to stay quick
        runs = run_all(sets, oh, n_off, jobs)
        stats = table(runs, f"\nrestart overhead ~{oh:g} h (whole ticks of ~5 min), {n_off} start offset(s)")
        ours, up = stats[Ours.name], stats[UniformProgress.name]
        deadline_ok = all(stats[p.name]["met"] == 1.0 for p in POLICIES)
        goals = [
            ("100% of feasible deadlines met by every policy", deadline_ok),
            (f"ours' mean cost <= Uniform Progress's ({ours['rel']:.3f} vs {up['rel']:.3f} of on-demand)",
             ours["rel"] <= up["rel"] + 1e-12),
            (f"ours' mean gap to the optimum <= 10% ({ours['gap']:.1%})", ours["gap"] <= 0.10),
        ]
        label = "goal" if i == 0 else "same check (informative: the goals are on the first table)"
        for text, good in goals:
            print(f"  {label}: {text}: {'ok' if good else 'MISSED'}")
        if i == 0:
            ok = all(good for _, good in goals)
    print(f"\n{time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
