"""How many launches provision at once, and which clouds are backing off.

Launches run in parallel up to `ControllerConfig.max_parallel_launches` (the config's
`jobs.controller.max_parallel_launches`); more wait for a slot, in the order they came.
A cloud that answered a launch "rate limited" (RateLimitedOpsError) is backed off: launches
meant for it wait `rate_limit_backoff_s`, doubling while it keeps refusing (up to
`rate_limit_backoff_max_s`; the cloud's own hint when that is longer), and the doubling
starts over after a launch there succeeds. Other clouds are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable

from launcher.jobs.controller.settings import ControllerConfig


class LaunchGate:
    """Launch slots and per-cloud back-off (see the module docstring). `in_flight` and
    `peak` count launches holding a slot now / at most so far."""

    def __init__(self, cfg: ControllerConfig, clock: object = time.monotonic) -> None:
        self.cfg = cfg
        self._clock = clock
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._until: dict[str, float] = {}
        self._streak: dict[str, int] = {}
        self.in_flight = 0
        self.peak = 0

    def _now(self) -> float:
        return float(self._clock())  # type: ignore[operator]

    # ---- back-off per cloud --------------------------------------------------------------

    def throttled(self, cloud: str, retry_after_s: float | None = None) -> float:
        """`cloud` refused a launch for too many requests: back it off; return for how
        long (seconds from now)."""
        n = self._streak.get(cloud, 0) + 1
        self._streak[cloud] = n
        cfg = self.cfg
        wait = min(cfg.rate_limit_backoff_max_s, cfg.rate_limit_backoff_s * 2 ** (n - 1))
        wait = max(wait, retry_after_s or 0.0)
        self._until[cloud] = max(self._until.get(cloud, 0.0), self._now() + wait)
        return wait

    def succeeded(self, cloud: str) -> None:
        """A launch on `cloud` went through: its next refusal backs off from the start."""
        self._streak.pop(cloud, None)

    def wait_s(self, clouds: Iterable[str | None]) -> float:
        """How long until none of `clouds` is backing off (0: none is)."""
        now = self._now()
        return max([0.0, *(self._until.get(c, 0.0) - now for c in clouds if c)])

    # ---- slots ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the `max_parallel_launches` slots while provisioning."""
        loop = asyncio.get_running_loop()
        if self._sem is None or self._loop is not loop:
            self._loop = loop
            self._sem = asyncio.Semaphore(max(1, self.cfg.max_parallel_launches))
        async with self._sem:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                yield
            finally:
                self.in_flight -= 1
