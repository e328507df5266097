"""Helpers for the spot tests: hand-made traces (never the public trace files)."""

from __future__ import annotations

from launcher.spot.traces import SpotTrace

H = 3600.0


def trace(bits: str | list[int], gap_s: float = H, zone: str = "z", prices: list[float] | None = None) -> SpotTrace:
    """A trace from "1101..." (1 = available) or a list of instance counts."""
    avail = tuple(int(c) for c in bits) if isinstance(bits, str) else tuple(bits)
    return SpotTrace(zone, gap_s, avail, tuple(prices) if prices is not None else None, zone)
