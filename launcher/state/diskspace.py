"""Telling a full disk apart from other storage errors, for messages users can act on.

SQLite reports a full file system as "database or disk is full" when a write cannot grow
the file, but as "disk I/O error" when it cannot grow its WAL index; both mean the same
to a user: free some space (or point LAUNCHER_HOME elsewhere). Pure stdlib, no I/O but
statvfs.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

SQLITE_FULL = 13
FULL_BELOW_BYTES = 4096  # less than one block free: nothing more can be written


def mount_point(path: Path | str) -> Path:
    """The mount point of the file system holding `path` (which may not exist yet)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def is_full(path: Path | str) -> bool:
    """True when the file system holding `path` has (almost) no space left for us."""
    try:
        st = os.statvfs(mount_point(path))
    except OSError:
        return False
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize < FULL_BELOW_BYTES


def is_disk_full_error(exc: BaseException) -> bool:
    """OSError ENOSPC/EDQUOT or SQLite's SQLITE_FULL."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return (isinstance(code, int) and code & 0xFF == SQLITE_FULL) or "disk is full" in str(exc)
    return False


def full_message(path: Path | str) -> str:
    return (f"disk full: no space left on {mount_point(path)} (holding {path}); "
            "free some space there and try again")


def describe_storage_error(path: Path | str, exc: BaseException) -> str:
    """`str(exc)`, or the disk-full message when `exc` (or the state of `path`'s file
    system) says the disk is full."""
    if is_disk_full_error(exc) or is_full(path):
        return full_message(path)
    return str(exc)
