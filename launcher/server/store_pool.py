"""The server's ServerStore connections: one per worker thread, opened on its first
request and kept for the next ones.

Opening a ServerStore costs milliseconds (the managed-jobs and server migration
chains are checked, WAL set up); a request used to open two or three. Worker
threads (uvicorn's pool, the request runner's) live across requests, so a
thread-local store is a pool with no hand-over between threads (SQLite connections
are not shared between threads). Reads run in autocommit, so a kept connection sees
every commit; a store whose connection failed is closed and reopened next time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from launcher.api.server_store import ServerStore
from launcher.config.settings import launcher_home
from launcher.state.db import StateError
from launcher.state.store import STORE_ERRORS

# what a broken per-thread store raises: it is dropped and opened again
_REOPEN_ON: tuple[type[Exception], ...] = (*STORE_ERRORS, StateError)

_local = threading.local()


@contextmanager
def server_store() -> Iterator[ServerStore]:
    """This thread's ServerStore on the current home's state DB (kept open after)."""
    path = launcher_home() / "state.db"
    store: ServerStore | None = getattr(_local, "store", None)
    if store is not None and store.db.path != path:
        drop()
        store = None
    if store is None:
        store = ServerStore(path)
        _local.store = store
    try:
        yield store
    except _REOPEN_ON:
        drop()  # a damaged or closed connection is not kept
        raise


def drop() -> None:
    """Close and forget this thread's store (the next use reopens one)."""
    store: ServerStore | None = getattr(_local, "store", None)
    _local.store = None
    if store is not None:
        store.close()
