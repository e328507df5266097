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


def test_output_is_kept_as_it_runs_and_survives_a_head_lost_without_notice(
        store: JobStore) -> None:
    """The controller pulls the running attempt's new lines (offsets, on its poll) into
    attempt-<n>.log; the head then dies with its disk (no notice): the log keeps what
    ran, the dead head is not asked, and the recovery is not held up."""
    from .fake_ops import Behaviour

    ops = FakeOps(PLACES + [Place("aws", "us-east-1", "us-east-1b", 1.1)],
                  behaviours=lambda n: Behaviour(duration_s=30.0 if n == 1 else 0.3))
    ops.dead_head_s = 3.0
    r = Running(ops)
    try:
        job = submit(store)
        wait_for(lambda: store.job(job.id).status == S.RUNNING, what="RUNNING")
        log_path = paths.attempt_log_path(job.id, 1)
        for i in range(3):
            with ops.lock:
                ops.clusters["mj-1-1"].logs.append(f"step {i}")
            wait_for(lambda i=i: log_path.exists()
                     and f"(rank 0) step {i}" in log_path.read_text(), 5.0, f"step {i} synced")
        ops.preempt("mj-1-1")
        wait_for(lambda: len(store.attempts(job.id)) == 2
                 and store.job(job.id).status == S.RUNNING, 5.0, "recovered")
        assert (store.job(job.id).last_recovery_s or 99) < 1.5
        wait_for(lambda: store.job(job.id).status.is_terminal, what="terminal status")
        wait_for(lambda: ops.live() == [], what="teardown")
    finally:
        r.stop()
    lines = _saved(job.id)
    assert lines[:3] == ["(rank 0) step 0", "(rank 0) step 1", "(rank 0) step 2"]
    assert lines[3].startswith("=== mj-1-1's head node was lost") and len(lines) == 4
    assert not log_path.with_name(log_path.name + ".sync").exists()
    assert "fetch-failed mj-1-1" not in ops.timeline  # the dead head was not asked
    # the second attempt ended normally: its whole log replaced the synced copy
    assert paths.attempt_log_path(job.id, 2).read_text().splitlines() == [
        "(rank 0) ran on us-east-1b", "(rank 0) working", "(rank 0) done (gang run 1)"]


def test_a_restarted_controller_continues_the_sync_where_it_stopped(tmp_path) -> None:
    from launcher.jobs.log_sync import LogSync

    path = tmp_path / "attempt-1.log"
    source = ["a", "b", "c", "d"]

    def fetch(_c: str, _j: int, offsets: dict[int, int], on_line) -> dict[int, int]:
        n = len(source)
        for line in source[offsets.get(0, 0):n]:
            on_line(f"(rank 0) {line}")
        return {0: n}

    del source[2:]
    assert LogSync(path, 7).pull(fetch, "c") == 2
    source += ["c", "d"]
    assert LogSync(path, 7).pull(fetch, "c") == 2  # a new controller: from the sidecar
    assert path.read_text().splitlines() == [f"(rank 0) {x}" for x in "abcd"]
    LogSync(path, 8)  # another gang run: starts its copy afresh
    assert not path.exists()


class _ReplaceFails(FakeOps):
    """A cloud that can replace nodes in place, but whose replacement fails."""

    def replace_nodes(self, cluster_name, lost_node_ids, req):  # type: ignore[no-untyped-def]
        from launcher.jobs.ops_interface import TransientOpsError

        raise TransientOpsError("no capacity for the replacement (injected)")


@pytest.mark.parametrize("replace", ["unsupported", "fails"])
def test_a_head_lost_on_a_gang_keeps_its_synced_output_and_says_what_happened(
        store: JobStore, replace: str) -> None:
    """Issue 16 (4.2): one node (the head) of a 2-node gang lost without notice. On a cloud
    that cannot replace nodes (AWS), no in-place replacement is announced; where one is
    tried and fails, the event trail says the whole cluster was relaunched. Either way
    attempt 1's log holds the lines synced before the loss, ended by the lost-head line
    once, and no line claims the gang restarted; no gang-run copy is left behind."""
    from launcher.api.jobs import jobs_logs

    from .fake_ops import Behaviour

    cls = _ReplaceFails if replace == "fails" else FakeOps
    ops = cls(PLACES + [Place("aws", "us-east-1", "us-east-1b", 1.1)],
              behaviours=lambda n: Behaviour(duration_s=30.0 if n == 1 else 0.3),
              replace_supported=replace == "fails")
    r = Running(ops, num_nodes=2)
    try:
        job = submit(store)
        wait_for(lambda: store.job(job.id).status == S.RUNNING, what="RUNNING")
        log_path = paths.attempt_log_path(job.id, 1)
        with ops.lock:
            ops.clusters["mj-1-1"].logs.extend(["step 0", "step 1"])
        wait_for(lambda: log_path.exists() and "(rank 0) step 1" in log_path.read_text(),
                 what="steps synced")
        ops.preempt("mj-1-1", node_index=0)  # the head only
        wait_for(lambda: store.job(job.id).status.is_terminal, what="terminal status")
        wait_for(lambda: ops.live() == [], what="teardown")
    finally:
        r.stop()
    assert store.job(job.id).status == S.SUCCEEDED
    reasons = [e.reason for e in store.events(job.id)]
    announced = [x for x in reasons if "replacing only those nodes" in x]
    if replace == "unsupported":
        assert announced == [], reasons
    else:
        assert len(announced) == 1 and any(
            "could not be replaced in place: relaunching the whole cluster" in x
            for x in reasons), reasons
    assert len(store.attempts(job.id)) == 2  # the whole cluster was relaunched
    lines = _saved(job.id)
    assert lines[:2] == ["(rank 0) step 0", "(rank 0) step 1"], lines
    assert len(lines) == 3 and lines[2].startswith("=== mj-1-1's head node was lost"), lines
    assert not paths.gang_run_log_path(job.id, 1, 1).exists()
    shown: list[str] = []
    jobs_logs(job.id, shown.append, follow=False)
    first = shown[:shown.index(next(x for x in shown if x.startswith("=== attempt 1 ended")))]
    assert "(rank 0) step 0" in first and "(rank 0) step 1" in first, shown
    assert not any("gang restarted" in x for x in shown), shown


def test_jobs_logs_shows_output_left_in_a_gang_run_copy_by_an_older_controller(
        store: JobStore) -> None:
    """A job recorded before the fix: attempt 1's synced output sits in
    attempt-1.run-1.log (gang_runs still 1) and attempt-1.log holds only the lost-head
    line. `jobs logs` shows that output too."""
    from launcher.api.jobs import jobs_logs

    ops = FakeOps(PLACES)
    job_id = _run_to_end(store, ops)
    paths.gang_run_log_path(job_id, 1, 1).write_text("(rank 0) synced before the loss\n")
    shown: list[str] = []
    jobs_logs(job_id, shown.append, follow=False)
    assert shown.index("(rank 0) synced before the loss") < shown.index(FULL[0]), shown
