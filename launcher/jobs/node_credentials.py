"""Keeping the short-lived storage credentials on a running managed job's nodes fresh.

A checkpoint store in GCS reaches nodes without a metadata server (other clouds, SSH
pools) through an access token the client minted (about one hour); an Azure store
through a container SAS (7 days). The nodes' saves read the token / SAS file afresh
each time, so the controller rewrites it before it expires: `NodeCredentials.track`
records, per cluster, the store and when what the nodes hold was issued and expires;
`poll` (called on every status poll of the cluster) renews it in the background once
half its lifetime has passed (storage_nodes.renew_on_nodes: mint again, put the file
on every node). A failed renewal is logged and tried again after a tenth of the
lifetime (at most a minute later). A cluster tracked with nothing known (a controller
restarted while its job ran) is renewed at its first poll.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger("launcher.jobs.controller")
RETRY_MAX_S = 60.0


@dataclass
class _Tracked:
    store: str
    due: float  # epoch seconds: renew from then on
    lifetime: float  # of the credentials the nodes hold (s), for the retry delay
    busy: bool = False


class NodeCredentials:
    """Per-cluster renewal of a checkpoint store's short-lived node credentials.
    Thread-safe; renewals run on one background thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracked: dict[str, _Tracked] = {}
        self._pool: ThreadPoolExecutor | None = None

    def track(self, cluster: str, store: str | None, *, shipped_now: bool = True) -> None:
        """Watch `cluster`, whose nodes sync checkpoint store `store` (None, or a store
        whose credentials do not expire: nothing to do). `shipped_now`: its nodes got
        the credentials this process holds moments ago (a launch); False: unknown (an
        adopted cluster), renew at the first poll."""
        from launcher.runtime.storage_nodes import shipped_lifetime

        if store is None:
            return
        try:
            span = shipped_lifetime(store)
        except Exception as exc:  # no token to mint now: the first poll tries again
            log.warning("%s: the checkpoint store's credentials: %s", cluster, exc)
            span = (time.time(), time.time() + RETRY_MAX_S)
            shipped_now = False
        if span is None:
            return
        issued, expires = span
        lifetime = max(1.0, expires - issued)
        due = issued + lifetime / 2 if shipped_now else 0.0
        with self._lock:
            self._tracked[cluster] = _Tracked(store, due, lifetime)

    def forget(self, cluster: str) -> None:
        with self._lock:
            self._tracked.pop(cluster, None)

    def due(self, cluster: str) -> float | None:
        """When `cluster`'s next renewal is due (epoch seconds), None when untracked."""
        with self._lock:
            t = self._tracked.get(cluster)
            return t.due if t is not None else None

    def poll(self, cluster: str) -> None:
        """Start a renewal in the background if one is due and none is running. Cheap."""
        with self._lock:
            t = self._tracked.get(cluster)
            if t is None or t.busy or time.time() < t.due:
                return
            t.busy = True
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="node-credentials")
            pool = self._pool
        pool.submit(self._renew, cluster, t)

    def _renew(self, cluster: str, t: _Tracked) -> None:
        from launcher.runtime import execution
        from launcher.runtime.storage_nodes import renew_on_nodes, shipped_lifetime
        from launcher.state.db import StateDB

        try:
            with StateDB() as db:
                info = db.cluster_info(cluster)
            runners = execution.open_runners(info)
            try:
                renew_on_nodes(runners, t.store)
            finally:
                execution.close_runners(runners)
            span = shipped_lifetime(t.store)
            issued, expires = span if span is not None else (time.time(), float("inf"))
            lifetime = max(1.0, expires - issued)
            due = issued + lifetime / 2
            log.info("%s: renewed the checkpoint store's credentials on %d node(s); valid "
                     "until %s", cluster, len(runners),
                     time.strftime("%H:%M:%S", time.localtime(expires)))
        except Exception as exc:  # an unreachable node, no token: try again soon
            lifetime = t.lifetime
            due = time.time() + min(RETRY_MAX_S, lifetime / 10)
            log.warning("%s: could not renew the checkpoint store's credentials on the "
                        "nodes (%s); trying again", cluster, exc)
        with self._lock:
            current = self._tracked.get(cluster)
            if current is t:
                t.due, t.lifetime, t.busy = due, lifetime, False
