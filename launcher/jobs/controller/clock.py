"""The DEADLINE strategy's clock: real time in production, a hand-driven one in tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol


class DeadlineClock(Protocol):
    """The deadline strategy's notion of time (injectable: tests drive it by hand)."""

    def now(self) -> float: ...

    async def sleep_until(self, t: float, wake: asyncio.Event) -> None:
        """Return at `t` (clock time) or as soon as `wake` is set."""

    def settled(self, job_id: int, tick: int) -> None:
        """The controller has acted on tick `tick` of job `job_id` (a hook; no-op here)."""


class WallClock:
    """Real time."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, t: float, wake: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=max(0.0, t - time.time()))

    def settled(self, job_id: int, tick: int) -> None:
        return None


WALL = WallClock()
