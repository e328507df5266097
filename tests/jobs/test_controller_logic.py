"""Controller logic against the in-memory FakeOps (the real local cloud is in test_e2e_local)."""

from __future__ import annotations

import time

import pytest

from launcher.jobs.crash import POINTS
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore

from .fake_ops import Behaviour, FakeOps, Place
from .harness import Running, submit, wait_for

PLACES = [
    Place("aws", "us-east-1", "us-east-1a", 1.0),
    Place("aws", "us-east-1", "us-east-1b", 1.1),
    Place("aws", "us-west-2", "us-west-2a", 1.2),
    Place("gcp", "us-central1", "us-central1-a", 1.3),
]


def _running_cluster(store: JobStore, job_id: int) -> str:
    wait_for(lambda: store.job(job_id).status == S.RUNNING, what="RUNNING")
    return store.attempts(job_id)[-1].cluster_name


def _done(store: JobStore, job_id: int, timeout: float = 10.0) -> S:
    wait_for(lambda: store.job(job_id).status.is_terminal, timeout, "terminal status")
    return store.job(job_id).status


@pytest.fixture()
def store() -> JobStore:
    return JobStore()


def test_job_succeeds_and_cluster_is_torn_down(store: JobStore) -> None:
    ops = FakeOps(PLACES)
    r = Running(ops)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.SUCCEEDED
        wait_for(lambda: ops.live() == [], what="teardown")
    finally:
        r.stop()
    ev = [e.to_status for e in store.events(job.id)]
    assert ev == ["PENDING", "STARTING", "RUNNING", "SUCCEEDED"]
    (a,) = store.attempts(job.id)
    assert a.cloud == "aws" and a.zone == "us-east-1a" and a.outcome == "SUCCEEDED"
    assert a.torn_down_at is not None and a.phase == "ENDED"


def test_two_preemptions_eager_moves_away_then_succeeds(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.5))
    r = Running(ops)
    try:
        job = submit(store)
        for _ in range(2):
            c = _running_cluster(store, job.id)
            ops.preempt(c)
            wait_for(lambda c=c: store.attempts(job.id)[-1].cluster_name != c
                     and store.job(job.id).status == S.RUNNING, what="recovered")
        assert _done(store, job.id) == S.SUCCEEDED
        wait_for(lambda: ops.live() == [], what="no cluster left")
    finally:
        r.stop()
    j = store.job(job.id)
    assert j.recoveries == 2 and j.restarts_on_errors == 0
    zones = [p.zone for _, p in ops.history]
    # EAGER_NEXT_REGION: after us-east-1a is preempted, the whole region is avoided.
    assert zones == ["us-east-1a", "us-west-2a", "us-central1-a"]
    assert ops.max_live <= 2
    assert j.last_recovery_s is not None and j.last_recovery_s < 2.0
    statuses = [e.to_status for e in store.events(job.id)]
    assert statuses.count("RECOVERING") == 2


def test_a_loss_the_cloud_calls_final_fails_the_job_instead_of_recovering(store: JobStore) -> None:
    """A Slurm allocation killed at the time limit the task set (`final_loss`) ends the
    job FAILED with the cloud's reason; no second cluster is launched."""
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30))
    r = Running(ops)
    try:
        job = submit(store)
        c = _running_cluster(store, job.id)
        why = "Slurm job 7 TIMEOUT: killed at its time limit (1 min): the time_limit ran out"
        ops.final_losses[c] = why
        ops.preempt(c)
        assert _done(store, job.id) == S.FAILED
        wait_for(lambda: ops.live() == [], what="teardown")
    finally:
        r.stop()
    assert len(ops.history) == 1 and store.job(job.id).recoveries == 0
    (a,) = store.attempts(job.id)
    assert a.outcome == "FAILED" and a.outcome_reason == why


def test_failover_stays_in_region_first(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.4))
    r = Running(ops)
    try:
        job = submit(store, strategy="FAILOVER")
        ops.preempt(_running_cluster(store, job.id))
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert [p.zone for _, p in ops.history] == ["us-east-1a", "us-east-1b"]


