"""The offline optimum: the cheapest schedule that meets the deadline, knowing the whole trace.

A yardstick for the online policies (benchmarks/spot_policies.py, tests/spot), not product
code: it needs numpy, which only the `[test]` extra installs. Import it as
`benchmarks.spot_optimum` with the repository root on sys.path (as pytest run from the root has).

Dynamic programming over ticks under exactly the simulator's model (launcher/spot/simulate.py):
state = (current gang: idle / on-demand / spot in zone z / on-demand with a spot launch pending in
zone z, the restart overhead left, in ticks), value = minimal cost to finish from (tick, progress).
Spot gangs are preempted when their zone goes down; a new spot gang may start in any available
zone (the optimum picks; the simulator takes the cheapest); ON_DEMAND -> SPOT keeps the on-demand
gang running until the spot gang is up, paying both.

Discretisation: progress and the restart overhead are counted in whole ticks. The result is exact
(the simulator reproduces its cost for the same schedule) when the work and the restart overhead
are multiples of the tick length; otherwise both are rounded up to whole ticks and the deadline
down, which makes the optimum slightly pessimistic. The benchmark uses whole ticks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from launcher.spot.simulate import Prices
from launcher.spot.traces import SpotTrace, align


@dataclass(frozen=True, slots=True)
class OptimumResult:
    cost: float  # math.inf when no schedule meets the deadline
    feasible: bool
    work_ticks: int
    overhead_ticks: int
    deadline_ticks: int


@dataclass(frozen=True, slots=True)
class _Option:
    src: int
    dst: int
    od: float  # on-demand gangs paid this tick (0 or 1)
    spot_zone: int  # spot gang paid this tick in this zone (-1: none)
    dp: int  # progress made this tick (0 or 1)


class _States:
    """Numbering of the DP states for `zones` zones and `k` overhead ticks."""

    def __init__(self, zones: int, k: int) -> None:
        self.k = k
        self.zones = zones
        kk = max(k, 1)  # overhead left after a tick is in [0, k-1]
        self.idle = 0
        self.od = [1 + o for o in range(kk)]
        base = 1 + kk
        self.spot = [[base + z * kk + o for o in range(kk)] for z in range(zones)]
        base += zones * kk
        self.pend: dict[tuple[int, int, int], int] = {}
        for o in range(kk):
            for z in range(zones):
                for p in range(1, max(k, 1)):
                    self.pend[(o, z, p)] = base
                    base += 1
        self.count = base

    def fresh(self) -> tuple[int, int]:
        """(overhead left after the first tick, progress in the first tick) of a new gang."""
        return (self.k - 1, 0) if self.k > 0 else (0, 1)


def _options(st: _States, up: tuple[bool, ...]) -> list[_Option]:
    opts: list[_Option] = []
    o_new, dp_new = st.fresh()

    def from_idle(src: int) -> None:
        opts.append(_Option(src, st.idle, 0, -1, 0))
        opts.append(_Option(src, st.od[o_new], 1, -1, dp_new))
        for z in range(st.zones):
            if up[z]:
                opts.append(_Option(src, st.spot[z][o_new], 0, z, dp_new))

    def from_od(src: int, o: int) -> None:
        opts.append(_Option(src, st.idle, 0, -1, 0))
        dp_od = 1 if o == 0 else 0
        o_next = max(o - 1, 0)
        opts.append(_Option(src, st.od[o_next], 1, -1, dp_od))
        for z in range(st.zones):
            if not up[z]:
                continue
            if st.k == 0:
                opts.append(_Option(src, st.spot[z][0], 0, z, 1))
            elif st.k == 1:
                opts.append(_Option(src, st.spot[z][0], 1, z, dp_od))
            else:
                opts.append(_Option(src, st.pend[(o_next, z, st.k - 1)], 1, z, dp_od))

    def from_spot(src: int, z: int, o: int) -> None:
        opts.append(_Option(src, st.idle, 0, -1, 0))
        opts.append(_Option(src, st.spot[z][max(o - 1, 0)], 0, z, 1 if o == 0 else 0))
        opts.append(_Option(src, st.od[o_new], 1, -1, dp_new))

    def from_pend(src: int, o: int, z: int, p: int) -> None:
        from_od_keep = len(opts)
        from_od(src, o)
        # drop from_od's new spot launches: a launch is already pending
        del opts[from_od_keep + 2 :]
        dp_od = 1 if o == 0 else 0
        o_next = max(o - 1, 0)
        if p - 1 == 0:
            opts.append(_Option(src, st.spot[z][0], 1, z, dp_od))
        else:
            opts.append(_Option(src, st.pend[(o_next, z, p - 1)], 1, z, dp_od))

    kk = max(st.k, 1)
    from_idle(st.idle)
    for o in range(kk):
        from_od(st.od[o], o)
    for z in range(st.zones):
        for o in range(kk):
            if up[z]:
                from_spot(st.spot[z][o], z, o)
            else:
                from_idle(st.spot[z][o])  # preempted: idle at once
    for (o, z, p), s in st.pend.items():
        if up[z]:
            from_pend(s, o, z, p)
        else:
            from_od(s, o)  # launch lost: the on-demand gang continues
    opts.sort(key=lambda op: op.src)
    return opts


def optimum(
    traces: Sequence[SpotTrace],
    *,
    work_s: float,
    deadline_s: float,
    restart_overhead_s: float,
    prices: Prices,
    n_nodes: int = 1,
    start_tick: int = 0,
) -> OptimumResult:
    """Minimal cost to do `work_s` by `deadline_s` from `start_tick` with perfect knowledge."""

    zones = align(traces)
    g = zones[0].gap_s
    length = zones[0].n_ticks
    w = max(1, math.ceil(work_s / g - 1e-9))
    k = max(0, math.ceil(restart_overhead_s / g - 1e-9))
    horizon = math.floor(deadline_s / g + 1e-9)
    st = _States(len(zones), k)
    od_tick = prices.on_demand_h * n_nodes * g / 3600.0
    cache: dict[tuple[bool, ...], tuple[np.ndarray, ...]] = {}

    v = np.full((st.count, w + 1), np.inf)
    v[:, w] = 0.0
    for i in range(horizon - 1, -1, -1):
        tick = (start_tick + i) % length
        up = tuple(z.available(tick, n_nodes) for z in zones)
        arrays = cache.get(up)
        if arrays is None:
            opts = _options(st, up)
            src = np.array([op.src for op in opts])
            starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
            arrays = (
                np.array([op.dst for op in opts]),
                np.array([op.od for op in opts], dtype=float),
                np.array([op.spot_zone for op in opts]),
                np.array([op.dp for op in opts], dtype=bool),
                starts,
            )
            cache[up] = arrays
        dst, od, spot_zone, dp, starts = arrays
        spot_tick = np.array(
            [
                (z.prices[tick] if z.prices is not None else prices.spot_h) * n_nodes * g / 3600.0
                for z in zones
            ]
            + [0.0]
        )
        cost = od * od_tick + spot_tick[spot_zone]  # spot_zone -1 picks the trailing 0.0
        # only progress values reachable by tick i (p <= i) from which the deadline can still
        # be met (p >= w - (horizon - i)) matter: compute that window, the rest stays inf
        lo, hi = max(0, w - (horizon - i)), min(w, i)
        cur = v[:, lo : hi + 2]
        stay = cur[:, : hi + 1 - lo]
        step = cur[:, 1 : hi + 2 - lo]
        if step.shape[1] < stay.shape[1]:  # hi == w: progress beyond the work stays done
            step = np.concatenate([step, np.zeros((st.count, 1))], axis=1)
        cand = np.where(dp[:, None], step[dst], stay[dst]) + cost[:, None]
        new = np.full_like(v, np.inf)
        new[:, lo : hi + 1] = np.minimum.reduceat(cand, starts, axis=0)
        new[:, w] = 0.0
        v = new
    best = float(v[st.idle, 0]) if horizon > 0 else math.inf
    return OptimumResult(
        cost=best,
        feasible=math.isfinite(best),
        work_ticks=w,
        overhead_ticks=k,
        deadline_ticks=horizon,
    )
