"""The DEADLINE strategy in the live controller (in-memory cloud, hand-driven clock).

THE key test (issue 13): the live controller and `launcher.spot.simulate` decide the same on
the same spot availability sequence. The controller runs against FakeOps: spot launches are
refused while the sequence says 0, a running spot gang is preempted when it goes to 0; the
controller's deadline clock is moved tick by tick by the test (ManualClock), which waits
until the controller has acted on each tick, so no real-time jitter enters the decisions.
"""

from __future__ import annotations

import time

import pytest

from launcher.clouds.base import NodeState
from launcher.jobs import deadline_store as dl
from launcher.jobs.deadline_store import DeadlineSpec
from launcher.jobs.store import JobRow, JobStore
from launcher.spot.policy import Mode, policy_by_name
from launcher.spot.simulate import SpotEvent, decisions_for_events
from tests.jobs.deadline_clock import ManualClock
from tests.jobs.fake_ops import Behaviour, FakeOps, Place
from tests.jobs.harness import Running, wait_for

TICK = 60.0


def submit_deadline(store: JobStore, *, work_ticks: float, deadline_ticks: float,
                    overhead_ticks: float, policy: str = "launcher") -> JobRow:
    job = store.add_job(name="dl", task_yaml="run: true\n", task_source=None,
                        strategy="DEADLINE", max_restarts_on_errors=0, recover_on_exit_codes=())
    spec = DeadlineSpec(job.submitted_at + deadline_ticks * TICK, work_ticks * TICK,
                        overhead_ticks * TICK, "wall", policy)
    with store._tx() as c:  # the row as jobs_launch writes it (deadline known at submission)
        c.execute("UPDATE managed_jobs SET deadline_at = ?, work_s = ?, restart_overhead_s = ?, "
                  "progress = ?, policy = ? WHERE id = ?",
                  (spec.deadline_at, spec.work_s, spec.restart_overhead_s, spec.progress,
                   spec.policy, job.id))
    return store.job(job.id)


def events_of(avail: list[int]) -> list[SpotEvent]:
    out, prev = [], None
    for k, a in enumerate(avail):
        if a != prev:
            out.append(SpotEvent(k * TICK, bool(a)))
            prev = a
    return out


