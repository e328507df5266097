"""The DEADLINE strategy end to end on the real local cloud (issue 13): the controller (in
this process, on the real ClusterOps: provisioning, the head-node agent, setup, gang runs,
teardown) runs a deadline job through spot, a preemption (`LocalCloud.preempt`), waiting,
on-demand when the slack runs out, back to spot while on-demand runs, a second preemption,
and on to the end, with spot launches refused while the availability sequence says 0
(`launcher local spot-capacity off`). Its decisions equal `simulate`'s on the same
sequence; the deadline clock is moved by the test tick by tick (see deadline_clock.py), so
real launch times do not enter the decisions."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from launcher.api import jobs as api
from launcher.clouds.local import LocalCloud, local_root, set_spot_capacity
from launcher.jobs.cluster_ops import RealClusterOps
from launcher.jobs.controller import Controller
from launcher.jobs.daemon import load_task
from launcher.jobs.store import AttemptPhase, JobStore
from launcher.spot.policy import policy_by_name
from launcher.spot.simulate import decisions_for_events
from tests.jobs.deadline_clock import ManualClock
from tests.jobs.harness import fast_config, wait_for
from tests.jobs.test_controller_deadline import (
    OVERHEAD,
    TICK,
    TRACE,
    WORK,
    compress,
    controller_decisions,
    events_of,
)


def _spot_clusters(store: JobStore, job_id: int) -> list[str]:
    return [a.cluster_name for a in store.attempts(job_id) if a.market == "spot"
            and a.phase == AttemptPhase.RUNNING and a.outcome is None]


def test_deadline_job_on_the_local_cloud_decides_like_simulate(tmp_path: Path,
                                                                launcher_home: Path) -> None:
    flag = tmp_path / "work-done"
    task = tmp_path / "deadline.yaml"
    task.write_text(
        "name: deadline-local\n"
        "resources:\n"
        "  infra: local\n"
        "  use_spot: true\n"
        "  job_recovery:\n"
        "    strategy: deadline\n"
        f"    deadline: {int(20 * TICK)}s\n"
        f"    duration: {int(WORK * TICK)}s\n"
        f"    restart_overhead: {int(OVERHEAD * TICK)}s\n"
        f"run: while [ ! -f {flag} ]; do sleep 0.05; done; echo finished\n")
    submitted = api.jobs_launch(str(task), start_controller=False, check=False)
    store = JobStore()
    job = store.job(submitted.id)
    assert job.deadline is not None and job.strategy == "DEADLINE"
    deadline_s = job.deadline.deadline_at - job.submitted_at
    expected = decisions_for_events(
        policy_by_name("launcher"), events_of(TRACE), tick_s=TICK, work_s=WORK * TICK,
        deadline_s=deadline_s, restart_overhead_s=OVERHEAD * TICK, horizon_s=len(TRACE) * TICK)
    last_tick = [d for d in expected if d.reason == "finished"][0].tick
    want = compress([(d.tick, str(d.mode)) for d in expected if d.reason != "finished"])
    assert [m for _t, m in want] == ["spot", "idle", "on_demand", "spot", "on_demand"]

    clock = ManualClock(job.submitted_at)
    ctrl = Controller(RealClusterOps(), load_task,  # type: ignore[arg-type]
                      config=fast_config(deadline_clock=clock, deadline_tick_s=TICK,
                                         poll_min_s=0.05, poll_max_s=0.1))
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    errors: list[BaseException] = []

    def main() -> None:
        try:
            loop.run_until_complete(ctrl.run(stop))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        for k in range(last_tick + 1):
            up = bool(TRACE[k])

            def act(up: bool = up) -> None:
                set_spot_capacity(up)
                if not up:
                    for name in _spot_clusters(store, job.id):
                        LocalCloud().preempt(name)

            clock.advance_to(job.submitted_at + k * TICK, act)
            clock.wait_settled(job.id, k, timeout=60.0, done=lambda: bool(errors))
            assert not errors
        assert controller_decisions(store, job.id) == want
        flag.write_text("done\n")  # the job's own work is done: it exits 0
        wait_for(lambda: store.job(job.id).status.is_terminal, 60.0, "the job to end")
        final = store.job(job.id)
        attempts = store.attempts(job.id)
        wait_for(lambda: all(a.torn_down_at is not None for a in store.attempts(job.id)), 30.0,
                 "every attempt's cluster down")
        leftovers = sorted(p.name for p in local_root().iterdir() if p.is_dir())
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        for name in sorted(p.name for p in local_root().iterdir() if p.is_dir()):
            LocalCloud().terminate(name)
    assert final.status.value == "SUCCEEDED"
    ran = [(a.market, a.outcome) for a in attempts if a.running_at is not None]
    assert ran == [("spot", "PREEMPTED"), ("on_demand", "SWITCHED"), ("spot", "PREEMPTED"),
                   ("on_demand", "SUCCEEDED")]
    assert [a.use_spot for a in attempts if a.running_at is not None] == [True, False, True,
                                                                          False]
    assert leftovers == []  # no cluster left behind by any transition