def test_single_zone_cloud_recovers_in_place_when_nothing_else_fits(store: JobStore) -> None:
    ops = FakeOps([Place("local", "local", "local", 0.0)],
                  behaviours=lambda n: Behaviour(duration_s=0.3))
    r = Running(ops)
    try:
        job = submit(store)
        ops.preempt(_running_cluster(store, job.id))
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert store.job(job.id).recoveries == 1 and len(ops.history) == 2


def test_notice_starts_replacement_early_but_runs_after_drain(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.6 if n > 1 else 30))
    started_while_old_alive: list[bool] = []
    r = Running(ops)
    try:
        job = submit(store)
        old = _running_cluster(store, job.id)
        ops.on_setup = lambda name: started_while_old_alive.append(old in ops.live())
        ops.preempt(old, notice_s=0.3)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    a1, a2 = store.attempts(job.id)
    assert started_while_old_alive == [True]  # provisioned while the old node drained
    assert a1.outcome == "PREEMPTED" and a1.ended_at is not None
    assert a2.running_at is not None and a2.running_at >= a1.ended_at  # ran only after drain
    assert store.job(job.id).recoveries == 1
    assert ops.live() == []


def test_user_code_failure_restarts_once_then_fails(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.05, exit_code=3))
    r = Running(ops)
    try:
        job = submit(store, max_restarts=1)
        assert _done(store, job.id) == S.FAILED
    finally:
        r.stop()
    j = store.job(job.id)
    assert j.restarts_on_errors == 1 and j.recoveries == 0 and j.exit_code == 3
    assert len(store.attempts(job.id)) == 2
    assert "exit code 3" in (j.failure_reason or "")
    # a user-code error is not the zone's fault: nothing blocked, same zone again
    assert [p.zone for _, p in ops.history] == ["us-east-1a", "us-east-1a"]
    assert ops.live() == []


def test_recover_on_exit_codes(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(0.05, exit_code=33 if n == 1 else 0))
    r = Running(ops)
    try:
        job = submit(store, codes=(33,))
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    j = store.job(job.id)
    assert j.recoveries == 1 and j.restarts_on_errors == 0


def test_setup_failure_is_failed_setup(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(setup_fails=True))
    r = Running(ops)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.FAILED_SETUP
    finally:
        r.stop()
    assert ops.live() == []
    assert "setup" in (store.job(job.id).failure_reason or "")


def test_preemption_during_setup_recovers(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(0.1))
    hit = []

    def preempt_first(name: str) -> None:
        if not hit:
            hit.append(name)
            ops.preempt(name)

    ops.on_setup = preempt_first
    r = Running(ops)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    j = store.job(job.id)
    assert j.recoveries == 1
    assert store.attempts(job.id)[0].outcome == "PREEMPTED"
    assert "during setup" in (store.attempts(job.id)[0].outcome_reason or "")


def test_no_capacity_at_first_launch(store: JobStore) -> None:
    ops = FakeOps(PLACES)
    ops.capacity = {}
    r = Running(ops)
    try:
        job = submit(store)
        assert _done(store, job.id) == S.FAILED_NO_RESOURCE
    finally:
        r.stop()


def test_transient_query_failures_never_start_a_recovery(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=1.0))
    r = Running(ops)
    try:
        job = submit(store)
        _running_cluster(store, job.id)
        ops.query_failures = 10
        ops.status_failures = 10
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert ops.query_failures == 0 and ops.status_failures == 0  # they were hit
    assert store.job(job.id).recoveries == 0 and len(ops.history) == 1


def test_cancel_during_recovery(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30))
    r = Running(ops)
    try:
        job = submit(store)
        c = _running_cluster(store, job.id)
        ops.capacity = {}  # recovery can't find anything: it keeps retrying
        ops.preempt(c)
        wait_for(lambda: store.job(job.id).status == S.RECOVERING, what="RECOVERING")
        wait_for(lambda: len(store.attempts(job.id)) >= 3, what="retries")
        store.request_cancel(job.id)
        assert _done(store, job.id) == S.CANCELLED
    finally:
        r.stop()
    assert ops.live() == []
    assert all(a.torn_down_at is not None for a in store.attempts(job.id))


def test_cancel_while_running(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=30))
    r = Running(ops)
    try:
        job = submit(store)
        _running_cluster(store, job.id)
        t0 = time.monotonic()
        store.request_cancel(job.id)
        assert _done(store, job.id) == S.CANCELLED
        assert time.monotonic() - t0 < 2
    finally:
        r.stop()
    assert ops.live() == []


