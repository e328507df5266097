"""Controller decisions about lost nodes, interrupted replacements and accounting,
against the in-memory FakeOps (pure decision logic; the real clouds are in the
test_e2e_* files)."""

from __future__ import annotations

import time

import pytest

from launcher.jobs.accounting import summarize
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore

from .fake_ops import Behaviour, FakeOps, Place
from .harness import Running, submit, wait_for

PLACES = [Place("aws", "us-east-1", "us-east-1a", 2.0), Place("aws", "us-west-2", "us-west-2a", 3.0)]


@pytest.fixture()
def store() -> JobStore:
    return JobStore()


def _running(store: JobStore, job_id: int, attempts: int = 1) -> str:
    wait_for(lambda: store.job(job_id).status == S.RUNNING
             and len(store.attempts(job_id)) >= attempts, what="RUNNING")
    return store.attempts(job_id)[-1].cluster_name


def _done(store: JobStore, job_id: int, timeout: float = 15.0) -> S:
    wait_for(lambda: store.job(job_id).status.is_terminal, timeout, "terminal status")
    return store.job(job_id).status


class _DeadHead(FakeOps):
    """The head of the first cluster never answers, while the cloud says RUNNING."""

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.dead_polls: list[float] = []  # when the dead head was asked

    def job_status(self, cluster_name: str, cluster_job_id: int):  # type: ignore[no-untyped-def]
        if cluster_name.endswith("-1"):
            from launcher.jobs.ops_interface import TransientOpsError

            self.dead_polls.append(time.monotonic())
            raise TransientOpsError("head unreachable (injected)")
        return super().job_status(cluster_name, cluster_job_id)


def test_unreachable_head_not_confirmed_lost_is_recovered_after_the_limit(
        store: JobStore) -> None:
    ops = _DeadHead(PLACES, behaviours=lambda n: Behaviour(duration_s=0.2))
    # poll_max_s is 0.05 (fast_config): without the back-off the dead head would be
    # asked every <= 0.1 s, i.e. ~15 times before the 1.5 s limit.
    r = Running(ops, head_unreachable_limit_s=1.5, unreachable_poll_max_s=1.0)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert store.job(job.id).recoveries == 1
    reasons = [e.reason for e in store.events(job.id)]
    assert any("unreachable for" in x and "never confirmed a loss" in x for x in reasons), reasons
    # the poll backed off (x1.5 per failure) while the head was unreachable
    polls = ops.dead_polls
    gaps = [b - a for a, b in zip(polls, polls[1:], strict=False)]
    assert 3 <= len(polls) <= 9, (len(polls), gaps)
    assert max(gaps) > 0.3, gaps  # past 2 x poll_max_s
    first = store.attempts(job.id)[0]
    assert first.preempted_at is not None and first.running_at is not None


def test_unreachable_head_below_the_limit_is_not_a_recovery(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.6))
    ops.status_failures = 10  # a transient outage, cloud view RUNNING throughout
    r = Running(ops, head_unreachable_limit_s=30.0)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert store.job(job.id).recoveries == 0 and len(ops.history) == 1


def test_user_exit_255_with_healthy_nodes_is_a_user_failure(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.1, exit_code=255),
                  replace_supported=True)
    r = Running(ops, num_nodes=3)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.FAILED
    finally:
        r.stop()
    assert store.job(job.id).recoveries == 0 and "exit code 255" in (
        store.job(job.id).failure_reason or "")


@pytest.mark.parametrize("point", ["replace_intent_recorded", "nodes_replaced"])
def test_crash_during_in_place_replacement_recovers(store: JobStore, point: str) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=1.0), replace_supported=True)
    r = Running(ops, crash_at=point, num_nodes=3)
    job = submit(store)
    ops.preempt(_running(store, job.id), node_index=2)
    r.wait_dead()
    assert r.crashed
    r2 = Running(ops, num_nodes=3)
    try:
        status = _done(store, job.id)
        wait_for(lambda: ops.live() == [], what="no leaked cluster")
    finally:
        r2.stop()
    assert status == S.SUCCEEDED, [e.reason for e in store.events(job.id)]
    assert store.job(job.id).recoveries == 1
    first = store.attempts(job.id)[0]
    assert first.outcome == "PREEMPTED" and not first.replacing
    assert "interrupted by a controller restart" in (first.outcome_reason or "")
    assert ops.max_live == 1  # never two clusters of the job at once


