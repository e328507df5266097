"""Logs in the state DB (launcher/state/logstore.py), and what uses it on a team server:
managed-job log files mirrored by the writing replica and pulled by a reading one
(launcher/jobs/log_mirror.py), request logs streamed by any replica
(launcher/server/requests.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.jobs import log_mirror, paths
from launcher.state import logstore
from launcher.state.db import StateDB


@pytest.fixture
def db(db_engine: str) -> Iterator[StateDB]:
    with StateDB() as opened:
        yield opened


def test_append_read_from_an_offset_and_replace(db: StateDB) -> None:
    s = "job/1/attempt-1.log"
    assert logstore.size(db, s) == 0 and logstore.read(db, s) == b""
    assert logstore.append(db, s, b"one\n") == 4
    assert logstore.append(db, s, b"two\nthr") == 11
    assert logstore.append(db, s, b"ee\n\xff") == 15  # bytes, not text
    assert logstore.read(db, s) == b"one\ntwo\nthree\n\xff"
    assert logstore.read(db, s, 6) == b"o\nthree\n\xff"  # mid-chunk
    assert logstore.read(db, s, 15) == b""
    logstore.append(db, "job/12/attempt-1.log", b"other job")
    logstore.append(db, "job/1_/x.log", b"not a prefix match")
    assert logstore.sizes(db, "job/1/") == {s: 15}
    logstore.replace(db, s, b"rewritten\n")
    assert logstore.read(db, s) == b"rewritten\n" and logstore.size(db, s) == 10


@pytest.fixture
def two_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str) -> Iterator[
        tuple[Path, Path]]:
    """Two replicas' homes on one PostgreSQL; the mirror's memory is per process, so it
    is cleared when "switching process"."""
    a, b = tmp_path / "replica-a", tmp_path / "replica-b"
    for home in (a, b):
        home.mkdir(mode=0o700)
    monkeypatch.setenv("LAUNCHER_HOME", str(a))
    yield a, b
    _forget_mirror()


def _forget_mirror() -> None:
    log_mirror._known.clear()
    log_mirror._written.clear()


def _as(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    _forget_mirror()  # another server process


def test_job_logs_written_on_one_replica_are_served_by_another(
        two_homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two_homes
    log = paths.attempt_log_path(7, 1)
    log.parent.mkdir(parents=True)
    log.write_bytes(b"line 1\n")
    log.with_suffix(".setup.log").write_bytes(b"setting up\n")
    with StateDB() as db:
        assert log_mirror.push(db) == 2
        assert log_mirror.push(db) == 0  # nothing changed
        with open(log, "ab") as f:
            f.write(b"line 2\n")
        assert log_mirror.push(db) == 1
        assert logstore.sizes(db, "job/7/")["job/7/attempt-1.log"] == 14

    _as(monkeypatch, b)
    assert not paths.attempt_log_path(7, 1).exists()
    assert log_mirror.pull(7) == 2
    assert paths.attempt_log_path(7, 1).read_bytes() == b"line 1\nline 2\n"
    assert paths.attempt_log_path(7, 1).with_suffix(".setup.log").read_bytes() == b"setting up\n"
    assert log_mirror.pull(7) == 0

    # replica A goes on: more output (appended), then the file is rewritten in place
    # (a gang run reclaimed: a new inode, shorter)
    monkeypatch.setenv("LAUNCHER_HOME", str(a))
    with StateDB() as db:
        log_mirror._written.add(str(log))
        log_mirror._known[str(log)] = (log.stat().st_ino, log.stat().st_size)
        with open(log, "ab") as f:
            f.write(b"line 3\n")
        log_mirror.push(db)
    monkeypatch.setenv("LAUNCHER_HOME", str(b))
    log_mirror._written.clear()
    assert log_mirror.pull(7) == 1
    assert paths.attempt_log_path(7, 1).read_bytes() == b"line 1\nline 2\nline 3\n"
    monkeypatch.setenv("LAUNCHER_HOME", str(a))
    tmp = log.with_name("x.tmp")
    tmp.write_bytes(b"reclaimed\n")
    os.replace(tmp, log)
    with StateDB() as db:
        log_mirror._written.add(str(log))
        log_mirror.push(db)
    monkeypatch.setenv("LAUNCHER_HOME", str(b))
    log_mirror._written.clear()
    log_mirror.pull(7)
    assert paths.attempt_log_path(7, 1).read_bytes() == b"reclaimed\n"


def test_a_replica_never_pulls_over_files_it_writes(
        two_homes: tuple[Path, Path]) -> None:
    log = paths.attempt_log_path(3, 1)
    log.parent.mkdir(parents=True)
    log.write_bytes(b"a long first version\n")
    with StateDB() as db:
        log_mirror.push(db)
        log.write_bytes(b"short\n")  # rewritten here, not pushed yet
        assert log_mirror.pull(3, db) == 0
    assert log.read_bytes() == b"short\n"


def test_the_pusher_thread_copies_within_its_interval(
        two_homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_mirror, "PUSH_INTERVAL_S", 0.05)
    log = paths.attempt_log_path(5, 2)
    log.parent.mkdir(parents=True)
    log.write_bytes(b"out\n")
    pusher = log_mirror.LogPusher()
    pusher.start()
    try:
        with StateDB() as db:
            deadline = threading.Event()
            for _ in range(200):
                if logstore.size(db, "job/5/attempt-2.log") == 4:
                    break
                deadline.wait(0.05)
            assert logstore.read(db, "job/5/attempt-2.log") == b"out\n"
    finally:
        pusher.stop()


def test_a_request_run_on_one_replica_streams_from_another(
        two_homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.server import store_pool
    from launcher.server.requests import RequestRunner

    a, b = two_homes
    release = threading.Event()

    def work(emit, cancel):  # type: ignore[no-untyped-def]
        emit("provisioning...", 2)
        emit("hello from replica a\nsecond line", 1)
        release.wait(30)
        return {"ok": True}

    runner_a = RequestRunner(workers=1)
    rid = runner_a.submit("alice", "launch", work)
    try:
        # replica B: another home (no log file of this request there), the same DB
        store_pool.drop()
        monkeypatch.setenv("LAUNCHER_HOME", str(b))
        runner_b = RequestRunner(workers=1)
        assert not runner_b.log_path(rid).exists()
        got: list[dict[str, object]] = []
        stream = runner_b.stream(rid)
        for item in stream:
            got.append(item)
            if len(got) == 3:
                break
        assert [g["line"] for g in got] == ["provisioning...", "hello from replica a",
                                            "second line"]
        assert [g["fd"] for g in got] == [2, 1, 1]
        release.set()
        rest = list(stream)
        assert rest[-1]["request"]["status"] == "SUCCEEDED"  # type: ignore[index]
    finally:
        release.set()
        runner_a._pool.shutdown(wait=True)
        store_pool.drop()
