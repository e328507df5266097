"""Leases on managed jobs for server replicas sharing one database (launcher/jobs/leases.py,
JobStore.claim_jobs / renew_leases / the fence): claims split the work, an expired lease
is taken over, and a replica that lost a lease can write nothing on that job."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from launcher.jobs import leases
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import JobStore, LeaseLostError

pytestmark = pytest.mark.usefixtures("db_engine")


def _jobs(store: JobStore, n: int) -> list[int]:
    return [store.add_job(name=f"j{i}", task_yaml="{}", task_source=None, strategy="FAILOVER",
                          max_restarts_on_errors=0, recover_on_exit_codes=()).id
            for i in range(n)]


def _expire(store: JobStore, holder: str) -> None:
    """Make `holder`'s leases lapse now (as if it had been paused past them)."""
    with store.write() as c:
        c.execute("UPDATE managed_jobs SET lock_expires_at = 0 WHERE lock_holder = ?", (holder,))


def test_claims_split_the_jobs_and_no_job_has_two_holders(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leases, "CLAIM_BATCH", 3)
    a, b = JobStore(), JobStore()
    try:
        ids = _jobs(a, 6)
        la, lb = leases.Leases(a, "replica-a"), leases.Leases(b, "replica-b")
        held_a, held_b = la.refresh(force=True), lb.refresh(force=True)
        assert len(held_a) == 3 and len(held_b) == 3
        assert held_a | held_b == set(ids) and not held_a & held_b
        # the next rounds renew what each holds and claim nothing of the other's
        assert la.refresh(force=True) == held_a and lb.refresh(force=True) == held_b
        assert a.leases_by_holder() == {"replica-a": 3, "replica-b": 3}
        rows = {str(r["id"]): r["jobs"] for r in leases.replicas(a)}
        assert rows == {"replica-a": 3, "replica-b": 3}
    finally:
        a.close()
        b.close()


def test_concurrent_claims_never_lease_a_job_twice() -> None:
    stores = [JobStore() for _ in range(4)]
    try:
        ids = _jobs(stores[0], 40)
        got: dict[str, set[int]] = {}
        go = threading.Event()

        def claim(i: int) -> None:
            ls = leases.Leases(stores[i], f"r{i}")
            go.wait(10)
            got[ls.replica_id] = ls.refresh(force=True)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join(30)
        claimed = [j for held in got.values() for j in held]
        assert sorted(claimed) == ids  # every job once, none twice
    finally:
        for s in stores:
            s.close()


def test_an_expired_lease_is_taken_over_and_the_old_holder_is_fenced() -> None:
    a, b = JobStore(), JobStore()
    try:
        (job,) = _jobs(a, 1)
        la, lb = leases.Leases(a, "replica-a"), leases.Leases(b, "replica-b")
        assert la.refresh(force=True) == {job}
        a.transition(job, S.STARTING, "picked up")  # the holder writes
        assert lb.refresh(force=True) == set()  # held and unexpired: not B's
        with pytest.raises(LeaseLostError):
            b.transition(job, S.CANCELLED, "B has no lease")
        _expire(a, "replica-a")  # A paused past its lease...
        assert lb.refresh(force=True) == {job}  # ...B takes the job
        before = [e.reason for e in a.events(job)]
        # A resumes, unaware: every write it makes on the job is refused, nothing lands
        for write in (lambda: a.transition(job, S.RUNNING, "stale"),
                      lambda: a.update_job(job, recoveries=5),
                      lambda: a.add_attempt(job, 1, "mj-stale-1", "initial"),
                      lambda: a.add_block(job, "aws", None, None, 9e9, "stale")):
            with pytest.raises(LeaseLostError, match="no longer leased"):
                write()
        assert [e.reason for e in b.events(job)] == before
        assert b.attempts(job) == [] and b.job(job).recoveries == 0
        assert la.refresh(force=True) == set()  # A learns it lost the job
        b.transition(job, S.RUNNING, "the new holder goes on")
        assert b.job(job).status is S.RUNNING
    finally:
        a.close()
        b.close()


def test_renewing_keeps_a_lease_past_its_first_expiry() -> None:
    a, b = JobStore(), JobStore()
    try:
        (job,) = _jobs(a, 1)
        la = leases.Leases(a, "replica-a", ttl_s=1.5)
        lb = leases.Leases(b, "replica-b", ttl_s=1.5)
        assert la.refresh(force=True) == {job}
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:  # heartbeats across two and a half lifetimes
            assert la.refresh(force=True) == {job}
            assert lb.refresh(force=True) == set()
            threading.Event().wait(0.1)
        a.update_job(job, recoveries=1)
    finally:
        a.close()
        b.close()


def test_an_ended_job_gives_its_lease_back_and_the_cli_is_never_fenced() -> None:
    a, cli = JobStore(), JobStore()
    try:
        j1, j2 = _jobs(a, 2)
        la = leases.Leases(a, "replica-a")
        la.refresh(force=True)
        cli.request_cancel(j1)  # a user's write: no fence on the CLI's store
        assert a.job(j1).cancel_requested
        a.transition(j2, S.CANCELLED, "cancelled")
        assert a.leases_by_holder() == {"replica-a": 1}
        assert la.refresh(force=True) == {j1}
        la.close()
        assert a.leases_by_holder() == {} and leases.replicas(a) == []
    finally:
        a.close()
        cli.close()


