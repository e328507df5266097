"""A hand-driven DeadlineClock for tests of the DEADLINE strategy (no real-time waits in the
decisions: the test moves time tick by tick and waits until the controller has acted)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable


class ManualClock:
    """Time moves only in `advance_to`; an action given there (a preemption, a capacity
    change) happens atomically with the move: the controller reads the new time only once
    the action is done. `settled` records the last tick each job has acted on."""

    def __init__(self, start: float) -> None:
        self._t = start
        self._lock = threading.RLock()
        self._cond = threading.Condition()
        self._settled: dict[int, int] = {}

    def now(self) -> float:
        with self._lock:
            return self._t

    async def sleep_until(self, t: float, wake: asyncio.Event) -> None:
        while self.now() < t and not wake.is_set():
            await asyncio.sleep(0.005)

    def settled(self, job_id: int, tick: int) -> None:
        with self._cond:
            self._settled[job_id] = max(self._settled.get(job_id, -1), tick)
            self._cond.notify_all()

    def advance_to(self, t: float, action: Callable[[], None] | None = None) -> None:
        with self._lock:
            if action is not None:
                action()
            self._t = t

    def wait_settled(self, job_id: int, tick: int, timeout: float = 10.0,
                     done: Callable[[], bool] | None = None) -> None:
        end = time.monotonic() + timeout
        with self._cond:
            while self._settled.get(job_id, -1) < tick:
                if done is not None and done():
                    return
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"job {job_id} did not settle tick {tick} "
                                         f"(last {self._settled.get(job_id)})")
                self._cond.wait(min(left, 0.05))
