"""Disk-space helpers of the head-node agent's daemon. STDLIB ONLY (shipped to nodes
next to agent.py; see agent.AGENT_FILES). Pure functions, no state."""

from __future__ import annotations

import os
import sqlite3

SQLITE_FULL = 13


def is_disk_full(exc: BaseException) -> bool:
    """True for "no space left" errors: OSError ENOSPC/EDQUOT, SQLite SQLITE_FULL."""
    import errno

    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == SQLITE_FULL:
            return True
        return "disk is full" in str(exc)
    return False


def space_left(path: str) -> int:
    """Bytes this process may still write on `path`'s file system (root may use the
    blocks reserved for root)."""
    st = os.statvfs(path)
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize


def mark_truncated(job_dir: str, marker: str) -> bool:
    """Mark a job's logs truncated: create `job_dir/marker` (an empty file: on a full disk
    it needs no data block; the message is derived when read). True if it exists now."""
    path = os.path.join(job_dir, marker)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        return False
    return True
