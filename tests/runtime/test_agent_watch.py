"""The head agent's health watch (launcher/runtime/agent_watch.py), run for real: an
installed agent on a 3-node local 'cluster' under tmp (tests/runtime/test_agent.py's
Agent), the fake nvidia-smi (tests/fakes/bin) first on PATH and each node's kernel log
at ~/kern.log through LAUNCHER_HEALTH_KMSG_PATH, the documented override. The watch
runs the same probe (health_checks.py --watch) as on a cloud node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.runtime import agent_watch
from tests.fakes import fake_path, write_config
from tests.runtime.test_agent import Agent, _wait_for, _wait_log

XID_79 = "[ 9123.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus."
XID_13 = "[ 9123.500000] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception"
FAST = {"watch_seconds": 0.2, "hang_minutes": 0, "straggler_pct": 20, "history_seconds": 0.5}
# waits for the test's go file, printing nothing (a quiet, healthy job)
QUIET = 'echo up; while [ ! -e "$GO" ]; do sleep 0.05; done'


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path / "cluster")
    a.env.update(PATH=fake_path(), LAUNCHER_HEALTH_KMSG_PATH="~/kern.log")
    a.env.pop("LAUNCHER_FAKE_GPU_CONFIG", None)
    for node in a.nodes:
        (node / "kern.log").write_text("[    0.000000] Linux version 5.15.0\n" + XID_13 + "\n")
        write_config(node / ".fake-gpus.json", count=2)
    a.setup()
    try:
        yield a
    finally:
        a.close()


def _submit(agent: Agent, run: str, num_nodes: int = 3, **health: object) -> int:
    go = agent.root / "go"
    return agent.submit(run, num_nodes=num_nodes, envs={"GO": str(go)},
                        health={**FAST, **health})


def _sampled(agent: Agent, job: int) -> None:
    """Until the watch has taken in a sample of every node (its baseline): a metrics row
    with samples for each rank (rows are written every 0.5 s here)."""
    def judged() -> bool:
        rows = agent_watch.read_history(str(agent.home / "logs" / str(job)))
        return {r["rank"] for r in rows if r["samples"]} == {0, 1, 2}
    _wait_for(judged, what="the first samples")


def _health_events(agent: Agent, job: int) -> list[tuple[str, str]]:
    return [(e["kind"], e["detail"]) for e in agent.events()
            if e["job_id"] == job and e["kind"].startswith("health")]


def test_an_xid_79_mid_run_is_an_event_with_its_line_and_stop_sigterms_the_job(
        agent: Agent) -> None:
    job = _submit(agent, QUIET, stop=True)
    _wait_log(agent, job, "up", 3)
    _sampled(agent, job)  # the first samples: the XID 13 from before the job is no finding
    with open(agent.nodes[1] / "kern.log", "a") as f:
        f.write(XID_79 + "\n")
    t0 = time.time()
    rec = agent.wait_status(job, timeout=30)
    assert rec["status"] == "FAILED" and rec["failed_rank"] == 1
    assert rec["reason"] == "health: node 1: Xid 79"
    assert rec["ended_at"] - t0 < 10
    h = rec["health"]
    assert h["kind"] == "xid" and h["severity"] == "fail" and h["rank"] == 1 and h["stop"]
    assert h["evidence"] == [XID_79]
    events = _health_events(agent, job)
    assert ("health-fail", f"node 1: Xid 79 (GPU has fallen off the bus) | {XID_79}") in events
    assert any(k == "health_stop" for k, _ in events)
    assert not any("Xid 13" in d for _, d in events)  # logged before the job: no finding
    view = agent.doc("health")
    assert view["job_id"] == job and view["degraded"]["rank"] == 1
    assert agent.doc("health", "--clear")["degraded"] is None


def test_warn_records_the_finding_and_the_job_goes_on(agent: Agent) -> None:
    job = _submit(agent, QUIET)  # stop defaults to false (a plain cluster's on_failure unset)
    _wait_log(agent, job, "up", 3)
    _sampled(agent, job)
    with open(agent.nodes[2] / "kern.log", "a") as f:
        f.write(XID_79 + "\n")
    _wait_for(lambda: any(k == "health-fail" for k, _ in _health_events(agent, job)),
              what="the XID event")
    assert agent.job(job)["status"] == "RUNNING"
    (agent.root / "go").touch()
    rec = agent.wait_status(job)
    assert rec["status"] == "SUCCEEDED"
    assert rec["health"]["rank"] == 2 and not rec["health"]["stop"]
    assert not any(k == "health_stop" for k, _ in _health_events(agent, job))
    assert agent.doc("health")["degraded"]["summary"].startswith("Xid 79")


def test_ecc_increase_and_thermal_throttling_are_findings_with_their_counters(
        agent: Agent) -> None:
    job = _submit(agent, QUIET)
    _wait_log(agent, job, "up", 3)
    _sampled(agent, job)
    write_config(agent.nodes[0] / ".fake-gpus.json", count=2, ecc_uncorrected={"1": 2},
                 throttle={"0": "0x0000000000000040"})
    _wait_for(lambda: len(_health_events(agent, job)) >= 2, what="two events")
    events = dict((d.split(":")[1].strip().split(" ")[0], (k, d))
                  for k, d in _health_events(agent, job))
    assert events["uncorrected"] == (
        "health-fail", "node 0: uncorrected ECC errors on GPU 1 (0 -> 2) | GPU 1: "
        "ecc.errors.uncorrected.volatile.total 0 -> 2")
    kind, detail = events["GPU"]
    assert kind == "health-warn" and detail.startswith("node 0: GPU 0 throttled: hw thermal")
    (agent.root / "go").touch()
    agent.wait_status(job)


def test_a_straggler_rank_30_percent_behind_is_flagged_once(agent: Agent) -> None:
    run = ('if [ "$LAUNCHER_NODE_RANK" = 2 ]; then P=0.42; else P=0.6; fi; '
           'echo "step LAUNCHER_PROGRESS=$P"; while [ ! -e "$GO" ]; do sleep 0.05; done')
    job = _submit(agent, run)
    _wait_for(lambda: any(k == "health-warn" for k, _ in _health_events(agent, job)),
              what="the straggler event")
    time.sleep(0.6)
    (warn,) = [d for k, d in _health_events(agent, job) if k == "health-warn"]
    assert warn.startswith("node 2: straggler: progress 0.42 is 30% behind the other ranks' 0.6")
    assert "rank 2: LAUNCHER_PROGRESS=0.42" in warn
    (agent.root / "go").touch()
    assert agent.wait_status(job)["status"] == "SUCCEEDED"  # a straggler only warns


def test_a_hang_is_detected_but_a_busy_gpu_is_no_hang(agent: Agent) -> None:
    for node in agent.nodes:
        write_config(node / ".fake-gpus.json", count=2, util={"0": 97})
    job = _submit(agent, QUIET, hang_minutes=0.05)  # 3 s
    _wait_log(agent, job, "up", 3)
    _sampled(agent, job)
    time.sleep(4.0)
    assert not any("hang" in d for _, d in _health_events(agent, job))  # the GPUs are busy
    for node in agent.nodes:
        write_config(node / ".fake-gpus.json", count=2)  # ~0% from now on
    _wait_for(lambda: any("hang" in d for _, d in _health_events(agent, job)), what="hang")
    (hang,) = [(k, d) for k, d in _health_events(agent, job) if "hang" in d]
    assert hang[0] == "health-fail"
    assert hang[1].startswith("hang: no output from any rank and no busy GPU for ")
    assert "node 1: util 0.0%, 0.0%" in hang[1]
    (agent.root / "go").touch()
    agent.wait_status(job)


def test_per_node_metrics_are_kept_for_the_job(agent: Agent) -> None:
    write_config(agent.nodes[1] / ".fake-gpus.json", count=2, util={"0": 80, "1": 40})
    job = _submit(agent, QUIET)
    _wait_log(agent, job, "up", 3)
    _sampled(agent, job)
    time.sleep(1.0)
    (agent.root / "go").touch()
    agent.wait_status(job)
    rows = agent.doc("health", "--job", str(job), "--history")["history"]
    by_rank = {r["rank"]: r for r in rows if r["samples"]}
    assert set(by_rank) == {0, 1, 2}
    assert by_rank[1]["util"] == 60.0 and by_rank[1]["util_min"] == 40.0
    assert by_rank[1]["gpus"] == 2 and by_rank[0]["util"] == 0.0
    assert by_rank[1]["power"] == 70.5 and by_rank[1]["temp"] == 34.0


def test_the_history_file_stays_bounded_by_thinning_windows(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_watch, "MAX_HISTORY_ROWS", 20)
    from launcher.runtime.agent_spec import WorkerAccess

    workers = [WorkerAccess(r, f"10.0.0.{r}", home=str(tmp_path)) for r in range(2)]
    clock = [0.0]
    w = agent_watch.HealthWatch(str(tmp_path), dict(FAST, stop=False), workers, "kh",
                                "health_checks.py", {}, now=lambda: clock[0])
    for _ in range(30):
        w._write_rows()
        assert w.rows <= 20 + 2
    rows = [json.loads(ln) for ln in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert len(rows) == w.rows <= 22
    assert w.history_s > 0.5  # the grain grew instead of the file
    assert {r["rank"] for r in rows} == {0, 1}


def test_bad_health_settings_are_refused_at_submit(agent: Agent) -> None:
    res = agent.run("submit", stdin=json.dumps({"run": "true", "health": {"watch_seconds": -1}}),
                    check=False)
    assert res.returncode != 0
    assert "health.watch_seconds must be a number >= 0" in res.stdout
