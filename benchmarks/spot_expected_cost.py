"""Does ranking spot zones by expected cost beat ranking by list price, on real traces?

    python benchmarks/spot_expected_cost.py [--traces DIR] [--hours 2,6,12,24]
                                            [--overhead-min 25] [--every-h 1]
                                            [--avail-every-h 4] [--no-avail]
                                            [--catalog-price max|min]

Reads SkyPilot's "Can't Be Late" spot traces from `--traces`, else
`$LAUNCHER_SPOT_TRACES`, else `<repo>/../shared/spot-traces` (the files are never copied
into the repo: no license). Exits 0 with a message when they are absent.

Table 1, priced traces (the issue's criterion): the 1-node preemption traces that carry
prices, `aws-04-19-2023` (r5.16xlarge in us-east-1b/c/d) and `aws-04-22-2023`
(p3.2xlarge in us-east-1c, us-west-2b/c; us-east-1f has no prices and is left out).
Per tick (`gap_seconds`): 1 = a spot instance runs in that zone, 0 = it does not
(preempted, or no capacity), and that tick's spot price.

Table 2, availability traces with catalog prices (NOT the issue's priced-trace
criterion): the 1-node availability traces `aws-02-15-2023` (p3.2xlarge in 9 zones of
us-east-1, us-east-2, us-west-2, 45 days) and `aws-10-26-2022` (p3.2xlarge in
us-west-2a/b), `*_v100_1.json` only; 1 = spot capacity, and a running instance is
preempted when it drops to 0. They carry no prices: each zone is priced at the bundled
catalog's p3.2xlarge spot price for its region, by the launcher's own rule for a zone
name (the catalog lists AWS zone IDs, and which ID a name is varies by account, so a
zone name gets its region's highest listed spot price: launcher.catalog.locations).
`--catalog-price min` prices each region at its cheapest zone ID instead. The prices
used are printed.

The replay, for every start time (every `--every-h` hours, `--avail-every-h` for
table 2) of the evaluation span (the trace after its first `--prefix` share) and job
length W (`--hours`): at a launch, pick a zone among those with capacity at that tick
by the ranking under test, pay that zone's price for every tick the instance runs; the
first R hours of each launch (R = `--overhead-min`, default the launcher's restart
overhead: 10 min provisioning + setup + half a 30-min checkpoint interval) are paid
without progress; when the trace drops to 0 the instance is preempted (its overhead is
lost), and the job relaunches at once, choosing again by the same rule (waiting, unpaid,
while no zone has capacity; the zone just lost has none at that tick, so it is never
picked straight back). A run ends when W hours of work are done (runs the trace cannot
finish are dropped for every ranking: the comparison is paired).

Rankings (rows):
- list:      the lowest current spot price; ties by zone name (the optimizer's stable
             key, so the list-price ranking the launcher had);
- list-rnd:  the lowest current price, ties broken at random (seeded);
- expected:  price x launcher.optimizer.ranking.expected_cost_factor(rate, R), the optimizer's
             own formula, with each zone's rate its preemptions over the last
             `--window-h` hours (default 24) per hour it was up, with a weak prior
             ((k + 0.5) / (up_h + 1)), plus the rates the managed-jobs controller adds
             for the job's own recent preemptions (launcher.jobs.recovery.observed_rates);
- exp:zone-window: the same without the controller's observed rates (data rates only);
- exp:prefix: rates fixed from the prefix (no live data);
- exp:region-window(+obs): a window pooled over the zone's region (preemptions in any
             zone of a region count against all its zones; the traces show
             preemptions correlated within a region);
- exp:zone-decay, exp:region-decay (+obs): recency-weighted rates, each preemption and
             each up-hour weighted 2^(-age / half-life), per zone or pooled per region;
- exp:residual-decay(+obs): the hazard a fresh launch faced (`counts_residual`),
             recency-weighted;
- tiers+list, tiers+expected: the controller's EAGER_NEXT_REGION placement tiers (other
             regions first, then other zones, then the preempted zones), the ranking
             within a tier;
- hindsight: NOT a live rule: the zone whose current up-run lasts longest (perfect
             knowledge of the next preemption), to show how much any ranking could gain.
"+obs" rows add the controller's observed rates to the same data rates. The half-lives
(and the window of the region rows) are chosen per trace set on the prefix only, from
a small grid (data rates, no +obs): replays of `--tune-hours` jobs that start and
finish inside the prefix; the evaluation span is never used for a choice.

The rates use every zone's trace up to the decision's tick (no look-ahead), as a live
system with a preemption feed per zone would; a lone job sees only its own
preemptions (the controller's observed rates). Prints, per trace set: each zone's mean
price, uptime and preemptions per up-hour, then per ranking and job length the mean
realized cost per run, its difference from `list` (negative = cheaper), and over all
lengths how many paired runs it won/lost against `list`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.jobs.recovery import (  # noqa: E402
    DEFAULT_COOLDOWN_S,
    EAGER_NEXT_REGION,
    BlockSpec,
    Where,
    blocks_after_preemption,
    observed_rates,
    placement_tiers,
)
from launcher.optimizer.ranking import DEFAULT_RESTART_OVERHEAD_HOURS, expected_cost_factor  # noqa: E402

SETS = ("preemption/1-node/aws-04-19-2023", "preemption/1-node/aws-04-22-2023")
AVAIL_SETS = ("availability/1-node/aws-02-15-2023", "availability/1-node/aws-10-26-2022")
AVAIL_GLOB = "*_v100_1.json"
AVAIL_TYPE = "p3.2xlarge"
ENV = "LAUNCHER_SPOT_TRACES"
PRIOR_K, PRIOR_H = 0.5, 1.0  # weak prior of every rate: (k + 0.5) / (up_h + 1)
HALF_LIVES_H = (4.0, 1.0, 2.0, 8.0, 16.0)  # the grid; the first wins ties
WINDOWS_H = (24.0, 6.0, 12.0, 48.0)


@dataclass
class Zone:
    name: str
    gap_h: float
    up: list[int]  # 1 = an instance runs at this tick
    price: list[float]
    # prefix sums: preemptions (1 -> 0 transitions) up to tick i, up ticks before tick i
    pre_cum: list[int]
    up_cum: list[int]
    # tick at which the up-run through tick i ends (== i when down): for `hindsight`
    run_end: list[int]


def make_zone(name: str, gap_h: float, data: list[int], prices: list[float]) -> Zone:
    up = [1 if x else 0 for x in data]
    pre = [0]
    upc = [0]
    for i, x in enumerate(up):
        pre.append(pre[-1] + (1 if i > 0 and up[i - 1] and not x else 0))
        upc.append(upc[-1] + x)
    end = [0] * len(up)
    nxt = len(up)
    for i in range(len(up) - 1, -1, -1):
        if not up[i]:
            nxt = i
        end[i] = nxt
    return Zone(name, gap_h, up, prices, pre, upc, end)


def load_zone(path: Path, price: float | None = None) -> Zone | None:
    """A zone from a trace file; its own prices, else the constant `price`, else None."""
    d = json.loads(path.read_text())
    prices = d.get("prices")
    if prices:
        ps = [float(p) for p in prices]
    elif price is not None:
        ps = [price] * len(d["data"])
    else:
        return None
    return make_zone(path.stem.split("_")[0], d["metadata"]["gap_seconds"] / 3600.0, d["data"], ps)


def find_set(root: Path, rel: str) -> Path | None:
    for base in (root, root / "skypilot-spot-traces"):
        if (base / rel).is_dir():
            return base / rel
    return None


def region_of(zone: str) -> str:
    return zone[:-1]  # us-east-1c -> us-east-1


# ---- rate estimators: per zone, a rate per tick from ticks <= t (no look-ahead) ----

Counts = tuple[list[float], list[float]]  # (preemptions, up-hours) seen by tick t


def counts_window(z: Zone, window: int) -> Counts:
    """Preemptions in ticks (t - window, t] and up-hours in [t - window, t)."""
    n = len(z.up)
    k = [0.0] * n
    u = [0.0] * n
    for t in range(n):
        lo = max(0, t - window)
        k[t] = float(z.pre_cum[t + 1] - z.pre_cum[lo + 1]) if t > lo else 0.0
        u[t] = (z.up_cum[t] - z.up_cum[lo]) * z.gap_h
    return k, u


def counts_decay(z: Zone, half_life_h: float) -> Counts:
    """Preemptions and up-hours, each weighted 2^(-age / half-life)."""
    d = 0.5 ** (z.gap_h / half_life_h)
    n = len(z.up)
    k = [0.0] * n
    u = [0.0] * n
    ek = eu = 0.0
    for t in range(n):
        ek = ek * d + (1.0 if t > 0 and z.up[t - 1] and not z.up[t] else 0.0)
        if t > 0:
            eu = eu * d + z.up[t - 1] * z.gap_h
        k[t], u[t] = ek, eu
    return k, u


def counts_residual(z: Zone, half_life_h: float) -> Counts:
    """What a launch at each past up tick s saw: preempted by t or not, and its exposure
    min(end of its up-run, t) - s (runs still going at t are censored: exposure, no
    event), each launch weighted 2^(-age / half-life); in launch-hours with an event
    and launch-hours x hours of exposure, so (k + 0.5) / (u + 1) is the hazard a fresh
    launch faces. Unlike preemptions per up-hour, it does not let the many short up-runs
    of a flapping zone stand for the hazard of a launch, which lands in a long run more
    often (a run is hit in proportion to its length)."""
    d = 0.5 ** (z.gap_h / half_life_h)
    g = z.gap_h
    n = len(z.up)
    k = [0.0] * n
    u = [0.0] * n
    closed_k = closed_u = 0.0  # launches whose run has ended (weighted; exposure in ticks)
    s0 = s1 = 0.0  # the current run's launches: sum of d^j, sum of j d^j (j = age in ticks)
    for t in range(n):
        if t > 0:
            closed_k *= d
            closed_u *= d
            if z.up[t - 1]:
                s1 = d * (s1 + s0) + d
                s0 = d * s0 + d
                if not z.up[t]:  # the run ended at t: its launches were all preempted
                    closed_k += s0
                    closed_u += s1
                    s0 = s1 = 0.0
        k[t] = g * closed_k
        u[t] = g * g * (closed_u + s1)
    return k, u


def rate_table(zones: list[Zone], counts: Callable[[Zone], Counts], pooled: bool
               ) -> dict[str, list[float]]:
    """Each zone's rate per tick: its own counts, or (pooled) its region's summed."""
    c = {z.name: counts(z) for z in zones}
    out: dict[str, list[float]] = {}
    for z in zones:
        group = [y.name for y in zones if region_of(y.name) == region_of(z.name)] if pooled else [z.name]
        n = len(z.up)
        out[z.name] = [(sum(c[g][0][t] for g in group) + PRIOR_K)
                       / (sum(c[g][1][t] for g in group) + PRIOR_H) for t in range(n)]
    return out


# A chooser sees the zones with capacity, the tick, and the job's own preemptions so
# far (block rows, as the managed-jobs controller keeps them).
Chooser = Callable[[list[Zone], int, list[BlockSpec]], Zone]


def replay(zones: list[Zone], start: int, work_h: float, overhead_h: float,
           choose: Chooser, end: int | None = None) -> tuple[float, int] | None:
    """(cost, preemptions) of one run, or None if the trace (or `end`) ends first."""
    n = min(len(z.up) for z in zones) if end is None else end
    gap = zones[0].gap_h
    t = start
    done = 0.0
    cost = 0.0
    preemptions = 0
    blocks: list[BlockSpec] = []
    while t < n:
        avail = [z for z in zones if z.up[t]]
        if not avail:
            t += 1
            continue
        z = choose(avail, t, blocks)
        overhead_left = overhead_h
        while t < n and z.up[t]:
            cost += z.price[t] * gap
            if overhead_left > 1e-9:
                overhead_left -= gap
            else:
                done += gap
                if done >= work_h - 1e-9:
                    return cost, preemptions
            t += 1
        if t < n:
            preemptions += 1
            now_s = t * gap * 3600.0
            blocks = [b for b in blocks if b.until > now_s]
            blocks += blocks_after_preemption(
                EAGER_NEXT_REGION, Where("aws", region_of(z.name), z.name), now_s)
    return None


def expected_rule(rates: dict[str, list[float]], gap: float, overhead_h: float,
                  live: bool) -> Chooser:
    """Expected cost with a zone's rate from `rates`, plus (live) the rates the
    controller's recovery adds for the job's own recent preemptions."""

    def choose(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        seen = observed_rates(blocks, t * gap * 3600.0, DEFAULT_COOLDOWN_S) if live and blocks else {}

        def key(z: Zone) -> tuple[float, float, str]:
            r = rates[z.name][t]
            for k in (("aws", region_of(z.name), z.name), ("aws", region_of(z.name), None)):
                if k in seen:
                    r += seen[k].per_hour
            return (z.price[t] * expected_cost_factor(r, overhead_h), r, z.name)

        return min(avail, key=key)

    return choose


def in_tiers(rule: Chooser, gap: float) -> Chooser:
    """The managed-jobs controller's search: EAGER_NEXT_REGION placement tiers (other
    regions first, then other zones, then the preempted zones), `rule` within a tier."""

    def choose(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        now_s = t * gap * 3600.0
        last = Where("aws", blocks[-1].region, blocks[-1].zone) if blocks else None
        for tier in placement_tiers(EAGER_NEXT_REGION, blocks, last, now_s):
            b = tier.blocked
            ok = [z for z in avail if ("aws", region_of(z.name)) not in b.regions
                  and ("aws", region_of(z.name), z.name) not in b.zones]
            if ok:
                return rule(ok, t, blocks)
        return rule(avail, t, blocks)

    return choose


def tune(zones: list[Zone], prefix_end: int, overhead_h: float, tune_hours: list[float],
         step: int, options: dict[str, Chooser]) -> tuple[str, dict[str, float]]:
    """The option with the lowest mean cost over runs inside the prefix (first wins ties)."""
    means: dict[str, float] = {}
    for name, rule in options.items():
        costs = []
        for w in tune_hours:
            for start in range(0, prefix_end, step):
                r = replay(zones, start, w, overhead_h, rule, end=prefix_end)
                if r is not None:
                    costs.append(r[0])
        means[name] = statistics.fmean(costs) if costs else float("inf")
    best = min(means, key=lambda k: means[k])  # dicts keep order: the first wins ties
    return best, means


def make_rules(zones: list[Zone], rng: random.Random, prefix_end: int, overhead_h: float,
               args: argparse.Namespace, step: int) -> tuple[dict[str, Chooser], list[str]]:
    """The rankings under test (module docstring) for one trace set, and the notes on
    the parameters chosen on the prefix."""
    gap = zones[0].gap_h

    def by_list(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        return min(avail, key=lambda z: (z.price[t], z.name))

    def by_list_rnd(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        best = min(z.price[t] for z in avail)
        return rng.choice([z for z in avail if z.price[t] <= best + 1e-12])

    def hindsight(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        return min(avail, key=lambda z: (z.price[t] * expected_cost_factor(
            1.0 / max((z.run_end[t] - t) * gap, 1e-9), overhead_h), -z.run_end[t], z.name))

    window = int(args.window_h / gap)
    zone24 = rate_table(zones, lambda z: counts_window(z, window), pooled=False)
    prefix_rates = {z.name: [(z.pre_cum[prefix_end] + PRIOR_K)
                             / (z.up_cum[prefix_end] * gap + PRIOR_H)] * len(z.up) for z in zones}
    tune_hours = [float(x) for x in args.tune_hours.split(",")]
    notes = []
    chosen: dict[str, dict[str, list[float]]] = {}
    families: dict[str, tuple[tuple[float, ...], Callable[[float], dict[str, list[float]]]]] = {
        "region-window": (WINDOWS_H, lambda p: rate_table(
            zones, lambda z: counts_window(z, int(p / gap)), pooled=True)),
        "zone-decay": (HALF_LIVES_H, lambda p: rate_table(
            zones, lambda z: counts_decay(z, p), pooled=False)),
        "region-decay": (HALF_LIVES_H, lambda p: rate_table(
            zones, lambda z: counts_decay(z, p), pooled=True)),
        "residual-decay": (HALF_LIVES_H, lambda p: rate_table(
            zones, lambda z: counts_residual(z, p), pooled=False)),
    }
    for fam, (grid, build) in families.items():
        tables = {f"{p:g}h": build(p) for p in grid}
        best, means = tune(zones, prefix_end, overhead_h, tune_hours, step,
                           {p: expected_rule(tb, gap, overhead_h, live=False) for p, tb in tables.items()})
        chosen[fam] = tables[best]
        label = "window" if "window" in fam else "half-life"
        notes.append(f"{fam} {label} {best} (prefix: " + ", ".join(
            f"{p} ${m:.2f}" for p, m in means.items()) + ")")
    rules: dict[str, Chooser] = {
        "list": by_list,
        "list-rnd": by_list_rnd,
        "expected": expected_rule(zone24, gap, overhead_h, live=True),
        "exp:zone-window": expected_rule(zone24, gap, overhead_h, live=False),
        "exp:prefix": expected_rule(prefix_rates, gap, overhead_h, live=False),
    }
    for fam, table in chosen.items():
        rules[f"exp:{fam}"] = expected_rule(table, gap, overhead_h, live=False)
        rules[f"exp:{fam}+obs"] = expected_rule(table, gap, overhead_h, live=True)
    rules["tiers+list"] = in_tiers(by_list, gap)
    rules["tiers+expected"] = in_tiers(expected_rule(zone24, gap, overhead_h, live=True), gap)
    rules["hindsight (not live)"] = hindsight
    return rules, notes


def run_set(label: str, zones: list[Zone], args: argparse.Namespace, overhead_h: float,
            lengths: list[float], every_h: float, totals: dict[str, list[tuple[float, float]]]) -> None:
    gap = zones[0].gap_h
    n = min(len(z.up) for z in zones)
    prefix_end = int(n * args.prefix)
    step = max(1, int(every_h / gap))
    rules, notes = make_rules(zones, random.Random(args.seed), prefix_end, overhead_h, args, step)
    print()
    print(f"{label}: zones {', '.join(z.name for z in zones)}; {n * gap:.0f} h, tick {gap * 3600:.0f} s,"
          f" starts every {every_h:g} h after the first {prefix_end * gap:.0f} h")
    print("  zone          mean $/h  up%   preempt/up-h (whole trace)  prefix rate")
    for z in zones:
        up_h = z.up_cum[n] * gap
        pr = (z.pre_cum[prefix_end] + PRIOR_K) / (z.up_cum[prefix_end] * gap + PRIOR_H)
        print(f"  {z.name:12s}  {statistics.fmean(z.price[:n]):8.3f}  {100 * z.up_cum[n] / n:4.0f}"
              f"  {z.pre_cum[n] / max(up_h, 1e-9):8.3f}                    {pr:.3f}")
    print(f"  zone-window = {args.window_h:g} h; chosen on the prefix (mean cost of its runs):")
    for note in notes:
        print(f"    {note}")
    results: dict[str, dict[float, list[tuple[float, int]]]] = {k: {} for k in rules}
    for w in lengths:
        per: dict[str, list[tuple[float, int]]] = {k: [] for k in rules}
        for start in range(prefix_end, n, step):
            runs = {k: replay(zones, start, w, overhead_h, fn) for k, fn in rules.items()}
            if any(r is None for r in runs.values()):
                continue
            for k, r in runs.items():
                assert r is not None
                per[k].append(r)
        for k in rules:
            results[k][w] = per[k]
    runs_n = {w: len(results["list"][w]) for w in lengths}
    head = "".join(f"{f'W={w:g}h ({runs_n[w]} runs)':>24}" for w in lengths)
    print(f"  {'ranking':26s}{head}{'all':>18}{'won/lost':>10}")
    base_all = [c for w in lengths for c, _ in results["list"][w]]
    for k in rules:
        cells = []
        for w in lengths:
            v = results[k][w]
            if not v:
                cells.append(f"{'-':>24}")
                continue
            m = statistics.fmean(c for c, _ in v)
            b = statistics.fmean(c for c, _ in results["list"][w])
            cells.append(f"{'$' + format(m, '.2f'):>9} {statistics.fmean(p for _, p in v):4.1f}p"
                         f" {100 * (m / b - 1):+6.1f}%")
        mine = [c for w in lengths for c, _ in results[k][w]]
        if mine:
            d_all = 100 * (statistics.fmean(mine) / statistics.fmean(base_all) - 1)
            won = sum(a < b - 1e-9 for a, b in zip(mine, base_all, strict=True))
            lost = sum(a > b + 1e-9 for a, b in zip(mine, base_all, strict=True))
            tail = f"{'$' + format(statistics.fmean(mine), '.2f'):>10} {d_all:+6.1f}%{won:>5}/{lost:<4}"
            totals.setdefault(k, []).extend(zip(mine, base_all, strict=True))
        else:
            tail = ""
        print(f"  {k:26s}{''.join(cells)}{tail}")


def catalog_prices(regions: Sequence[str], rule: str = "max") -> tuple[dict[str, float], str]:
    """p3.2xlarge spot $/h per region: `max`, the launcher's zone-name rule (the region's
    highest listed spot price; launcher.catalog.locations), or `min` (its cheapest zone
    ID), and the source."""
    from launcher.catalog.query import offers

    best: dict[str, float] = {}
    src = ""
    for o in offers(["V100"], ["aws"]):
        if o.instance_type != AVAIL_TYPE or o.region not in regions or o.spot_price is None:
            continue
        pick = max if rule == "max" else min
        best[o.region] = pick(best.get(o.region, o.spot_price), o.spot_price)
        src = f"{o.source}, fetched {o.fetched_at}"
    return best, src


def summary(title: str, totals: dict[str, list[tuple[float, float]]]) -> None:
    if not totals:
        return
    print(f"{title}: mean cost per run vs list over all runs (won/lost paired runs)")
    for k, pairs in totals.items():
        a = statistics.fmean(x for x, _ in pairs)
        b = statistics.fmean(y for _, y in pairs)
        won = sum(x < y - 1e-9 for x, y in pairs)
        lost = sum(x > y + 1e-9 for x, y in pairs)
        print(f"  {k:26s} ${a:8.2f}  {100 * (a / b - 1):+6.1f}%  {won:5d}/{lost:<5d}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=None, help=f"trace root (default ${ENV}, else ../shared/spot-traces)")
    ap.add_argument("--hours", default="2,6,12,24", help="job lengths (hours of work)")
    ap.add_argument("--overhead-min", type=float, default=DEFAULT_RESTART_OVERHEAD_HOURS * 60)
    ap.add_argument("--every-h", type=float, default=1.0, help="start-time spacing (hours), table 1")
    ap.add_argument("--avail-every-h", type=float, default=4.0, help="start-time spacing (hours), table 2")
    ap.add_argument("--catalog-price", choices=("max", "min"), default="max",
                    help="table 2: a zone's price is its region's highest (the launcher's rule) or lowest")
    ap.add_argument("--no-avail", action="store_true", help="skip table 2 (availability traces)")
    ap.add_argument("--window-h", type=float, default=24.0, help="rolling rate window (hours)")
    ap.add_argument("--prefix", type=float, default=0.25, help="share of the trace for the prefix")
    ap.add_argument("--tune-hours", default="2,6", help="job lengths replayed on the prefix to choose parameters")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)
    root = Path(args.traces or os.environ.get(ENV) or REPO.parent / "shared" / "spot-traces")
    if not root.is_dir():
        print(f"spot traces not found at {root} (set --traces or ${ENV}); nothing to measure.")
        return 0
    overhead_h = args.overhead_min / 60.0
    lengths = [float(x) for x in args.hours.split(",")]
    print(f"traces: {root}   restart overhead R = {args.overhead_min:.0f} min   "
          f"prefix = {args.prefix:.0%}")
    print("cells: mean realized cost per run, mean preemptions per run, vs list (negative = cheaper)")
    print()
    print("TABLE 1: priced traces (the traces' own spot prices)")
    totals: dict[str, list[tuple[float, float]]] = {}
    for rel in SETS:
        d = find_set(root, rel)
        if d is None:
            print(f"{rel}: not found under {root}; skipped")
            continue
        zones = []
        for f in sorted(d.glob("*.json")):
            z = load_zone(f)
            if z is None:
                print(f"{rel}/{f.name}: no prices; left out")
            else:
                zones.append(z)
        if len(zones) >= 2:
            run_set(rel, zones, args, overhead_h, lengths, args.every_h, totals)
    print()
    summary("table 1, all priced runs", totals)
    if args.no_avail:
        return 0
    print()
    print(f"TABLE 2: availability traces with catalog prices ({AVAIL_TYPE}; not the issue's"
          " priced-trace criterion)")
    atotals: dict[str, list[tuple[float, float]]] = {}
    for rel in AVAIL_SETS:
        d = find_set(root, rel)
        if d is None:
            print(f"{rel}: not found under {root}; skipped")
            continue
        files = sorted(d.glob(AVAIL_GLOB))
        regions = sorted({region_of(f.stem.split("_")[0]) for f in files})
        prices, src = catalog_prices(regions, args.catalog_price)
        missing = [r for r in regions if r not in prices]
        if missing:
            print(f"{rel}: no catalog spot price for {AVAIL_TYPE} in {', '.join(missing)}; skipped")
            continue
        how = ("region's highest listed, the launcher's zone-name rule" if args.catalog_price == "max"
               else "region's lowest listed")
        print(f"{rel}: catalog {AVAIL_TYPE} spot $/h ({how}): " + ", ".join(f"{r} ${p:.4f}" for r, p in prices.items())
              + f" [{src}]")
        zones = [z for f in files if (z := load_zone(f, prices[region_of(f.stem.split("_")[0])]))]
        if len(zones) >= 2:
            run_set(rel + f" ({AVAIL_GLOB})", zones, args, overhead_h, lengths, args.avail_every_h, atotals)
    print()
    summary("table 2, all availability runs with catalog prices", atotals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
