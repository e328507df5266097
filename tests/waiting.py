"""Polling waits for tests that watch another process (a controller, a cloud fake)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition",
               poll: float = 0.05) -> None:
    """Return once `cond()` is truthy; AssertionError naming `what` after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")