def compress(pairs: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for tick, mode in pairs:
        if not out or out[-1][1] != mode:
            out.append((tick, mode))
    return out


def controller_decisions(store: JobStore, job_id: int) -> list[tuple[int, str]]:
    """The controller's effective decision per tick (the last one taken at that tick)."""
    per_tick: dict[int, str] = {}
    for r in dl.log_rows(store, job_id):
        if r.kind == "decision" and r.tick is not None and r.mode is not None:
            per_tick[r.tick] = r.mode
    return compress(sorted(per_tick.items()))


def live_spot(ops: FakeOps) -> list[str]:
    with ops.lock:
        return [n for n, c in ops.clusters.items() if c.market == "spot"
                and all(s == NodeState.RUNNING for s in c.nodes.values())]


def drive(ops: FakeOps, ctl: Running, clock: ManualClock, store: JobStore, job: JobRow,
          avail: list[int], until_tick: int, node: int | None = None) -> None:
    """Move the clock tick by tick through `avail` (preempting spot where it goes to 0: every
    node, or only node `node` of the gang), waiting at each tick until the controller has
    acted on it."""
    for k in range(until_tick + 1):
        up = bool(avail[k])

        def act(up: bool = up) -> None:
            ops.spot_capacity = up
            if not up:
                for name in live_spot(ops):
                    ops.preempt(name, node)

        clock.advance_to(job.submitted_at + k * TICK, act)
        clock.wait_settled(job.id, k, timeout=15.0)
        assert not ctl.crashed and ctl.error is None


def finish(ops: FakeOps, store: JobStore, job_id: int) -> JobRow:
    """The job's own work is done: its run exits 0 on the gang that runs it."""
    with ops.lock:
        for c in ops.clusters.values():
            c.behaviour = Behaviour(duration_s=0.0)
    wait_for(lambda: store.job(job_id).status.is_terminal, 15.0, "the job to end")
    return store.job(job_id)


# Spot up, lost long enough for the slack to run out (the launcher policy: spot, preempted,
# idle, on-demand at its reserve, back to spot while on-demand runs, preempted again, on-demand
# to the end).
TRACE = [1] * 4 + [0] * 8 + [1] * 4 + [0] * 2 + [1] * 20
WORK, DEADLINE, OVERHEAD = 12.0, 20.0, 0.25  # in ticks


@pytest.mark.parametrize("policy", ["launcher", "greedy", "uniform_progress"])
def test_live_controller_and_simulate_decide_the_same(launcher_home, policy: str) -> None:
    work, deadline, overhead = WORK, DEADLINE, OVERHEAD
    expected = decisions_for_events(
        policy_by_name(policy), events_of(TRACE), tick_s=TICK, work_s=work * TICK,
        deadline_s=deadline * TICK, restart_overhead_s=overhead * TICK,
        horizon_s=len(TRACE) * TICK)
    finished = [d for d in expected if d.reason == "finished"]
    assert finished, "the simulated job must finish within the trace"
    last_tick = finished[0].tick
    want = compress([(d.tick, str(d.mode)) for d in expected if d.reason != "finished"])
    assert {m for _t, m in want} >= {Mode.SPOT, Mode.ON_DEMAND, Mode.IDLE}
    if policy == "launcher":  # every transition: spot, idle, on-demand, back to spot, ...
        assert [m for _t, m in want] == ["spot", "idle", "on_demand", "spot", "on_demand"]

    store = JobStore()
    job = submit_deadline(store, work_ticks=work, deadline_ticks=deadline,
                          overhead_ticks=overhead, policy=policy)
    ops = FakeOps([Place("fake", "r1", "z1")], lambda n: Behaviour(duration_s=1e9))
    clock = ManualClock(job.submitted_at)
    ctl = Running(ops, deadline_clock=clock, deadline_tick_s=TICK)
    try:
        drive(ops, ctl, clock, store, job, TRACE, last_tick)
        got = controller_decisions(store, job.id)
        assert got == want
        end = finish(ops, store, job.id)
    finally:
        ctl.stop()
    assert end.status.value == "SUCCEEDED"
    assert ops.live() == []
    assert ops.max_live <= 2  # the on-demand gang and the spot gang replacing it, no more


class Restarting:
    """A controller that crashes at `crash_at` (kill -9: its in-flight teardowns die with
    it) and is restarted on the same DB, cloud and clock, once."""

    def __init__(self, ops: FakeOps, clock: ManualClock, crash_at: str | None) -> None:
        self.ops, self.clock = ops, clock
        self.ctl = Running(ops, crash_at=crash_at, deadline_clock=clock, deadline_tick_s=TICK)
        self.restarts = 0

    def check(self) -> bool:
        """Restart a crashed controller; False (keep waiting)."""
        if self.ctl.crashed:
            self.ctl.wait_dead()
            self.ops.teardown_generation += 1
            self.restarts += 1
            self.ctl = Running(self.ops, deadline_clock=self.clock, deadline_tick_s=TICK)
        assert self.ctl.error is None
        return False

    def stop(self) -> None:
        self.ctl.stop()


def drive_restarting(ops: FakeOps, r: Restarting, clock: ManualClock, job: JobRow,
                     avail: list[int], until_tick: int) -> None:
    for k in range(until_tick + 1):
        up = bool(avail[k])

        def act(up: bool = up) -> None:
            ops.spot_capacity = up
            if not up:
                for name in live_spot(ops):
                    ops.preempt(name)

        clock.advance_to(job.submitted_at + k * TICK, act)
        clock.wait_settled(job.id, k, timeout=15.0, done=r.check)


def test_multi_node_gang_is_lost_with_one_node(launcher_home) -> None:
    """A 3-node gang whose one node is lost is a lost gang for the policy (no in-place
    replacement here): the same decisions as the single-node sequence."""
    expected = decisions_for_events(
        policy_by_name("launcher"), events_of(TRACE), tick_s=TICK, work_s=WORK * TICK,
        deadline_s=DEADLINE * TICK, restart_overhead_s=OVERHEAD * TICK,
        horizon_s=len(TRACE) * TICK)
    last_tick = [d for d in expected if d.reason == "finished"][0].tick
    want = compress([(d.tick, str(d.mode)) for d in expected if d.reason != "finished"])
    store = JobStore()
    job = submit_deadline(store, work_ticks=WORK, deadline_ticks=DEADLINE,
                          overhead_ticks=OVERHEAD)
    ops = FakeOps([Place("fake", "r1", "z1")], lambda n: Behaviour(duration_s=1e9))
    clock = ManualClock(job.submitted_at)
    ctl = Running(ops, deadline_clock=clock, deadline_tick_s=TICK, num_nodes=3)
    try:
        drive(ops, ctl, clock, store, job, TRACE, last_tick, node=1)
        assert controller_decisions(store, job.id) == want
        preempted = [a for a in store.attempts(job.id) if a.outcome == "PREEMPTED"]
        assert len(preempted) == 2 and all(a.num_nodes == 3 for a in preempted)
        finish(ops, store, job.id)
    finally:
        ctl.stop()
    assert ops.live() == []


# Kill -9 in the middle of every deadline transition of the launcher policy's run on TRACE
# (n-th time a point is reached): deciding (first decision, the preemption's, the one that
# goes on-demand, the switch back to spot), each step of the ON_DEMAND -> SPOT switch, the
# spot launches and the preemption.
KILL_POINTS = [
    "deadline_decided:1", "deadline_decided:5", "deadline_decided:11", "deadline_decided:13",
    "switch_intent_recorded", "switch_decided", "switch_old_down", "switch_attempt_recorded",
    "attempt_recorded:1", "attempt_recorded:3", "provisioned:1", "running_recorded:2",
    "preemption_recorded:1", "preemption_recorded:2",
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill9_mid_transition_leaves_no_extra_cluster_and_decides_the_same(
        launcher_home, point: str) -> None:
    policy = "launcher"
    expected = decisions_for_events(
        policy_by_name(policy), events_of(TRACE), tick_s=TICK, work_s=WORK * TICK,
        deadline_s=DEADLINE * TICK, restart_overhead_s=OVERHEAD * TICK,
        horizon_s=len(TRACE) * TICK)
    last_tick = [d for d in expected if d.reason == "finished"][0].tick
    want = compress([(d.tick, str(d.mode)) for d in expected if d.reason != "finished"])
    store = JobStore()
    job = submit_deadline(store, work_ticks=WORK, deadline_ticks=DEADLINE,
                          overhead_ticks=OVERHEAD, policy=policy)
    ops = FakeOps([Place("fake", "r1", "z1")], lambda n: Behaviour(duration_s=1e9))
    clock = ManualClock(job.submitted_at)
    r = Restarting(ops, clock, point)
    try:
        drive_restarting(ops, r, clock, job, TRACE, last_tick)
        assert r.restarts == 1, f"{point} was never reached"
        assert controller_decisions(store, job.id) == want
        with ops.lock:
            for c in ops.clusters.values():
                c.behaviour = Behaviour(duration_s=0.0)
        wait_for(lambda: (r.check() or store.job(job.id).status.is_terminal), 15.0, "the end")
        wait_for(lambda: ops.live() == [], 15.0, "every cluster down")
    finally:
        r.stop()
    assert store.job(job.id).status.value == "SUCCEEDED"
    assert ops.max_live <= 2  # never a third cluster: no duplicate gang
    assert all(a.torn_down_at is not None for a in store.attempts(job.id))


def test_real_time_no_spot_goes_on_demand_in_time_and_finishes_by_the_deadline(
        launcher_home) -> None:
    """The real clock (WallClock), scaled to seconds: spot never available, the policy
    waits while the slack allows, then runs on-demand and the job ends before its
    deadline. Only the order of events and the deadline are asserted, not durations."""
    store = JobStore()
    job = store.add_job(name="rt", task_yaml="run: true\n", task_source=None,
                        strategy="DEADLINE", max_restarts_on_errors=0, recover_on_exit_codes=(),
                        deadline=DeadlineSpec(time.time() + 5.0, 1.0, 0.5, "wall", "launcher"))
    ops = FakeOps([Place("fake", "r1", "z1")], lambda n: Behaviour(duration_s=1.0))
    ops.spot_capacity = False
    ctl = Running(ops, deadline_tick_s=0.1)
    try:
        wait_for(lambda: store.job(job.id).status.is_terminal, 20.0, "the job to end")
    finally:
        ctl.stop()
    end = store.job(job.id)
    assert end.status.value == "SUCCEEDED"
    assert end.deadline is not None and end.ended_at is not None
    assert end.ended_at <= end.deadline.deadline_at
    ran = [a for a in store.attempts(job.id) if a.running_at is not None]
    assert [a.market for a in ran] == ["on_demand"]
    refused = [a for a in store.attempts(job.id) if a.outcome == "NO_RESOURCE_RETRY"]
    assert refused and all(a.market == "spot" for a in refused)
    modes = [r.mode for r in dl.log_rows(store, job.id) if r.kind == "decision"]
    assert "idle" in modes and modes[-1] == "on_demand"  # waited first, then on-demand
    assert ops.live() == []


def test_job_ending_on_demand_during_the_switch_to_spot_keeps_its_result(launcher_home) -> None:
    """The on-demand run ends while the spot gang is being set up: the spot gang is not
    used (torn down), the job's own result stands."""
    expected = decisions_for_events(
        policy_by_name("launcher"), events_of(TRACE), tick_s=TICK, work_s=WORK * TICK,
        deadline_s=DEADLINE * TICK, restart_overhead_s=OVERHEAD * TICK,
        horizon_s=len(TRACE) * TICK)
    back_to_spot = [d.tick for d in expected if str(d.mode) == "spot"][1]  # the switch
    store = JobStore()
    job = submit_deadline(store, work_ticks=WORK, deadline_ticks=DEADLINE,
                          overhead_ticks=OVERHEAD)
    ops = FakeOps([Place("fake", "r1", "z1")], lambda n: Behaviour(duration_s=1e9))
    clock = ManualClock(job.submitted_at)
    ctl = Running(ops, deadline_clock=clock, deadline_tick_s=TICK)
    try:
        drive(ops, ctl, clock, store, job, TRACE, back_to_spot - 1)
        od = [a for a in store.attempts(job.id) if a.market == "on_demand" and a.outcome is None]
        assert len(od) == 1

        def od_ends(cluster: str) -> None:  # during the spot gang's setup
            with ops.lock:
                ops.clusters[od[0].cluster_name].behaviour = Behaviour(duration_s=0.0)

        ops.on_setup = od_ends
        assert TRACE[back_to_spot]

        def spot_back() -> None:
            ops.spot_capacity = True

        clock.advance_to(job.submitted_at + back_to_spot * TICK, spot_back)
        wait_for(lambda: store.job(job.id).status.is_terminal, 15.0, "the job to end")
        wait_for(lambda: ops.live() == [], 15.0, "every cluster down")
    finally:
        ctl.stop()
    assert store.job(job.id).status.value == "SUCCEEDED"
    last = store.attempts(job.id)[-1]
    assert last.attempt == od[0].attempt and last.outcome == "SUCCEEDED"
    assert last.switch_cluster is None
    assert [m for _c, m in ops.markets][-1] == "spot"  # the switch's gang was provisioned
    reasons = [r.reason for r in dl.log_rows(store, job.id) if r.kind == "decision"]
    assert "spot launch refused" not in reasons[-1]  # nothing was refused: no re-decision


def test_cancel_while_waiting_for_spot_ends_at_once(launcher_home) -> None:
    """A deadline job waiting for spot (IDLE until the next tick, 10 min away) is cancelled
    at once; nothing is left running."""
    store = JobStore()
    job = store.add_job(name="w", task_yaml="run: true\n", task_source=None,
                        strategy="DEADLINE", max_restarts_on_errors=0, recover_on_exit_codes=(),
                        deadline=DeadlineSpec(time.time() + 36000.0, 3600.0, 60.0))
    ops = FakeOps([Place("fake", "r1", "z1")], lambda n: Behaviour(duration_s=1e9))
    ops.spot_capacity = False
    ctl = Running(ops, deadline_tick_s=600.0)
    try:
        wait_for(lambda: any(r.mode == "idle" for r in dl.log_rows(store, job.id)
                             if r.kind == "decision"), 10.0, "the job to wait for spot")
        store.request_cancel(job.id)  # acted on long before the next tick (10 min away)
        wait_for(lambda: store.job(job.id).status.is_terminal, 10.0, "the cancel")
    finally:
        ctl.stop()
    assert store.job(job.id).status.value == "CANCELLED"
    assert ops.live() == []