def test_cancel_during_in_place_replacement_is_prompt(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30), replace_supported=True)
    ops.replace_delay_s = 30.0
    r = Running(ops, num_nodes=3)
    try:
        job = submit(store)
        ops.preempt(_running(store, job.id), node_index=2)
        wait_for(ops.replacing.is_set, what="replacement started")
        assert store.job(job.id).status == S.RECOVERING
        t0 = time.monotonic()
        store.request_cancel(job.id)
        assert _done(store, job.id, timeout=5.0) == S.CANCELLED
        assert time.monotonic() - t0 < 3.0
        wait_for(lambda: ops.live() == [], what="clusters torn down")
    finally:
        r.stop()
    assert ops.replacements == 0 and len(ops.history) == 1  # no gang restarted, no relaunch
    a = store.attempts(job.id)[-1]
    assert a.outcome == "CANCELLED" and a.torn_down_at is not None


def test_crash_while_draining_a_noticed_attempt(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.8))
    r = Running(ops, crash_at="drain_ended")
    job = submit(store)
    ops.preempt(_running(store, job.id), notice_s=0.2)
    r.wait_dead()
    r2 = Running(ops)
    try:
        assert _done(store, job.id) == S.SUCCEEDED
        wait_for(lambda: ops.live() == [], what="drained cluster torn down")
    finally:
        r2.stop()
    assert all(a.torn_down_at is not None for a in store.attempts(job.id))


def test_crash_while_cancelling(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30))
    r = Running(ops, crash_at="cancel_attempts_ended")
    job = submit(store)
    _running(store, job.id)
    store.request_cancel(job.id)
    r.wait_dead()
    assert not store.job(job.id).status.is_terminal
    r2 = Running(ops)
    try:
        assert _done(store, job.id) == S.CANCELLED
    finally:
        r2.stop()
    assert ops.live() == []


def test_setup_failure_and_preemption_during_setup_are_billed_and_blocked(
        store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.2, setup_fails=n == 2))
    ops.provision_delay_s = 0.05

    def reclaim(cluster: str) -> None:
        if cluster.endswith("-1"):
            ops.preempt(cluster)  # preempted during setup

    ops.on_setup = reclaim
    r = Running(ops)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.FAILED_SETUP
    finally:
        r.stop()
    a1, a2 = store.attempts(job.id)
    assert a1.outcome == "PREEMPTED" and a1.node_price == 2.0 and a1.cloud == "aws"
    assert [(b.region, b.zone) for b in store.blocks(job.id, now=0)][0][1] == "us-east-1a"
    assert a2.outcome == "SETUP_FAILED" and a2.node_price == 3.0
    s = summarize(store.job(job.id), store.attempts(job.id))
    hours = sum(((a.torn_down_at or 0) - a.created_at) / 3600 for a in (a1, a2))
    assert s.node_hours == pytest.approx(hours, abs=1e-6) and s.node_hours > 0
    expect = ((a1.torn_down_at or 0) - a1.created_at) / 3600 * 2.0 + (
        (a2.torn_down_at or 0) - a2.created_at) / 3600 * 3.0
    assert s.cost_so_far == pytest.approx(expect, abs=1e-6) and s.cost_so_far > 0


def test_preemption_time_is_the_clouds_not_the_detection_time(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=1.0 if n == 1 else 0.2))
    r = Running(ops)
    job = submit(store)
    cluster = _running(store, job.id)
    r.stop()  # no controller while the node goes away
    now = time.time()
    store.update_attempt(job.id, 1, running_at=now - 60)  # it had run for a minute
    ops.preempt(cluster)
    with ops.lock:
        ops.clusters[cluster].preempted_at = now - 25  # and was reclaimed 25 s ago
    r2 = Running(ops)
    try:
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r2.stop()
    first = store.attempts(job.id)[0]
    assert first.preempted_at == pytest.approx(now - 25, abs=1e-3)
    recovery = store.job(job.id).last_recovery_s
    assert recovery is not None and 25 <= recovery < 30
    assert first.work_lost_s == pytest.approx(35, abs=1e-3)  # no checkpoint: all since start
    assert summarize(store.job(job.id), store.attempts(job.id)).work_lost_s == pytest.approx(
        35, abs=1e-3)


def test_in_place_replacement_records_preemption_and_work_lost(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.6), replace_supported=True)
    r = Running(ops, num_nodes=3)
    try:
        job = submit(store)
        ops.preempt(_running(store, job.id), node_index=1)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    (a,) = store.attempts(job.id)
    assert a.preempted_at is not None and a.work_lost_s is not None and a.work_lost_s > 0
    assert a.gang_runs == 2 and a.recovery_s is not None
    assert summarize(store.job(job.id), [a]).work_lost_s == pytest.approx(a.work_lost_s, abs=1e-3)


