"""Saving a finished attempt's output (issue 8, item 2): a failed or partial fetch never
replaces what is saved, the fetch is retried, and the cluster is taken down only after
the logs are safe or the tries are spent (and controller.log says which)."""

from __future__ import annotations

import logging

import pytest

from launcher.jobs import paths
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore

from .fake_ops import FakeOps, Place
from .harness import Running, submit, wait_for

PLACES = [Place("aws", "us-east-1", "us-east-1a", 1.0)]
FULL = ["(rank 0) ran on us-east-1a", "(rank 0) working", "(rank 0) done (gang run 1)"]


@pytest.fixture()
def store() -> JobStore:
    return JobStore()


def _run_to_end(store: JobStore, ops: FakeOps, **cfg: object) -> int:
    r = Running(ops, **cfg)
    try:
        job = submit(store)
        wait_for(lambda: store.job(job.id).status.is_terminal, what="terminal status")
        assert store.job(job.id).status == S.SUCCEEDED
        wait_for(lambda: ops.live() == [], what="teardown")
    finally:
        r.stop()
    return job.id


def _saved(job_id: int) -> list[str]:
    return paths.attempt_log_path(job_id, 1).read_text().splitlines()


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


def test_a_failed_fetch_is_retried_and_the_cluster_waits_for_the_logs(
        store: JobStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="launcher.jobs.controller")
    ops = FakeOps(PLACES)
    ops.fetch_failures = 2  # the stream breaks off after one line, twice
    job_id = _run_to_end(store, ops)
    assert _saved(job_id) == FULL  # the whole output, not the first broken-off copy
    assert ops.timeline == ["fetch-failed mj-1-1", "fetch-failed mj-1-1", "fetch-ok mj-1-1",
                            "teardown mj-1-1"]
    seen = _messages(caplog)
    assert "logs of mj-1-1 not fetched (try 1 of 4)" in seen
    assert "logs of mj-1-1 saved to attempt-1.log on try 3" in seen
    assert "taking mj-1-1 down (its logs are saved)" in seen


def test_fetches_that_all_fail_never_leave_an_empty_log(
        store: JobStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="launcher.jobs.controller")
    ops = FakeOps(PLACES)
    ops.fetch_failures = 100
    ops.fetch_fail_after = 0  # nothing at all comes through
    job_id = _run_to_end(store, ops, log_fetch_tries=3)
    (line,) = _saved(job_id)  # not 0 bytes: it says what happened
    assert line.startswith("=== log incomplete: fetching it from mj-1-1 failed")
    assert "exit -9" in line and "after 0 line(s)" in line
    assert ops.timeline == ["fetch-failed mj-1-1"] * 3 + ["teardown mj-1-1"]
    seen = _messages(caplog)
    assert "logs of mj-1-1 not fetched after 3 tries" in seen
    assert "taking mj-1-1 down (its logs could not be fetched)" in seen


def test_a_failed_fetch_never_replaces_what_was_saved(
        store: JobStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="launcher.jobs.controller")
    ops = FakeOps(PLACES)
    ops.fetch_failures = 100
    saved = paths.attempt_log_path(1, 1)
    saved.parent.mkdir(parents=True)
    saved.write_text("(rank 0) an earlier, whole copy\n")  # e.g. a previous controller's
    job_id = _run_to_end(store, ops, log_fetch_tries=2)
    assert job_id == 1 and _saved(1) == ["(rank 0) an earlier, whole copy"]
    assert "attempt-1.log keeps what was saved before" in _messages(caplog)
    assert [p.name for p in saved.parent.iterdir() if p.name.endswith(".part")] == []


@pytest.mark.parametrize("records_survive", [True, False])
def test_a_lost_head_is_not_waited_for(store: JobStore, records_survive: bool) -> None:
    """A head the cloud reports gone is tried once when its disk outlives it (local
    cloud), not at all when its logs went with it (a dead address answers nothing)."""
    ops = FakeOps(PLACES)
    ops.records_outlive_nodes = records_survive
    r = Running(ops, log_fetch_tries=50, log_fetch_backoff_s=1.0)
    try:
        job = submit(store)
        wait_for(lambda: store.job(job.id).status == S.RUNNING, what="RUNNING")
        ops.fetch_failures = 100
        ops.preempt("mj-1-1")
        # 50 tries 1 s apart would take minutes: a gone head is tried once
        wait_for(lambda: "teardown mj-1-1" in ops.timeline, 5.0, "teardown of mj-1-1")
    finally:
        r.stop()
    if records_survive:
        assert ops.timeline[:2] == ["fetch-failed mj-1-1", "teardown mj-1-1"]
        assert _saved(job.id)[-1].startswith("=== log incomplete")
    else:
        assert ops.timeline[:1] == ["teardown mj-1-1"]
        assert _saved(job.id)[-1].startswith("=== mj-1-1's head node was lost")


def test_a_head_lost_while_retrying_gets_one_last_try(store: JobStore) -> None:
    ops = FakeOps(PLACES)
    real_fetch = ops.fetch_logs

    def fetch_then_lose_the_head(*a: object, **kw: object) -> None:
        try:
            real_fetch(*a, **kw)  # type: ignore[arg-type]
        finally:
            if ops.timeline.count("fetch-failed mj-1-1") == 2:
                ops.preempt("mj-1-1")

    ops.fetch_logs = fetch_then_lose_the_head  # type: ignore[method-assign]
    ops.fetch_failures = 100
    r = Running(ops, log_fetch_tries=50, log_fetch_backoff_s=0.2)
    try:
        job = submit(store)
        wait_for(lambda: store.job(job.id).status.is_terminal, what="terminal status")
        wait_for(lambda: "teardown mj-1-1" in ops.timeline, 5.0, "teardown of mj-1-1")
    finally:
        r.stop()
    assert store.job(job.id).status == S.SUCCEEDED
    assert ops.timeline == ["fetch-failed mj-1-1"] * 3 + ["teardown mj-1-1"]
    assert _saved(job.id)[-1].startswith("=== log incomplete")
