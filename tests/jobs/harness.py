"""Run a Controller in a background thread against a FakeOps, for unit tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from launcher.jobs.controller import Controller, ControllerConfig
from launcher.jobs.crash import CrashPoints, SimulatedCrash
from launcher.jobs.store import JobRow, JobStore


def fast_config(**kw: Any) -> ControllerConfig:
    base: dict[str, Any] = dict(
        poll_min_s=0.02, poll_max_s=0.05, scan_s=0.02, cloud_poll_s=0.02, idle_exit_s=None,
        failure_confirm_s=0.05, backoff_min_s=0.02, backoff_max_s=0.05, max_drain_s=2.0,
        launch_workers=4, watch_workers=4, log_fetch_backoff_s=0.01, log_sync_s=0.05,
    )
    base.update(kw)
    return ControllerConfig(**base)


@dataclass
class FakeTask:
    num_nodes: int = 1
    name: str = "t"


def loader_for(num_nodes: int = 1) -> Callable[[JobRow], Any]:
    return lambda job: SimpleNamespace(num_nodes=num_nodes, name=job.name)


class Running:
    """A controller on its own thread + loop. stop() ends it; crashed tells if it died."""

    def __init__(self, ops: Any, *, crash_at: str | None = None, num_nodes: int = 1,
                 **cfg: Any) -> None:
        def die() -> None:
            raise SimulatedCrash()

        self.ctrl = Controller(ops, loader_for(num_nodes), config=fast_config(**cfg),
                               crash=CrashPoints(crash_at or "", die))
        self.crashed = False
        self.error: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.ctrl.run(self._stop))
        except SimulatedCrash:
            self.crashed = True
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            self._loop.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "controller did not stop"
        if self.error is not None:
            raise self.error

    def wait_dead(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive()


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def submit(store: JobStore, *, name: str = "job", strategy: str = "EAGER_NEXT_REGION",
           max_restarts: int = 0, codes: tuple[int, ...] = ()) -> JobRow:
    return store.add_job(name=name, task_yaml="run: true\n", task_source=None, strategy=strategy,
                         max_restarts_on_errors=max_restarts, recover_on_exit_codes=codes)
