"""Write the synthetic spot traces of this directory (deterministic: same bytes every run).

    python3 task_examples/spot-traces/make_traces.py [OUT_DIR]

Each zone's availability is a two-state process in 10-minute ticks over 7 days: spot
capacity stays up for a run whose length is drawn from an exponential distribution
(mean MEAN_UP_H), then stays gone for one with mean MEAN_DOWN_H, and so on, with a
random generator seeded per zone (SEED + zone index). The numbers are made up, chosen
to look like busy GPU zones (capacity there 55-80% of the time, gone for an hour or two
a few times a day); they are not measurements. Real traces: see docs/spot.md.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 16
GAP_S = 600  # one tick = 10 minutes
DAYS = 7
# (zone ID as the catalog names it, mean hours up, mean hours down)
ZONES = (("use2-az1", 6.0, 1.5), ("use2-az2", 4.0, 2.0))
META = {"cloud": "aws", "region": "us-east-2", "instance_type": "p5.48xlarge",
        "accelerator": "H100:8", "nodes": 1}


def availability(rng: random.Random, mean_up_h: float, mean_down_h: float) -> list[int]:
    """1 (a spot node can be had) or 0 per tick, alternating exponential runs (>= 1 tick)."""
    ticks = DAYS * 24 * 3600 // GAP_S
    out: list[int] = []
    up = True
    while len(out) < ticks:
        mean_ticks = (mean_up_h if up else mean_down_h) * 3600 / GAP_S
        out += [1 if up else 0] * max(1, round(rng.expovariate(1 / mean_ticks)))
        up = not up
    return out[:ticks]


def main(out_dir: Path) -> None:
    for i, (zone, mean_up, mean_down) in enumerate(ZONES):
        rng = random.Random(SEED + i)
        doc = {
            "metadata": {"gap_seconds": GAP_S, **META, "zone": zone,
                         "synthetic": f"make_traces.py: seed {SEED + i}, exponential runs, "
                                      f"mean {mean_up:g} h up / {mean_down:g} h down"},
            "data": availability(rng, mean_up, mean_down),
        }
        path = out_dir / f"{zone}_h100_8.json"  # {zone}_{device}_{count}, as public traces
        path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"{path}: {sum(doc['data'])}/{len(doc['data'])} ticks available")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