def test_every_gang_run_gets_the_next_launcher_attempt(store: JobStore) -> None:
    # gang run 1 fails (exit 1, restarted), 2 loses a node (restarted in place), 3 loses
    # every node (recovered on a new cluster), 4 succeeds
    codes = {1: 1}
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.6,
                                                         exit_code=codes.get(n, 0)),
                  replace_supported=True)
    r = Running(ops, num_nodes=3, cooldown_s=0.0)
    try:
        job = submit(store, max_restarts=1)
        second = _running(store, job.id, attempts=2)
        ops.preempt(second, node_index=2)
        wait_for(lambda: ops.replacements == 1 and store.job(job.id).status == S.RUNNING,
                 what="gang restarted in place")
        ops.preempt(second)
        _running(store, job.id, attempts=3)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert [a.gang_runs for a in store.attempts(job.id)] == [1, 2, 1]
    assert ops.gang_attempt_env == ["1", "2", "3", "4"]


@pytest.mark.parametrize(("exit_code", "after_end", "status", "attempts"), [
    (0, True, S.SUCCEEDED, 1),  # ended, then lost: its own success stands
    (3, True, S.FAILED, 1),  # ended by itself with exit 3, then lost: its own failure
    (0, False, S.SUCCEEDED, 2),  # lost before its end: recovered
])
def test_a_loss_after_the_run_ended_keeps_the_runs_own_result(
        store: JobStore, exit_code: int, after_end: bool, status: S, attempts: int) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(
        duration_s=0.4, exit_code=exit_code if n == 1 else 0))
    ops.records_outlive_nodes = True
    # The controller looks every 1.5 s, so the loss is seen before the end is.
    r = Running(ops, poll_min_s=1.5, poll_max_s=1.5, cooldown_s=0.0)
    try:
        job = submit(store)
        cluster = _running(store, job.id)
        time.sleep(0.6 if after_end else 0.1)
        ops.preempt(cluster)
        assert _done(store, job.id) == status
    finally:
        r.stop()
    assert len(store.attempts(job.id)) == attempts
    assert store.job(job.id).recoveries == attempts - 1


def test_recovery_does_not_wait_for_the_preempted_clusters_teardown(store: JobStore) -> None:
    """Every node of the old cluster is lost: its teardown (slow: 2 s here) runs in the
    background while the next attempt provisions; nothing leaks."""
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30.0 if n == 1 else 0.3))
    ops.teardown_delay_s = 2.0
    r = Running(ops)
    try:
        job = submit(store)
        old = _running(store, job.id)
        ops.preempt(old)
        wait_for(lambda: len(store.attempts(job.id)) == 2
                 and store.job(job.id).status == S.RUNNING, 5.0, "recovered")
        assert old in ops.live()  # still being torn down
        assert (store.job(job.id).last_recovery_s or 99) < 1.5
        assert _done(store, job.id) == S.SUCCEEDED
        wait_for(lambda: ops.live() == [], 10.0, "no cluster left")
    finally:
        r.stop()
    assert all(a.torn_down_at is not None for a in store.attempts(job.id))
    running = [e.reason for e in store.events(job.id) if e.to_status == "RUNNING"]
    assert "after the preemption (detect" in running[-1]  # the timing breakdown


def test_controller_killed_during_a_background_teardown_finishes_it(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30.0 if n == 1 else 0.3))
    ops.teardown_delay_s = 1.0
    r = Running(ops, crash_at="attempt_recorded:2")
    job = submit(store)
    old = _running(store, job.id)
    ops.preempt(old)
    r.wait_dead()
    assert r.crashed
    ops.teardown_generation += 1  # the dead controller's teardown never completes
    ops.teardown_delay_s = 0.0
    assert old in ops.live() and store.attempts(job.id)[0].torn_down_at is None
    r2 = Running(ops)
    try:
        assert _done(store, job.id) == S.SUCCEEDED
        wait_for(lambda: ops.live() == [], 5.0, "no cluster left")
    finally:
        r2.stop()
    assert f"teardown {old}" in ops.timeline
    assert all(a.torn_down_at is not None for a in store.attempts(job.id))


@pytest.mark.parametrize("slow", ["dead_head", "slow_head"])
def test_a_dead_head_never_holds_up_the_recovery(store: JobStore, slow: str) -> None:
    """The cloud reports the nodes PREEMPTED: the controller neither waits for the dead
    head's agent (its record went with it; reaching it takes seconds), nor for a status
    call in flight when the node died."""
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30.0 if n == 1 else 0.3))
    if slow == "dead_head":
        ops.dead_head_s = 3.0
    r = Running(ops, last_look_s=5.0)
    try:
        job = submit(store)
        old = _running(store, job.id)
        if slow == "slow_head":
            ops.status_delay_s = 3.0  # the call in flight when the node dies answers late
            time.sleep(0.2)
        ops.preempt(old)
        wait_for(lambda: len(store.attempts(job.id)) == 2
                 and store.job(job.id).status == S.RUNNING, 10.0, "recovered")
        assert (store.job(job.id).last_recovery_s or 99) < 1.5
        ops.status_delay_s = 0.0
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