def test_multi_node_replaces_only_lost_node(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.5), replace_supported=True)
    r = Running(ops, num_nodes=3)
    try:
        job = submit(store)
        c = _running_cluster(store, job.id)
        ops.preempt(c, node_index=1)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert len(ops.history) == 1  # no new cluster
    assert store.job(job.id).recoveries == 1
    assert "replaced 1 node" in store.events(job.id)[-2].reason


def test_multi_node_falls_back_to_full_relaunch(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.3))
    r = Running(ops, num_nodes=3)
    try:
        job = submit(store)
        ops.preempt(_running_cluster(store, job.id), node_index=2)
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert len(ops.history) == 2 and store.job(job.id).recoveries == 1


# the later points need a multi-node replacement, a drain or a cancel:
# test_controller_recovery.py crashes there
@pytest.mark.parametrize("point", POINTS[:POINTS.index("teardown_done") + 1])
def test_crash_at_every_point_then_restart_completes(store: JobStore, point: str) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.4))
    r = Running(ops, crash_at=point)
    job = submit(store)
    if point == "preemption_recorded":
        ops.preempt(_running_cluster(store, job.id))
    r.wait_dead()
    assert r.crashed
    r2 = Running(ops)  # a new controller, same DB, same "cloud"
    try:
        status = _done(store, job.id)
        wait_for(lambda: ops.live() == [], what="no leaked cluster")
    finally:
        r2.stop()
    assert status == S.SUCCEEDED
    names = [n for n, _ in ops.history]
    assert len(names) == len(set(names))  # (FakeOps also refuses duplicates outright)
    assert all(a.torn_down_at is not None for a in store.attempts(job.id))


def test_many_jobs_one_controller(store: JobStore) -> None:
    ops = FakeOps(PLACES, behaviours=lambda n: Behaviour(duration_s=0.2))
    r = Running(ops)
    try:
        ids = [submit(store, name=f"j{i}").id for i in range(40)]
        wait_for(lambda: all(store.job(i).status.is_terminal for i in ids), 20, "all done")
    finally:
        r.stop()
    assert {store.job(i).status for i in ids} == {S.SUCCEEDED}
    assert ops.live() == []


def test_cancel_during_a_hanging_setup_aborts_it(store: JobStore) -> None:
    ops = FakeOps(PLACES)

    def hang_until_aborted(name: str) -> None:
        wait_for(lambda: ops.clusters[name].nodes[f"{name}-0"] != "RUNNING", 20, "abort")

    ops.on_setup = hang_until_aborted
    r = Running(ops)
    try:
        job = submit(store)
        wait_for(lambda: len(ops.history) == 1, what="provisioning")
        t0 = time.monotonic()
        store.request_cancel(job.id)
        assert _done(store, job.id) == S.CANCELLED
        assert time.monotonic() - t0 < 3
    finally:
        r.stop()
    assert ops.live() == []
    (a,) = store.attempts(job.id)
    assert a.outcome == "CANCELLED" and a.torn_down_at is not None


@pytest.mark.parametrize("strategy", ["EAGER_NEXT_REGION", "FAILOVER"])
def test_region_pinned_job_recovers_in_another_zone_not_the_preempted_one(
        store: JobStore, strategy: str) -> None:
    """Only us-east-1 offers exist (the task pins the region): after 1a is preempted the
    job moves to 1b; after 1b is preempted too, 1a (the older, decayed penalty) is used."""
    ops = FakeOps(PLACES[:2], behaviours=lambda n: Behaviour(duration_s=0.5))
    r = Running(ops)
    try:
        job = submit(store, strategy=strategy)
        for _ in range(2):
            c = _running_cluster(store, job.id)
            ops.preempt(c)
            wait_for(lambda c=c: store.attempts(job.id)[-1].cluster_name != c
                     and store.job(job.id).status == S.RUNNING, what="recovered")
        assert _done(store, job.id) == S.SUCCEEDED
    finally:
        r.stop()
    assert [p.zone for _, p in ops.history] == ["us-east-1a", "us-east-1b", "us-east-1a"]
