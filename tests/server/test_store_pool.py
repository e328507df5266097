"""The server keeps one ServerStore per worker thread across requests."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from launcher.server.store_pool import drop, server_store


def test_one_store_per_thread_kept_and_reopened_after_a_failure(launcher_home: Path) -> None:
    with server_store() as first:
        first.create_user("alice")
    with server_store() as again:
        assert again is first  # kept: not reopened per request
        assert [u.name for u in again.users()] == ["alice"]

    other: list[object] = []

    def elsewhere() -> None:
        with server_store() as s:
            other.append(s)
            s.create_user("bob")  # seen by the kept connection: autocommit reads

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert other[0] is not first
    with server_store() as s:
        assert {u.name for u in s.users()} == {"alice", "bob"}

    with pytest.raises(sqlite3.OperationalError), server_store() as s:
        s.db.query("SELECT * FROM no_such_table")
    with server_store() as fresh:
        assert fresh is not first  # a store whose connection failed is not kept
    drop()
