"""Spot availability traces: the JSON format of the SkyPilot "Can't Be Late" traces.

    {"metadata": {"gap_seconds": 300}, "data": [0, 1, 1, ...], "prices": [0.918, ...]}

`data[i]` is the number of spot instances available at tick i (0/1 for 1-node traces, 0..N for
N-node ones); a gang of n nodes is available at a tick only when `data[i] >= n`. `prices`
(optional, same length) is the spot price in $/h per tick. The zone is `metadata.zone`, else
the file name's part before the first "_" (`us-east-1a_v100_1.json` -> `us-east-1a`); the
other optional metadata (cloud, region, instance type, ...) is the trace's origin
(launcher.spot.trace_origin).

Several files (several zones) must share one tick length: `load_traces` refuses files with
different `gap_seconds` (naming them) rather than resampling, so a simulation never silently
changes what a trace says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.spot.trace_origin import OriginError, TraceOrigin, origin_from


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class SpotTrace:
    """One zone's spot availability: `availability[i]` instances available during tick i."""

    zone: str
    gap_s: float
    availability: tuple[int, ...]
    prices: tuple[float, ...] | None = None
    source: str = ""
    origin: TraceOrigin | None = None  # where and on what it was recorded, as far as known

    def __post_init__(self) -> None:
        if not self.gap_s > 0:
            raise TraceError(f"{self.source or self.zone}: gap_seconds must be > 0, got {self.gap_s}")
        if self.prices is not None and len(self.prices) != len(self.availability):
            raise TraceError(
                f"{self.source or self.zone}: 'prices' has {len(self.prices)} entries but "
                f"'data' has {len(self.availability)}; they must be the same length"
            )

    @property
    def n_ticks(self) -> int:
        return len(self.availability)

    @property
    def max_nodes(self) -> int:
        return max(self.availability, default=0)

    def available(self, tick: int, n_nodes: int = 1) -> bool:
        """A gang of `n_nodes` can run during `tick` (all its nodes are available)."""
        return self.availability[tick] >= n_nodes

    def window(self, start: int, n_ticks: int) -> SpotTrace:
        """Ticks [start, start + n_ticks) as a trace of their own (clipped at the end)."""
        end = min(self.n_ticks, start + n_ticks)
        prices = self.prices[start:end] if self.prices is not None else None
        return SpotTrace(self.zone, self.gap_s, self.availability[start:end], prices, self.source,
                         self.origin)

    def coarsen(self, factor: int) -> SpotTrace:
        """Merge every `factor` ticks into one: a merged tick counts the instances available
        during all of its ticks (the minimum), its price is their mean; a trailing partial
        group is dropped. Used to replay fine traces at a coarser decision tick."""
        if factor < 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        if factor == 1:
            return self
        n = self.n_ticks // factor
        if n == 0:
            raise TraceError(f"{self.source or self.zone}: shorter than {factor} ticks")
        avail = tuple(min(self.availability[i * factor : (i + 1) * factor]) for i in range(n))
        prices = None
        if self.prices is not None:
            prices = tuple(sum(self.prices[i * factor : (i + 1) * factor]) / factor for i in range(n))
        return SpotTrace(self.zone, self.gap_s * factor, avail, prices, self.source, self.origin)


def _zone_from_name(path: Path) -> str:
    return path.stem.split("_", 1)[0] or path.stem


def parse_trace(text: str, source: str, zone: str | None = None,
                path: Path | None = None) -> SpotTrace:
    """Parse one trace's JSON text; `source` names it in errors. The zone: `zone`, else
    the metadata's, else `source`. `path` (the file) completes the origin from the
    SkyPilot traces' file naming (launcher.spot.trace_origin)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"{source}: not a JSON file ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise TraceError(f"{source}: expected a JSON object with 'metadata' and 'data'")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or "gap_seconds" not in meta:
        raise TraceError(f"{source}: missing 'metadata.gap_seconds' (the tick length in seconds)")
    gap = meta["gap_seconds"]
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not math.isfinite(gap) or gap <= 0:
        raise TraceError(f"{source}: 'metadata.gap_seconds' must be a number > 0, got {gap!r}")
    data = doc.get("data")
    if not isinstance(data, list) or not data:
        raise TraceError(f"{source}: missing or empty 'data' (the per-tick availability list)")
    avail: list[int] = []
    for i, v in enumerate(data):
        if isinstance(v, bool):
            v = int(v)
        if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise TraceError(f"{source}: 'data[{i}]' must be a count >= 0, got {v!r}")
        avail.append(int(v))
    prices: tuple[float, ...] | None = None
    raw_prices = doc.get("prices")
    if raw_prices is not None:
        if not isinstance(raw_prices, list):
            raise TraceError(f"{source}: 'prices' must be a list of $/h values")
        if len(raw_prices) != len(avail):
            raise TraceError(
                f"{source}: 'prices' has {len(raw_prices)} entries but 'data' has {len(avail)}; "
                "they must be the same length"
            )
        plist: list[float] = []
        for i, p in enumerate(raw_prices):
            if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p) or p < 0:
                raise TraceError(f"{source}: 'prices[{i}]' must be a price >= 0, got {p!r}")
            plist.append(float(p))
        prices = tuple(plist)
    try:
        origin = origin_from(meta, source, path)
    except OriginError as e:
        raise TraceError(str(e)) from None
    return SpotTrace(
        zone=zone or origin.zone or (_zone_from_name(path) if path is not None else None) or source,
        gap_s=float(gap),
        availability=tuple(avail),
        prices=prices,
        source=source,
        origin=origin,
    )


def load_trace(path: str | Path) -> SpotTrace:
    """Load one trace file. Raises TraceError naming the file (missing, unreadable, bad)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise TraceError(f"{p}: trace file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: cannot read the trace file ({e})") from None
    return parse_trace(text, str(p), path=p)


def load_traces(paths: Sequence[str | Path]) -> tuple[SpotTrace, ...]:
    """Load several zones' traces; they must share one tick length (refused otherwise, naming
    the files), and are cut to the shortest one's length."""
    if not paths:
        raise TraceError("no trace file given")
    traces = tuple(load_trace(p) for p in paths)
    return align(traces)


def align(traces: Sequence[SpotTrace]) -> tuple[SpotTrace, ...]:
    """Check that the traces share a tick length and cut them to the shortest."""
    gaps = {t.gap_s for t in traces}
    if len(gaps) > 1:
        listing = ", ".join(f"{t.source or t.zone} ({t.gap_s:g} s)" for t in traces)
        raise TraceError(
            f"trace files have different tick lengths (gap_seconds): {listing}; "
            "give files from one collection (same gap_seconds)"
        )
    n = min(t.n_ticks for t in traces)
    return tuple(t.window(0, n) if t.n_ticks != n else t for t in traces)
