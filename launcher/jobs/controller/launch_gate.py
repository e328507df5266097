"""How many launches provision at once, and which clouds are backing off.

Launches run in parallel up to `ControllerConfig.max_parallel_launches` (the config's
`jobs.controller.max_parallel_launches`); more wait for a slot, in the order they came,
except that relaunches of jobs that were running (a recovery, a restart) go before first
launches: a preempted job does not queue behind a burst of new submissions.
A cloud that answered a launch "rate limited" (RateLimitedOpsError) is backed off: launches
meant for it wait `rate_limit_backoff_s`, doubling while it keeps refusing (up to
`rate_limit_backoff_max_s`; the cloud's own hint when that is longer), and the doubling
starts over after a launch there succeeds. Other clouds are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Iterable

from launcher.jobs.controller.settings import ControllerConfig


class LaunchGate:
    """Launch slots and per-cloud back-off (see the module docstring). `in_flight` and
    `peak` count launches holding a slot now / at most so far."""

    def __init__(self, cfg: ControllerConfig, clock: object = time.monotonic) -> None:
        self.cfg = cfg
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._free = max(1, cfg.max_parallel_launches)
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []  # (rank, seq, fut)
        self._seq = itertools.count()
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
    async def slot(self, *, urgent: bool = False) -> AsyncIterator[None]:
        """Hold one of the `max_parallel_launches` slots while provisioning; `urgent`
        (a relaunch) is served before every waiting launch that is not."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new loop (tests run one per step): start afresh
            self._loop = loop
            self._free = max(1, self.cfg.max_parallel_launches)
            self._waiting.clear()
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            fut: asyncio.Future[None] = loop.create_future()
            heapq.heappush(self._waiting, (0 if urgent else 1, next(self._seq), fut))
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._release()  # handed a slot just as it was cancelled: pass it on
                raise
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            self._release()

    def _release(self) -> None:
        """Hand the freed slot to the first waiter still waiting, else keep it free."""
        while self._waiting:
            _, _, fut = heapq.heappop(self._waiting)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1
