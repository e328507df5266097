"""kill -9 of the managed-jobs controller at each step of a Kubernetes launch and of a
recovery (an eviction): after a restart the job succeeds, one cluster never has two live
pod sets at once, and nothing is left in the fake after `down`.

Steps are API requests the controller sends (the fake's `trap`: the controller is
SIGKILLed when the request arrives, before the API server acts on it, or after it did
and before the answer is sent) and the controller's own crash points
(launcher/jobs/crash.py, `LAUNCHER_CONTROLLER_CRASH_AT`). Launch: the Secret, the
Service and the pod created (before/after), the watch of the starting gang; with a
volume, its PVC created (after); through Kueue, the watch while the gang waits gated
for an admission the fake withholds until the controller is dead. Recovery
(armed once the job runs, then the pod is evicted): the old gang's pods deleted, the
new Service and pod created. Only the controller sends these requests: the test
process plans (list nodes) before the controller starts and reads the fake directly.
By default the first step of each stage runs (all crash points, each launch flavour, one
recovery step); LAUNCHER_FULL_SWEEPS=1 runs every step (tests/sweeps.py).

No duplicate gang: instead of sampling, the fake's whole change history (every write,
in resourceVersion order) is replayed; at no point may more pods labelled with
launcher's clusters be live (not terminal, not being deleted) than the job's one node.
"""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import pytest

from launcher.api import jobs as api
from tests.cloud_e2e import NETNS_ONLY, down_all
from tests.k8s.conftest import K8sEnv
from tests.k8s.test_k8s_managed import _count, _job, _running_pod
from tests.sweeps import first_of_each
from tests.waiting import wait_until

pytestmark = NETNS_ONLY
_wait = functools.partial(wait_until, timeout=120.0, poll=0.1)

# (stage, route, skip, after): "launch" armed before the job is launched, "recovery"
# once it runs (then its pod is evicted); "crash:POINT" is a controller crash point
POINTS = [
    ("launch", "create secrets", 0, False),
    ("launch", "create services", 0, True),
    ("launch", "create pods", 0, False),
    ("launch", "create pods", 0, True),
    ("launch", "watch pods", 0, True),
    ("recovery", "deletecollection pods", 0, True),
    ("recovery", "create services", 0, False),
    ("recovery", "create pods", 0, True),
    ("launch+pvc", "create persistentvolumeclaims", 0, True),
    ("launch+kueue", "watch pods", 0, True),
    ("crash:provisioned", "", 0, False),
    ("crash:running_recorded", "", 0, False),
    ("crash:preemption_recorded", "", 0, False),
    ("crash:job_finished", "", 0, False),
    ("crash:teardown_done", "", 0, False),
]


def _id(p: tuple[str, str, int, bool]) -> str:
    return p[0] if p[0].startswith("crash") else f"{p[0]}-{p[1].replace(' ', '-')}-{'after' if p[3] else 'before'}"


def _kill_controller() -> None:
    info = api.jobs_controller_status()
    assert info.pid is not None
    os.kill(info.pid, signal.SIGKILL)


