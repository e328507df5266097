"""Exhaustive fault/kill sweeps: a representative subset by default, all with
LAUNCHER_FULL_SWEEPS=1 (see tests/README.md).

A sweep kills (or fails) a launch at every API call x every phase. By default it runs
a deterministic subset that still covers every distinct call kind and every phase
(`first_of_each`); `LAUNCHER_FULL_SWEEPS=1` runs every point. A sweep is also split
into `PARTS` tests (`part_of`) so that pytest-xdist runs its parts on several workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")

PARTS = 3  # each sweep test is parametrized over range(PARTS)


def full_sweeps() -> bool:
    """True when LAUNCHER_FULL_SWEEPS is set to anything but "" or "0"."""
    return os.environ.get("LAUNCHER_FULL_SWEEPS", "") not in ("", "0")


def first_of_each(items: Sequence[T], kind: Callable[[T], Hashable]) -> list[T]:
    """The items whose kind is seen for the first time (all of them in a full sweep),
    in their order."""
    if full_sweeps():
        return list(items)
    seen: set[Hashable] = set()
    out = []
    for item in items:
        k = kind(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def part_of(items: Sequence[T], part: int, parts: int = PARTS) -> list[T]:
    """Part `part` (0-based) of `parts` of the items, round robin (deterministic)."""
    return list(items[part::parts])
