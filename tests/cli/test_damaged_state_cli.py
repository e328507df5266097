"""An empty, truncated or corrupted state DB (issue 8, item 5), as a user meets it: every
command group answers with one clean message naming the file and how to recover, a
non-zero exit and no traceback; `gpus` does not touch the DB; the backup restores."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.jobs.store import JobStore
from launcher.state import files as state_files
from launcher.state.db import PlacementRecord, StateDB

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy(), cwd=REPO, stdin=subprocess.DEVNULL)


def _populate(home: Path) -> Path:
    """A DB that held something: a cluster record, a managed job, enough events that the
    file has many pages (so damage in the middle hits b-tree pages)."""
    with StateDB() as db:
        db.create_cluster("c1", PlacementRecord("local", "local", None, "local", 1, False))
        for i in range(400):
            db.add_event("c1", "note", f"event {i} " + "x" * 200)
    store = JobStore()
    try:
        store.add_job(name="j", task_yaml='{"run": "true"}', task_source=None,
                      strategy="FAILOVER", max_restarts_on_errors=0, recover_on_exit_codes=())
    finally:
        store.close()
    # an hour later, the next write backs the DB up (the backup made at its creation
    # held nothing yet)
    bak = home / "state.db.bak.1"
    first = bak.stat().st_mtime
    os.utime(bak, (first - 3700, first - 3700))
    state_files._next_backup_check.clear()  # this process cached "next check in an hour"
    with StateDB() as db:
        db.add_event("c1", "note", "the last write")
    assert bak.stat().st_mtime >= first and (home / "state.db.bak.2").exists()
    db_path = home / "state.db"
    assert not (home / "state.db-wal").exists()  # every connection closed: all in the file
    return db_path


def _empty(db: Path) -> None:
    db.write_bytes(b"")


def _truncated(db: Path) -> None:
    os.truncate(db, 4096)


def _corrupted(db: Path) -> None:
    data = bytearray(db.read_bytes())
    rng = random.Random(8)
    middle = len(data) // 2
    for i in range(middle - 8192, middle + 8192):
        data[i] = rng.randrange(256)
    db.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "empty": _empty, "truncated": _truncated, "corrupted": _corrupted,
}

TASK = REPO / "task_examples" / "hello.yaml"
COMMANDS: list[tuple[str, ...]] = [
    # cluster commands
    ("status",), ("status", "--json"), ("queue", "c1"), ("logs", "c1"), ("cancel", "c1"),
    ("stop", "c1"), ("start", "c1"), ("down", "-y", "c1"), ("autostop", "c1", "-i", "5"),
    ("exec", "c1", "--", "true"), ("launch", "-y", "-c", "c2", str(TASK)),
    ("local", "preempt", "c1"),
    # managed jobs
    ("jobs", "queue"), ("jobs", "queue", "--json"), ("jobs", "logs", "1"),
    ("jobs", "cancel", "1"), ("jobs", "launch", "-y", "-d", str(TASK)),
    ("jobs", "controller", "start"),
    # diagnostics
    ("check",),
]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_command_gives_one_clean_message(damage: str, launcher_home: Path) -> None:
    db = _populate(launcher_home)
    DAMAGE[damage](db)
    before = db.read_bytes()
    for cmd in COMMANDS:
        p = run(*cmd)
        shown = " ".join(cmd)
        assert p.returncode != 0, f"{shown}: exit 0\n{p.stdout}"
        assert "Traceback" not in p.stderr + p.stdout, f"{shown}:\n{p.stderr}"
        assert p.stderr.count("Error:") == 1 and p.stderr.startswith("Error: "), (shown, p.stderr)
        assert f"The state DB {db} is" in p.stderr, (shown, p.stderr)
        assert "move it aside" in p.stderr and "docs/state.md" in p.stderr, (shown, p.stderr)
        said = p.stdout + p.stderr
        assert "No clusters" not in said and "No managed jobs" not in said, shown
    assert db.read_bytes() == before  # nothing wrote over the evidence
    # the message says how to recover: the backup made when the DB was created works
    bak = launcher_home / "state.db.bak.1"
    assert bak.exists()
    p = run("status")
    assert f"cp {bak} {db}" in p.stderr
    db.rename(db.with_name("state.db.damaged"))
    shutil.copy(bak, db)
    p = run("status", "--json")
    assert p.returncode == 0, p.stderr
    assert '"c1"' in p.stdout


def test_gpus_and_cost_never_open_the_state_db(launcher_home: Path) -> None:
    db = _populate(launcher_home)
    _truncated(db)
    stamp = db.stat()
    for cmd in (("gpus", "H100"), ("gpus",), ("cost", str(TASK))):
        p = run(*cmd)
        assert p.returncode == 0, p.stderr
        assert "state DB" not in p.stderr
    after = db.stat()
    assert (after.st_size, after.st_mtime_ns) == (stamp.st_size, stamp.st_mtime_ns)
    assert not (launcher_home / "state.db-wal").exists()


def test_an_empty_file_that_never_held_a_db_is_a_fresh_start(launcher_home: Path) -> None:
    (launcher_home / "state.db").write_bytes(b"")  # e.g. a first run killed at once
    p = run("status")
    assert p.returncode == 0, p.stderr
    assert "No clusters." in p.stdout + p.stderr
    # ... but once it held the state, emptying it is an error
    (launcher_home / "state.db").write_bytes(b"")
    p = run("status")
    assert p.returncode != 0 and "is empty (0 bytes)" in p.stderr, p.stderr


def test_moving_a_damaged_db_aside_starts_afresh(launcher_home: Path) -> None:
    db = _populate(launcher_home)
    _truncated(db)
    db.rename(db.with_name("state.db.damaged"))
    # the marker stays: a missing file is a fresh start (an empty one is not)
    p = run("status")
    assert p.returncode == 0 and "No clusters." in p.stdout + p.stderr, p.stderr
