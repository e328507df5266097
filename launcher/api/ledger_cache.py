"""The cost ledger, kept in memory by a long-running process (the API server's
dashboard) and brought up to date on each read with what changed since the last one.

A ledger interval is written once and changes at most once afterwards, when it closes
(`ended_at`, `end_reason`); none is deleted. So a reader that has the intervals up to
id N needs only: the intervals after N, and those it holds as open that are no longer
open (read again by id). `read()` returns the same `Ledger` that
`cost_report.read_ledger()` would read at that moment, at the cost of three small queries
plus the rows that changed, instead of converting the whole ledger on every page view.

If the state DB behind the cache is not the one it read (a different file or database
at the same address, ids reused), the counts or the last interval disagree and the
cache starts over from a full read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from launcher.api.cost_report import Ledger, read_attempts
from launcher.state.db import StateDB, UsageEntry
from launcher.state.dburl import configured_url


@dataclass
class _State:
    key: str
    entries: dict[int, UsageEntry] = field(default_factory=dict)  # id -> interval
    open_ids: set[int] = field(default_factory=set)
    last_id: int = 0


_lock = threading.Lock()
_state: _State | None = None


def _refresh(db: StateDB, st: _State) -> bool:
    """Bring `st` up to date from `db`; False when `db` is not what `st` was read from."""
    if st.last_id:
        open_now, count = db.usage_mark(st.last_id)
        if count != len(st.entries):
            return False
        last = db.usage_by_ids([st.last_id])
        if not last or last[0].started_at != st.entries[st.last_id].started_at \
                or last[0].cluster != st.entries[st.last_id].cluster:
            return False
        closed = sorted(st.open_ids - set(open_now))
        for e in db.usage_by_ids(closed):
            st.entries[e.id] = e
        st.open_ids = set(open_now)
    for e in db.usage_after(st.last_id):
        st.entries[e.id] = e
        if e.ended_at is None:
            st.open_ids.add(e.id)
        st.last_id = e.id
    return True


def read(*, attempts: bool = True) -> Ledger:
    """The whole ledger (oldest first), as `cost_report.read_ledger()` returns it.
    Thread-safe; one cache per process, for the state DB configured now."""
    global _state
    db = StateDB()
    try:
        key = configured_url() or str(db.path)
        with _lock:
            st = _state if _state is not None and _state.key == key else _State(key)
            if not _refresh(db, st):
                st = _State(key)
                _refresh(db, st)
            _state = st
            entries = tuple(st.entries.values())  # in id order: added so, never removed
    finally:
        db.close()
    return Ledger(entries, read_attempts(str(db.path)) if attempts else {})