def peak_live_pods(history: list[tuple[int, str, str, dict]]) -> tuple[int, int]:
    """(most live launcher pods at once, the resourceVersion where) over the history."""
    live: set[str] = set()
    peak, where = 0, 0
    for rv, typ, res, obj in history:
        meta = obj["metadata"]
        if res != "pods" or "launcher.dev/cluster" not in (meta.get("labels") or {}):
            continue
        alive = typ != "DELETED" and "deletionTimestamp" not in meta \
            and (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        (live.add if alive else live.discard)(meta["uid"])
        if len(live) > peak:
            peak, where = len(live), rv
    return peak, where


def _evict(env: K8sEnv) -> None:
    pod = _running_pod(env)
    env.fakes["ctx-a"].store.pod_failed("default", pod["metadata"]["name"], reason="Evicted",
                                        message="The node was low on resource: memory.")
    env.bodies.kill([pod["metadata"]["uid"]])  # type: ignore[attr-defined]


# by default the first point of each stage (every crash point, each launch flavour, a
# recovery); every point with LAUNCHER_FULL_SWEEPS=1 (tests/sweeps.py)
_RUN = first_of_each(POINTS, lambda p: p[0])


@pytest.mark.parametrize(("stage", "route", "skip", "after"), _RUN, ids=[_id(p) for p in _RUN])
def test_controller_kill9_then_restart_finishes_with_one_gang_and_leaves_nothing(
        k8s_bodies: K8sEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        stage: str, route: str, skip: int, after: bool) -> None:
    env = k8s_bodies
    fake = env.fakes["ctx-a"]
    fake.store.start_delay = 0.3  # the starting gang is watched, not found running at once
    killed = []

    def kill() -> None:
        killed.append(route)
        _kill_controller()

    extra = ""
    if stage == "launch+pvc":
        extra = "volumes:\n  /mnt/scratch: {size: 1Gi}\n"
    if stage == "launch+kueue":
        env.config(contexts={"ctx-a": {"kueue": {"local_queue_name": "q"}}})
        fake.store.kueue_queues = {"q"}
        fake.store.kueue_withhold = True
    if stage.startswith("crash:"):
        monkeypatch.setenv("LAUNCHER_CONTROLLER_CRASH_AT", stage.split(":", 1)[1])
    elif stage.startswith("launch"):
        fake.trap(route, kill, skip=skip, after=after)
    recovery = stage in ("recovery", "crash:preemption_recorded")
    job_id, ckpt = _job(tmp_path, monkeypatch, 15, extra)
    try:
        if recovery:
            _wait(lambda: api.jobs_status(job_id).status == "RUNNING", what="running")
            _wait(lambda: _count(ckpt) >= 3, what="progress")
            if stage == "recovery":
                fake.trap(route, kill, skip=skip, after=after)
            _evict(env)
        _wait(lambda: not api.jobs_controller_status().running, what="the controller killed")
        if not stage.startswith("crash:"):
            assert killed == [route]
        if stage == "launch+kueue":  # the queue frees up: Kueue admits the waiting group
            assert all(p["spec"].get("schedulingGates") for p in fake.store.items("pods"))
            with fake.store.lock:
                fake.store.kueue_withhold = False
                fake.store.schedule()
        monkeypatch.delenv("LAUNCHER_CONTROLLER_CRASH_AT", raising=False)
        api.jobs_controller_start(wait_s=30)
        final = api.jobs_wait(job_id, timeout=180)
        detail = api.jobs_detail(job_id)
        assert final.status == "SUCCEEDED", ([e.reason for e in detail.events],
                                             api.controller_log_lines(job_id)[-20:])
        assert _count(ckpt) == 15
        if recovery:
            assert final.recoveries >= 1
    finally:
        api.jobs_controller_stop()
        down_all()
    peak, where = peak_live_pods(list(fake.store.history))
    assert peak == 1, f"{peak} live pods of the 1-node job at resourceVersion {where}"
    assert env.leftovers() == []
    if stage == "launch+pvc":  # made again by the restarted attempt or adopted, never twice at once
        live, peak = 0, 0
        for _, typ, res, _o in fake.store.history:
            if res == "persistentvolumeclaims":
                live += {"ADDED": 1, "DELETED": -1}.get(typ, 0)
                peak = max(peak, live)
        assert peak == 1, peak


def test_the_duplicate_check_sees_two_live_gangs() -> None:
    """peak_live_pods counts a second pod created before the first is gone, and not one
    created after the first failed or began deleting."""
    def pod(uid: str, **extra: object) -> dict:
        meta = {"uid": uid, "labels": {"launcher.dev/cluster": "c"}}
        meta.update(extra.pop("meta", {}))  # type: ignore[call-overload]
        return {"metadata": meta, "status": extra}

    seq = [(1, "ADDED", "pods", pod("a", phase="Running")),
           (2, "MODIFIED", "pods", pod("a", phase="Failed")),
           (3, "ADDED", "pods", pod("b", phase="Pending")),
           (4, "MODIFIED", "pods", pod("b", phase="Running", meta={"deletionTimestamp": "x"})),
           (5, "ADDED", "pods", pod("c", phase="Pending"))]
    assert peak_live_pods(seq) == (1, 1)
    assert peak_live_pods([*seq, (6, "ADDED", "pods", pod("d", phase="Pending"))]) == (2, 6)
