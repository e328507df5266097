"""The state store's interface (launcher/state/store.py): what code outside
launcher/state uses instead of sqlite3."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.state import store
from launcher.state.files import StateError

# every test runs on both engines (tests/conftest.py, db_engine)
pytestmark = pytest.mark.usefixtures("db_engine")


@pytest.mark.sqlite_only
def test_connect_creates_the_file_private_and_reads_rows_by_name(tmp_path: Path) -> None:
    path = tmp_path / "home" / "state.db"
    path.parent.mkdir(mode=0o700)
    conn = store.connect(path, timeout=5.0, named_rows=True)
    try:
        conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
        conn.execute("INSERT INTO t VALUES (?, ?)", (1, "x"))
        row = conn.execute("SELECT a, b FROM t").fetchone()
        assert (row["a"], row["b"], row[1]) == (1, "x", "x")
    finally:
        conn.close()
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_immediate_commits_and_rolls_back(tmp_path: Path) -> None:
    conn = store.connect(tmp_path / "state.db", timeout=5.0)
    conn.execute("CREATE TABLE t (a INTEGER)")
    with store.immediate(conn) as c:
        c.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(RuntimeError), store.immediate(conn) as c:
        c.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("boom")
    assert [r[0] for r in conn.execute("SELECT a FROM t")] == [1]
    conn.close()


@pytest.mark.sqlite_only
def test_readonly_never_creates_nor_writes(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(store.STORE_ERRORS):
        store.connect_readonly(missing, timeout=1.0).execute("SELECT 1")
    assert not missing.exists()
    path = tmp_path / "state.db"
    rw = store.connect(path, timeout=5.0)
    rw.execute("CREATE TABLE t (a INTEGER)")
    rw.close()
    ro = store.connect_readonly(path, timeout=1.0)
    try:
        assert store.table_exists(ro, "t") and not store.table_exists(ro, "other")
        with pytest.raises(store.STORE_ERRORS):
            ro.execute("INSERT INTO t VALUES (1)")
    finally:
        ro.close()


def test_open_error_names_the_file_and_says_disk_full(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    err = store.open_error(path, OSError(28, "No space left on device"))
    assert isinstance(err, StateError)
    assert str(err).startswith(f"Cannot open the state DB at {path}: disk full")
    plain = store.open_error(path, PermissionError(13, "Permission denied"))
    assert "Permission denied" in str(plain)