def test_a_controller_stopped_cleanly_gives_its_leases_back() -> None:
    """Controller.run hands the leases over when it stops (before its store closes), so
    the other replicas take the jobs at once instead of after the expiry."""
    import asyncio

    from launcher.jobs.controller import Controller
    from tests.jobs.fake_ops import Behaviour, FakeOps, Place
    from tests.jobs.harness import fast_config, loader_for

    store = JobStore()
    try:
        ids = _jobs(store, 2)
        ops = FakeOps([Place("local", "local", "local", 0.0)],
                      behaviours=lambda n: Behaviour(duration_s=60))

        async def run_then_stop() -> None:
            ctrl = Controller(ops, loader_for(1), config=fast_config())
            ctrl.leases = leases.Leases(ctrl.store, "replica-a")
            stop = asyncio.Event()
            task = asyncio.ensure_future(ctrl.run(stop))
            deadline = time.monotonic() + 20
            while store.leases_by_holder() != {"replica-a": 2}:
                assert time.monotonic() < deadline, "the controller never leased its jobs"
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, 30)

        asyncio.run(run_then_stop())
        assert store.leases_by_holder() == {}
        assert leases.replicas(store) == []
        assert all(not store.job(i).status.is_terminal for i in ids)
    finally:
        store.close()


def test_claims_come_between_renewals(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backlog (a dead replica's jobs) is claimed batch after batch every CLAIM_S, not
    once per renewal interval, so a takeover of many jobs ends soon after the expiry."""
    monkeypatch.setattr(leases, "CLAIM_BATCH", 3)
    monkeypatch.setattr(leases, "CLAIM_S", 0.2)
    a = JobStore()
    try:
        ids = _jobs(a, 7)
        la = leases.Leases(a, "replica-a", ttl_s=8.0)  # renewals every 2 s
        assert len(la.refresh(force=True)) == 3
        assert len(la.refresh()) == 3  # not due yet
        threading.Event().wait(0.25)
        assert len(la.refresh()) == 6
        threading.Event().wait(0.25)
        assert la.refresh() == set(ids)
    finally:
        a.close()


def test_a_replica_claims_its_fair_share_and_a_silent_ones_share_falls_to_it() -> None:
    """With the default batch (larger than the jobs) the first replica to claim takes only
    half of 10 jobs while another is heard from; once that one has been silent for a
    lease lifetime (killed) and its leases lapse, the survivor takes the rest."""
    a, b = JobStore(), JobStore()
    try:
        ids = _jobs(a, 10)
        la, lb = leases.Leases(a, "replica-a", ttl_s=8.0), leases.Leases(b, "replica-b")
        assert len(la.refresh(force=True)) == 5
        assert len(lb.refresh(force=True)) == 5
        assert len(la.refresh(force=True)) == 5  # B holds its share: nothing more for A
        _expire(a, "replica-b")
        with a.write() as c:  # B last heard from a lease lifetime ago
            c.execute("UPDATE server_replicas SET heartbeat_at = 0 WHERE id = 'replica-b'")
        assert la.refresh(force=True) == set(ids)
    finally:
        a.close()
        b.close()


def test_the_startup_sweep_leaves_alone_what_another_replica_launches_meanwhile() -> None:
    """A replica starting while another submits and launches: a job and attempt written
    between the sweep's reads are neither a crash (KeyError) nor torn down."""
    import asyncio

    from launcher.jobs.controller import Controller
    from tests.jobs.fake_ops import FakeOps, Place
    from tests.jobs.harness import fast_config, loader_for

    other = JobStore()
    try:
        (old,) = _jobs(other, 1)
        other.add_attempt(old, 1, f"mj-{old}-1", "initial")

        async def sweep() -> int:
            ctrl = Controller(FakeOps([Place("local", "local", "local", 0.0)]), loader_for(1),
                              config=fast_config())
            reads = ctrl.store.all_attempts

            def all_attempts_then_another_launch() -> list[Any]:
                got = reads()
                (new,) = _jobs(other, 1)  # submitted and launched by the other replica
                other.add_attempt(new, 1, f"mj-{new}-1", "initial")
                return got

            ctrl.store.all_attempts = all_attempts_then_another_launch  # type: ignore[method-assign]
            ctrl._startup_sweep()
            n = len(ctrl.ctx.background)
            ctrl.ctx.shutdown(crashed=False)
            return n

        assert asyncio.run(sweep()) == 0  # nothing finalized: both attempts are current
    finally:
        other.close()


def test_replicas_started_together_split_the_jobs_already_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first claim waits STARTUP_CLAIM_DELAY_S: a replica starting a moment after
    another is heard from before either claims, and each takes half."""
    monkeypatch.setattr(leases, "STARTUP_CLAIM_DELAY_S", 0.5)
    a, b = JobStore(), JobStore()
    try:
        _jobs(a, 8)
        la = leases.Leases(a, "replica-a")
        assert la.refresh() == set()  # too soon: B may be starting too
        threading.Event().wait(0.2)
        lb = leases.Leases(b, "replica-b")
        threading.Event().wait(0.35)
        assert len(la.refresh()) == 4
        threading.Event().wait(0.2)
        assert len(lb.refresh()) == 4
    finally:
        a.close()
        b.close()
