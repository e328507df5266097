"""The cloud's view of every running attempt, read in batches: one `ClusterOps.cloud_views`
call per (cloud, region) per tick for all the clusters watched there, however many jobs
there are (a controller with 2,000 jobs on one cloud and region makes one query a tick,
not 2,000).

Each tick also reads the clusters' interruption notices (cheap: files on this machine for
the local cloud, nothing elsewhere). A tick that finds a node lost, or a notice, wakes
that attempt's watch at once (`Watched.changed`), so detecting a preemption takes at most
one tick (`ControllerConfig.cloud_poll_s`) at any scale; the watches never sleep-poll the
cloud themselves. One ticker runs per event loop, only while something is watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.clouds.base import NodeState
from launcher.jobs.controller.settings import ControllerConfig
from launcher.jobs.ops_interface import ClusterOps, Notice, TransientOpsError, lost_nodes

log = logging.getLogger("launcher.jobs.controller")

GroupKey = tuple[str | None, str | None]  # (cloud, region)


@dataclass
class Watched:
    """One watched attempt's cluster: where it runs, the nodes it should have, and what the
    last tick saw. `changed` is set when a tick saw a lost node or a notice."""

    cluster: str
    cloud: str | None
    region: str | None
    node_ids: tuple[str, ...]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    view: Mapping[str, NodeState] | None = None
    error: str | None = None  # the last tick's query failed (the view is then None)
    notices: list[Notice] = field(default_factory=list)
    tick: int = 0  # the tick that wrote `view` / `error`
    refs: int = 0

    @property
    def key(self) -> GroupKey:
        return (self.cloud, self.region)


class CloudPoller:
    """Batched cloud views and notices for the watched clusters (see the module docstring).

    `call` runs a blocking function in the status workers (`Context.watch_call`); `ops`
    is the controller's ClusterOps. `queries` counts `cloud_views` calls (one per group
    per tick), `ticks` the ticks done."""

    def __init__(self, ops: ClusterOps, cfg: ControllerConfig,
                 call: Callable[..., Awaitable[Any]]) -> None:
        self.ops = ops
        self.cfg = cfg
        self._call = call
        self._watched: dict[str, Watched] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()  # something is watched (the ticker sleeps without)
        self._tick_done = asyncio.Event()  # replaced by a new one at each tick's end
        self._ticking = False  # a tick is reading now (its views may predate a caller)
        self._one_at_a_time = asyncio.Lock()
        self.ticks = 0
        self.queries = 0

    # ---- the watches' side --------------------------------------------------------------

    def watch(self, cluster: str, cloud: str | None, region: str | None,
              node_ids: tuple[str, ...]) -> Watched:
        """Start (or share) watching `cluster`; pair with `unwatch`."""
        self._ensure_ticker()
        w = self._watched.get(cluster)
        if w is None or w.node_ids != node_ids or w.key != (cloud, region):
            w = Watched(cluster, cloud, region, tuple(node_ids), refs=w.refs if w else 0)
            self._watched[cluster] = w
        w.refs += 1
        self._wake.set()
        return w

    def unwatch(self, w: Watched) -> None:
        w.refs -= 1
        if w.refs <= 0 and self._watched.get(w.cluster) is w:
            del self._watched[w.cluster]

    @property
    def watched(self) -> int:
        return len(self._watched)

    async def fresh(self, w: Watched) -> Mapping[str, NodeState]:
        """The view of `w`'s cluster from a tick that started after this call (waits for
        it: at most about two ticks). Raises TransientOpsError when that tick's query
        failed."""
        self._ensure_ticker()
        after = self.ticks + (1 if self._ticking else 0)  # one reading now may predate us
        while w.tick <= after and self._watched.get(w.cluster) is w:
            await self._tick_done.wait()
        if w.error is not None:
            raise TransientOpsError(w.error)
        return w.view or {}

    # ---- the ticker ----------------------------------------------------------------------

    def _ensure_ticker(self) -> None:
        """Run the ticker in the running loop (a new loop - tests run one per step -
        starts afresh: what the old one watched died with it)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._watched.clear()
            self._wake = asyncio.Event()
            self._tick_done = asyncio.Event()
            self._ticking = False
            self._ticker = None
            self._one_at_a_time = asyncio.Lock()
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            if not self._watched:
                self._wake.clear()
                await self._wake.wait()
            started = time.monotonic()
            await self.tick()
            left = self.cfg.cloud_poll_s - (time.monotonic() - started)
            if left > 0:
                await asyncio.sleep(left)

    async def tick(self) -> None:
        """One tick: one `cloud_views` call per (cloud, region), all groups at once, then
        the notices; wake the watches whose cluster lost a node or got a notice."""
        async with self._one_at_a_time:
            await self._tick()

    async def _tick(self) -> None:
        groups: dict[GroupKey, list[Watched]] = {}
        for w in list(self._watched.values()):
            groups.setdefault(w.key, []).append(w)
        tick = self.ticks + 1
        self._ticking = True
        try:
            await asyncio.gather(*(self._poll_group(key, ws, tick)
                                   for key, ws in groups.items()))
        finally:
            self._ticking = False
        self.ticks = tick
        done, self._tick_done = self._tick_done, asyncio.Event()
        done.set()

    async def _poll_group(self, key: GroupKey, ws: list[Watched], tick: int) -> None:
        cloud, region = key
        names = [w.cluster for w in ws]
        self.queries += 1
        try:
            views, notices = await self._call(self._read, cloud, region, names)
            error = None
        except Exception as exc:  # the cloud could not be asked: no loss, ask next tick
            log.info("cloud view of %d cluster(s) on %s/%s unavailable: %s", len(names),
                     cloud, region, exc)
            views, notices, error = {}, {}, str(exc) or type(exc).__name__
        for w in ws:
            w.error = error
            w.view = None if error else views.get(w.cluster, {})
            w.notices = notices.get(w.cluster, [])
            w.tick = tick
            if w.notices or (w.view is not None and lost_nodes(w.view, w.node_ids)):
                w.changed.set()

    def _read(self, cloud: str | None, region: str | None, names: list[str]
              ) -> tuple[dict[str, Mapping[str, NodeState]], dict[str, list[Notice]]]:
        """(In a status worker.) One batched view, then each cluster's notices."""
        ops = self.ops
        views = ops.cloud_views(cloud, region, names)
        notices: dict[str, list[Notice]] = {}
        for n in names:
            with contextlib.suppress(Exception):
                got = ops.notices(n)
                if got:
                    notices[n] = list(got)
        return views, notices

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(BaseException):
                await self._ticker
