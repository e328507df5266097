"""launcher/state/files.py: a private home and DB whatever the umask, tightening a loose
home, rotating backups (at migrations, hourly on writes, never of a damaged DB)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.state import files as state_files
from launcher.state.db import StateDamagedError, StateDB

FIXTURES = Path(__file__).with_name("fixtures")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(autouse=True)
def _fresh_process_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test behaves like a new process (the module caches per process)."""
    monkeypatch.setattr(state_files, "_secured", set())
    monkeypatch.setattr(state_files, "_verified", set())
    monkeypatch.setattr(state_files, "_next_backup_check", {})


def test_home_and_db_are_private_under_umask_000(launcher_home: Path, umask_000: None) -> None:
    launcher_home.rmdir()
    with StateDB() as db:
        db.add_event("c", "note", "hello")
        # the WAL and shared-memory files SQLite made while open
        for name in ("state.db", "state.db-wal", "state.db-shm"):
            assert _mode(launcher_home / name) == 0o600, name
    assert _mode(launcher_home) == 0o700
    for p in launcher_home.iterdir():
        assert _mode(p) & 0o077 == 0, p


def test_the_cli_keeps_every_file_private_under_umask_000(launcher_home: Path) -> None:
    launcher_home.rmdir()
    cli = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]
    for args in (["status"], ["gpus", "H100"], ["jobs", "queue"]):
        p = subprocess.run(cli + args, capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: os.umask(0), env=dict(os.environ))
        assert p.returncode == 0, p.stderr
    loose = [f"{p} {_mode(p):o}" for p in [launcher_home, *launcher_home.rglob("*")]
             if not p.is_symlink() and _mode(p) & 0o077]
    assert loose == []
    assert (launcher_home / "cache").is_dir()  # the catalog cache was written, privately


def test_a_loose_home_is_tightened_once_with_a_warning(
    launcher_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.chmod(launcher_home, 0o755)
    (launcher_home / "logs").mkdir(mode=0o755)
    (launcher_home / "logs" / "old.log").write_text("x")
    os.chmod(launcher_home / "logs" / "old.log", 0o644)
    os.symlink("/etc/hostname", launcher_home / "link")  # never followed
    before = _mode(Path("/etc/hostname"))
    StateDB().close()
    StateDB().close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was accessible to other users (mode 0755)" in err
    assert str(launcher_home) in err
    assert _mode(launcher_home) == 0o700
    assert _mode(launcher_home / "logs") == 0o700
    assert _mode(launcher_home / "logs" / "old.log") == 0o600
    assert _mode(Path("/etc/hostname")) == before


def test_an_existing_readable_db_file_is_made_private(launcher_home: Path) -> None:
    StateDB().close()
    os.chmod(launcher_home / "state.db", 0o644)
    state_files._verified.clear()
    StateDB().close()
    assert _mode(launcher_home / "state.db") == 0o600


def _backups(home: Path) -> list[str]:
    return sorted(p.name for p in home.glob("state.db.bak.*") if not p.name.endswith("lock"))


def test_a_migrated_db_is_backed_up_and_backups_rotate_three(launcher_home: Path) -> None:
    """A file from the release before Alembic is backed up once migrated (the backup
    holds the new schema); backups keep the newest three."""
    path = launcher_home / "state.db"
    shutil.copyfile(FIXTURES / "release_state.db", path)
    os.chmod(path, 0o600)
    StateDB().close()
    assert _backups(launcher_home) == ["state.db.bak.1"]
    newest = sqlite3.connect(launcher_home / "state.db.bak.1")
    try:
        tables = {r[0] for r in newest.execute("SELECT name FROM sqlite_master")}
        assert {"alembic_version", "provision_attempts"} <= tables
    finally:
        newest.close()
    conn = sqlite3.connect(path)
    try:
        for _ in range(4):
            assert state_files.backup_now(conn, path) is True
    finally:
        conn.close()
    assert _backups(launcher_home) == ["state.db.bak.1", "state.db.bak.2", "state.db.bak.3"]
    assert _mode(launcher_home / "state.db.bak.1") == 0o600


def test_writes_back_up_at_most_hourly(launcher_home: Path) -> None:
    with StateDB() as db:
        bak = launcher_home / "state.db.bak.1"
        first = bak.stat().st_mtime_ns
        for i in range(50):
            db.add_event("c", "note", f"{i}")
        assert bak.stat().st_mtime_ns == first and _backups(launcher_home) == ["state.db.bak.1"]
        old = bak.stat().st_mtime - 3601
        os.utime(bak, (old, old))
        state_files._next_backup_check.clear()  # a new process, an hour later
        db.add_event("c", "note", "later")
        assert _backups(launcher_home) == ["state.db.bak.1", "state.db.bak.2"]


def test_a_damaged_db_never_pushes_out_a_good_backup(launcher_home: Path) -> None:
    with StateDB() as db:
        for _ in range(300):
            db.add_event("c", "note", "y" * 300)
    path = launcher_home / "state.db"
    good = (launcher_home / "state.db.bak.1").read_bytes()
    data = bytearray(path.read_bytes())
    data[len(data) // 2: len(data) // 2 + 6000] = os.urandom(6000)
    path.write_bytes(bytes(data))
    conn = sqlite3.connect(path)
    try:
        assert state_files.backup_now(conn, path) is False
    finally:
        conn.close()
    assert (launcher_home / "state.db.bak.1").read_bytes() == good
    state_files._verified.clear()  # the next command (a new process) checks the file
    with pytest.raises(StateDamagedError, match="restore the newest backup"):
        StateDB()


def test_an_empty_db_with_its_pages_in_the_wal_is_not_damage(launcher_home: Path) -> None:
    """Right after creation a WAL-mode DB can be 0 bytes with everything in its log; an
    empty file with no log, where the DB existed, is damage."""
    db = launcher_home / "state.db"
    db.write_bytes(b"")
    state_files.mark_created(db)
    (launcher_home / "state.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    state_files.preflight(db)
    (launcher_home / "state.db-wal").unlink()
    with pytest.raises(StateDamagedError, match="is empty"):
        state_files.preflight(db)
