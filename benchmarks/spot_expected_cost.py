"""Does ranking spot zones by expected cost beat ranking by list price, on real traces?

    python benchmarks/spot_expected_cost.py [--traces DIR] [--hours 2,6,12,24]
                                            [--overhead-min 25] [--every-h 1]

Reads the public spot traces that carry prices (SkyPilot's "Can't Be Late" preemption
traces, 1-node, `aws-04-19-2023`: r5.16xlarge in us-east-1b/c/d, and `aws-04-22-2023`:
p3.2xlarge in us-east-1c, us-west-2b/c; us-east-1f has no prices and is left out) from
`--traces`, else `$LAUNCHER_SPOT_TRACES`, else `<repo>/../shared/spot-traces` (the
files are never copied into the repo: no license). Exits 0 with a message when they
are absent.

Each trace file is one zone: per tick (`gap_seconds`), 1 = a spot instance runs there,
0 = it does not (preempted, or no capacity), and the spot price of that tick.

The replay, for every start time (every `--every-h` hours of the evaluation span) and
job length W (`--hours`): at a launch, pick a zone among those with capacity at that
tick by the ranking under test, pay that zone's price for every tick the instance
runs; the first R hours of each launch (R = `--overhead-min`, default the launcher's
restart overhead: 10 min provisioning + setup + half a 30-min checkpoint interval)
are paid without progress; when the trace drops to 0 the instance is preempted (its
overhead is lost), and the job relaunches at once, choosing again by the same rule
(waiting, unpaid, while no zone has capacity). A run ends when W hours of work are
done (runs the trace cannot finish are dropped for both rankings: the comparison is
paired).

Rankings:
- list:     the lowest current spot price; ties by zone name (the optimizer's stable
            key, so the list-price ranking the launcher had);
- list-rnd: the lowest current price, ties broken at random (seeded): list price
            without the alphabetical bias;
- expected: price x launcher.optimizer.expected_cost_factor(rate, R), the optimizer's
            own formula, with each zone's rate estimated as the live system would: the
            preemptions seen in that zone over the last `--window-h` hours (default 24)
            per hour the zone was up, with a weak prior ((k + 0.5) / (up_h + 1));
- expected-prefix: the same, rates fixed from the first `--prefix` (25%) of the trace.
Start times run over the trace after the prefix, for every ranking.

Prints, per trace set and job length: runs, mean realized cost per ranking, and the
difference of expected-cost ranking vs list-price ranking (negative = cheaper), and how
many paired runs each side won.
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
from launcher.optimizer import DEFAULT_RESTART_OVERHEAD_HOURS, expected_cost_factor  # noqa: E402

SETS = ("preemption/1-node/aws-04-19-2023", "preemption/1-node/aws-04-22-2023")
ENV = "LAUNCHER_SPOT_TRACES"


@dataclass
class Zone:
    name: str
    gap_h: float
    up: list[int]  # 1 = an instance runs at this tick
    price: list[float]
    # prefix sums: preemptions (1 -> 0 transitions) up to tick i, up ticks before tick i
    pre_cum: list[int]
    up_cum: list[int]


def load_zone(path: Path) -> Zone | None:
    d = json.loads(path.read_text())
    prices = d.get("prices")
    if not prices:
        return None
    up = [1 if x else 0 for x in d["data"]]
    pre = [0]
    upc = [0]
    for i, x in enumerate(up):
        pre.append(pre[-1] + (1 if i > 0 and up[i - 1] and not x else 0))
        upc.append(upc[-1] + x)
    return Zone(path.stem.split("_")[0], d["metadata"]["gap_seconds"] / 3600.0, up,
                [float(p) for p in prices], pre, upc)


def find_set(root: Path, rel: str) -> Path | None:
    for base in (root, root / "skypilot-spot-traces"):
        if (base / rel).is_dir():
            return base / rel
    return None


def rate_window(z: Zone, t: int, window_ticks: int) -> float:
    """Preemptions per up-hour in ticks (t - window, t], with a weak prior."""
    lo = max(0, t - window_ticks)
    k = z.pre_cum[t + 1] - z.pre_cum[lo + 1] if t > lo else 0
    up_h = (z.up_cum[t] - z.up_cum[lo]) * z.gap_h
    return (k + 0.5) / (up_h + 1.0)


def region_of(zone: str) -> str:
    return zone[:-1]  # us-east-1c -> us-east-1


# A chooser sees the zones with capacity, the tick, and the job's own preemptions so
# far (block rows, as the managed-jobs controller keeps them).
Chooser = Callable[[list[Zone], int, list[BlockSpec]], Zone]


def replay(zones: list[Zone], start: int, work_h: float, overhead_h: float,
           choose: Chooser) -> tuple[float, int] | None:
    """(cost, preemptions) of one run, or None if the trace ends first."""
    n = min(len(z.up) for z in zones)
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


def make_rules(rng: random.Random, gap: float, window: int, prefix_rates: dict[str, float],
               overhead_h: float) -> dict[str, Chooser]:
    """The rankings under test (module docstring), for one trace set."""

    def by_list(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        return min(avail, key=lambda z: (z.price[t], z.name))

    def by_list_rnd(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
        best = min(z.price[t] for z in avail)
        return rng.choice([z for z in avail if z.price[t] <= best + 1e-12])

    def expected_rule(rate_of: Callable[[Zone, int], float], live: bool) -> Chooser:
        """Expected cost with a zone's data rate from `rate_of`, plus (live) the
        rates the controller's recovery adds for the job's own recent preemptions."""

        def choose(avail: list[Zone], t: int, blocks: list[BlockSpec]) -> Zone:
            seen = observed_rates(blocks, t * gap * 3600.0, DEFAULT_COOLDOWN_S) if live else {}

            def key(z: Zone) -> tuple[float, float, str]:
                r = rate_of(z, t)
                for k in (("aws", region_of(z.name), z.name), ("aws", region_of(z.name), None)):
                    if k in seen:
                        r += seen[k].per_hour
                return (z.price[t] * expected_cost_factor(r, overhead_h), r, z.name)

            return min(avail, key=key)

        return choose

    def rolling(z: Zone, t: int) -> float:
        return rate_window(z, t, window)

    def fixed(z: Zone, t: int) -> float:
        return prefix_rates[z.name]

    def in_tiers(rule: Chooser) -> Chooser:
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

    return {
        "list": by_list, "list-rnd": by_list_rnd,
        "expected": expected_rule(rolling, live=True),
        "expected-prefix": expected_rule(fixed, live=False),
        "rates-only": expected_rule(rolling, live=False),
        "tiers+list": in_tiers(by_list),
        "tiers+expected": in_tiers(expected_rule(rolling, live=True)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=None, help=f"trace root (default ${ENV}, else ../shared/spot-traces)")
    ap.add_argument("--hours", default="2,6,12,24", help="job lengths (hours of work)")
    ap.add_argument("--overhead-min", type=float, default=DEFAULT_RESTART_OVERHEAD_HOURS * 60)
    ap.add_argument("--every-h", type=float, default=1.0, help="start-time spacing (hours)")
    ap.add_argument("--window-h", type=float, default=24.0, help="rolling rate window (hours)")
    ap.add_argument("--prefix", type=float, default=0.25, help="share of the trace for the prefix rates")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)
    root = Path(args.traces or os.environ.get(ENV) or REPO.parent / "shared" / "spot-traces")
    if not root.is_dir():
        print(f"spot traces not found at {root} (set --traces or ${ENV}); nothing to measure.")
        return 0
    overhead_h = args.overhead_min / 60.0
    lengths = [float(x) for x in args.hours.split(",")]
    print(f"traces: {root}   restart overhead R = {args.overhead_min:.0f} min   "
          f"rolling window = {args.window_h:g} h   prefix = {args.prefix:.0%}")
    found = False
    totals: dict[str, list[float]] = {}
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
        if len(zones) < 2:
            continue
        found = True
        gap = zones[0].gap_h
        n = min(len(z.up) for z in zones)
        prefix_end = int(n * args.prefix)
        window = int(args.window_h / gap)
        prefix_rates = {z.name: (z.pre_cum[prefix_end] + 0.5) / (z.up_cum[prefix_end] * gap + 1.0)
                        for z in zones}
        rng = random.Random(args.seed)
        rules = make_rules(rng, gap, window, prefix_rates, overhead_h)
        span_h = n * gap
        print()
        print(f"{rel}: zones {', '.join(z.name for z in zones)}; {span_h:.0f} h, tick {gap * 3600:.0f} s")
        print("  zone          mean $/h  up%   preempt/up-h (whole trace)  prefix rate")
        for z in zones:
            up_h = z.up_cum[n] * gap
            print(f"  {z.name:12s}  {statistics.fmean(z.price[:n]):8.3f}  {100 * z.up_cum[n] / n:4.0f}"
                  f"  {z.pre_cum[n] / max(up_h, 1e-9):8.3f}                    {prefix_rates[z.name]:.3f}")
        print(f"  {'W(h)':>5} {'runs':>5} " + " ".join(f"{k:>16}" for k in rules)
              + f" {'exp vs list':>12} {'exp vs rnd':>11} {'won/lost':>9} {'tiers e/l':>10}")
        step = max(1, int(args.every_h / gap))
        for w in lengths:
            results: dict[str, list[float]] = {k: [] for k in rules}
            pre: dict[str, list[int]] = {k: [] for k in rules}
            for start in range(prefix_end, n, step):
                runs = {k: replay(zones, start, w, overhead_h, fn) for k, fn in rules.items()}
                if any(r is None for r in runs.values()):
                    continue
                for k, r in runs.items():
                    assert r is not None
                    results[k].append(r[0])
                    pre[k].append(r[1])
            m = len(results["list"])
            if m == 0:
                print(f"  {w:5g} {0:5d}  (no run fits in the trace)")
                continue
            means = {k: statistics.fmean(v) for k, v in results.items()}
            for k, v in results.items():
                totals.setdefault(k, []).extend(v)
            won = sum(e < li - 1e-9 for e, li in zip(results["expected"], results["list"], strict=True))
            lost = sum(e > li + 1e-9 for e, li in zip(results["expected"], results["list"], strict=True))
            tiers_d = 100 * (means["tiers+expected"] / means["tiers+list"] - 1)
            cells = " ".join(
                f"{'$' + format(means[k], '.2f'):>9} ({statistics.fmean(pre[k]):4.1f}p)" for k in rules)
            print(f"  {w:5g} {m:5d} {cells} {100 * (means['expected'] / means['list'] - 1):+11.1f}%"
                  f" {100 * (means['expected'] / means['list-rnd'] - 1):+10.1f}% {won:4d}/{lost:<4d}"
                  f" {tiers_d:+9.1f}%")
    if not found:
        print("no trace set with prices found; nothing to measure.")
        return 0
    print()
    allm = {k: statistics.fmean(v) for k, v in totals.items() if v}
    print("all runs: " + ", ".join(f"{k} ${v:.2f}" for k, v in allm.items())
          + f"; expected vs list {100 * (allm['expected'] / allm['list'] - 1):+.1f}%, "
          f"vs list-rnd {100 * (allm['expected'] / allm['list-rnd'] - 1):+.1f}%, "
          f"prefix-rates vs list {100 * (allm['expected-prefix'] / allm['list'] - 1):+.1f}%, "
          f"tiers+expected vs tiers+list {100 * (allm['tiers+expected'] / allm['tiers+list'] - 1):+.1f}%")
    print("(cells: mean realized cost per run, mean preemptions per run in parentheses)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
