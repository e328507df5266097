"""The head-node agent, run for real: its files copied into a node home under tmp,
its daemon a real detached process, rank processes real bash process groups.

Nodes are "local" workers (directories on this machine, as on the local cloud).
The agent always runs with `python -S` here: no site-packages, so an import of
anything outside the standard library (launcher included) fails the tests.
The SSH worker path is covered by the pure ssh-command tests here and by the
netns cluster tests. Kill grace is shortened with LAUNCHER_AGENT_KILL_GRACE.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.runtime import agent as core
from launcher.runtime.agent_client import AGENT_FILES

RUNTIME_DIR = Path(core.__file__).parent
KILL_GRACE_S = 1.0


class Agent:
    """An installed agent on a 3-node local 'cluster' under tmp."""

    def __init__(self, root: Path, num_nodes: int = 3) -> None:
        self.root = root
        self.nodes = [root / f"node-{i}" for i in range(num_nodes)]
        for n in self.nodes:
            n.mkdir(parents=True)
        self.home = self.nodes[0] / ".launcher-agent"
        self.home.mkdir(mode=0o700)
        for name in AGENT_FILES:
            shutil.copy(RUNTIME_DIR / name, self.home / name)
        self.env = dict(os.environ, HOME=str(self.nodes[0]),
                        LAUNCHER_AGENT_KILL_GRACE=str(KILL_GRACE_S))
        self.ips = [f"127.0.0.{i + 1}" for i in range(num_nodes)]

    def nodes_config(self) -> dict[str, object]:
        return {
            "cluster": "tc",
            "workers": [
                {"rank": i, "ip": ip, "kind": "local", "home": str(n),
                 "cuda_visible_devices": str(i) if i == 1 else None}
                for i, (ip, n) in enumerate(zip(self.ips, self.nodes, strict=True))
            ],
            "cluster_info_json": json.dumps({"cluster_name": "tc", "cloud": "local",
                                             "region": "local", "zone": None}),
        }

    def proc(self, *args: str, stdin: str | None = None, **kw: object) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-S", str(self.home / "agent.py"), *args], env=self.env, cwd=self.nodes[0],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]

    def run(self, *args: str, stdin: str | None = None, check: bool = True,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [sys.executable, "-S", str(self.home / "agent.py"), *args], env=self.env,
            cwd=self.nodes[0], input=stdin, capture_output=True, text=True, timeout=timeout)
        if check:
            assert res.returncode == 0, (args, res.stdout, res.stderr)
        return res

    def doc(self, *args: str, stdin: str | None = None) -> dict:
        return json.loads(self.run(*args, stdin=stdin).stdout)

    def setup(self) -> dict:
        return self.doc("setup", stdin=json.dumps(self.nodes_config()))

    def submit(self, run: str, num_nodes: int = 3, **extra: object) -> int:
        spec = {"run": run, "num_nodes": num_nodes, **extra}
        return int(self.doc("submit", stdin=json.dumps(spec))["job_id"])

    def job(self, job_id: int) -> dict:
        return self.doc("job", str(job_id))

    def wait_status(self, job_id: int, statuses: tuple[str, ...] = core.TERMINAL,
                    timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            rec = self.job(job_id)
            if rec["status"] in statuses:
                return rec
            assert time.monotonic() < deadline, f"job {job_id} stuck in {rec}"
            time.sleep(0.05)

    def logs(self, job_id: int, *extra: str) -> tuple[list[str], dict]:
        """(output lines, final record) of `logs JOB [...]`."""
        out = self.run("logs", str(job_id), *extra, timeout=60).stdout.splitlines()
        assert out[-1].startswith(core.END_MARKER)
        return out[:-1], json.loads(out[-1][len(core.END_MARKER):])

    def daemon_pid(self) -> int:
        return int(json.loads((self.home / "daemon.json").read_text())["pid"])

    def events(self) -> list[dict]:
        return self.doc("events")["events"]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run("shutdown", "--cancel-jobs", check=False)
        with contextlib.suppress(Exception):
            if core.daemon_running(core.Paths(str(self.home))):
                os.kill(self.daemon_pid(), signal.SIGKILL)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path / "cluster")
    a.setup()
    try:
        yield a
    finally:
        a.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(_alive(int(p)) and os.getpgid(int(p)) == pgid
               for p in os.listdir("/proc") if p.isdigit() and _safe_pgid(int(p)) == pgid)


def _safe_pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _rank_pgids(agent: Agent, job_id: int) -> dict[int, int]:
    out = {}
    for ctl in (agent.home / "logs" / str(job_id)).glob("rank-*.ctl"):
        pgid = core.parse_control(ctl.read_text()).pgid
        if pgid:
            out[int(ctl.stem.split("-")[1])] = pgid
    return out


def _gate(path: Path) -> str:
    """Shell that blocks until the test creates `path` (jobs that are surely still running)."""
    return f"while [ ! -e {path} ]; do sleep 0.02; done"


def _wait_log(agent: Agent, job_id: int, text: str, count: int) -> None:
    """Until `count` ranks have printed `text` (e.g. their traps are installed)."""
    def seen() -> bool:
        logs = (agent.home / "logs" / str(job_id)).glob("rank-*.log")
        return sum(1 for f in logs if text in f.read_text()) >= count
    _wait_for(seen, what=f"{count} x {text!r}")


def _wait_for(cond: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# ---------------------------------------------------------------------------- gang + env


ENV_DUMP = (
    'for v in NODE_RANK NODE_IPS NUM_NODES NUM_GPUS_PER_NODE TASK_ID CLUSTER_INFO; do '
    '  l="LAUNCHER_$v"; s="SKYPILOT_$v"; '
    '  [ "${!l}" = "${!s}" ] || echo "MISMATCH $v"; done; '
    'echo "rank=$LAUNCHER_NODE_RANK n=$LAUNCHER_NUM_NODES gpus=$LAUNCHER_NUM_GPUS_PER_NODE '
    'job=$LAUNCHER_JOB_ID home=$HOME pwd=$PWD cvd=${CUDA_VISIBLE_DEVICES-unset}"; '
    'echo "ips=$(echo "$LAUNCHER_NODE_IPS" | paste -sd,)"; '
    'echo "task=$LAUNCHER_TASK_ID ckpt=$LAUNCHER_CHECKPOINT_DIR"; '
    'echo "info=$SKYPILOT_CLUSTER_INFO"; '
    'printf "weird=%s|\\n" "$WEIRD"'
)


def test_three_rank_gang_gets_rank_environment(agent: Agent) -> None:
    weird = "it's \"$HOME\" `x` \\ $(nope)\nsecond line"
    job = agent.submit(ENV_DUMP, envs={"WEIRD": weird, "LAUNCHER_NODE_RANK": "99"},
                       gpus_per_node=2, task_id="t-42", checkpoint_dir="/ckpt/x")
    lines, rec = agent.logs(job, "--follow")
    assert rec["status"] == "SUCCEEDED" and rec["exit_code"] == 0, (lines, rec)
    assert not [ln for ln in lines if "MISMATCH" in ln]
    for rank in range(3):
        mine = [ln.split(") ", 1)[1] for ln in lines if ln.startswith(f"(rank {rank}) ")]
        node = agent.nodes[rank]
        cvd = "1" if rank == 1 else "unset"
        # user envs cannot override the launcher's variables
        assert f"rank={rank} n=3 gpus=2 job={job} home={node} pwd={node} cvd={cvd}" in mine
        assert "ips=127.0.0.1,127.0.0.2,127.0.0.3" in mine
        assert "task=t-42 ckpt=/ckpt/x" in mine
        info = json.loads(next(m for m in mine if m.startswith("info="))[5:])
        assert info["cloud"] == "local" and info["cluster_name"] == "tc"
        # env values arrive byte-exact, whatever their quoting
        assert f"weird={weird.splitlines()[0]}" in mine and "second line|" in mine


def test_default_task_id_and_workdir(agent: Agent) -> None:
    for n in agent.nodes:
        (n / "wd").mkdir()
    job = agent.submit('echo "$PWD $LAUNCHER_TASK_ID"', num_nodes=2, workdir="~/wd")
    lines, rec = agent.logs(job, "--follow")
    assert rec["status"] == "SUCCEEDED"
    for rank in range(2):
        line = next(ln for ln in lines if ln.startswith(f"(rank {rank}) "))
        pwd, task_id = line.split(") ", 1)[1].split()
        assert pwd == str(agent.nodes[rank] / "wd")
        assert task_id.startswith("launcher-") and task_id.endswith(f"_tc_{job}")


def test_missing_workdir_fails_the_job_with_a_clear_line(agent: Agent) -> None:
    job = agent.submit("echo hi", num_nodes=1, workdir="~/nope")
    lines, rec = agent.logs(job, "--follow")
    assert rec["status"] == "FAILED" and rec["failed_rank"] == 0 and rec["exit_code"] == 1
    assert any("cannot enter workdir ~/nope" in ln for ln in lines)


# ---------------------------------------------------------------------------- queue


def test_queue_is_fifo_one_job_at_a_time(agent: Agent, tmp_path: Path) -> None:
    order = tmp_path / "order"
    ids = [agent.submit(f"echo start-{i} >> {order}; sleep 0.2; echo end-{i} >> {order}",
                        num_nodes=1) for i in range(3)]
    recs = [agent.wait_status(i) for i in ids]
    assert [r["status"] for r in recs] == ["SUCCEEDED"] * 3
    assert order.read_text().split() == ["start-0", "end-0", "start-1", "end-1", "start-2", "end-2"]
    for prev, nxt in zip(recs, recs[1:], strict=False):
        assert nxt["started_at"] >= prev["ended_at"]
    queue = agent.doc("queue")["jobs"]
    assert [j["id"] for j in queue] == ids


def test_submit_rejects_bad_specs(agent: Agent) -> None:
    too_big = agent.run("submit", stdin=json.dumps({"run": "true", "num_nodes": 4}), check=False)
    assert too_big.returncode == core.EXIT_INVALID
    assert "needs 4 nodes" in json.loads(too_big.stdout)["error"]
    bad = agent.run("submit", stdin="{not json", check=False)
    assert bad.returncode == core.EXIT_INVALID and json.loads(bad.stdout)["kind"] == "invalid"
    bad_env = agent.run("submit", stdin=json.dumps({"run": "true", "envs": {"A-B": "x"}}),
                        check=False)
    assert bad_env.returncode == core.EXIT_INVALID
    missing = agent.run("job", "999", check=False)
    assert missing.returncode == core.EXIT_NOT_FOUND
    assert json.loads(missing.stdout)["kind"] == "not_found"


# ---------------------------------------------------------------------------- cancel


def test_cancel_running_and_pending_jobs(agent: Agent) -> None:
    running = agent.submit("trap 'echo got-term; exit 5' TERM; echo up; sleep 30 & wait",
                           num_nodes=2)
    pending = agent.submit("echo never", num_nodes=1)
    _wait_log(agent, running, "up", 2)
    pgids = _rank_pgids(agent, running)

    res = agent.doc("cancel", str(pending))
    assert res["cancelled"] == [pending]
    rec = agent.job(pending)
    assert rec["status"] == "CANCELLED" and rec["started_at"] is None

    t0 = time.monotonic()
    res = agent.doc("cancel", str(running))
    assert res["cancelled"] == [running]
    assert time.monotonic() - t0 < KILL_GRACE_S + 5  # SIGTERM handled: no need for SIGKILL
    rec = agent.job(running)
    assert rec["status"] == "CANCELLED" and rec["reason"] == "cancelled"
    for pgid in pgids.values():
        assert not _group_alive(pgid)
    lines, _ = agent.logs(running)
    assert "(rank 0) got-term" in lines and "(rank 1) got-term" in lines
    again = agent.doc("cancel", str(running), "99")
    assert again["already_finished"] == [running] and again["not_found"] == [99]


def test_cancel_kills_ranks_that_ignore_sigterm(agent: Agent) -> None:
    job = agent.submit("trap '' TERM; echo up; sleep 30 & wait; sleep 30", num_nodes=1)
    _wait_log(agent, job, "up", 1)
    pgid = _rank_pgids(agent, job)[0]
    t0 = time.monotonic()
    assert agent.doc("cancel", "--all")["cancelled"] == [job]
    took = time.monotonic() - t0
    assert KILL_GRACE_S * 0.9 <= took < KILL_GRACE_S + 8
    assert not _group_alive(pgid)


# ---------------------------------------------------------------------------- gang failure


def test_gang_failure_stops_the_other_ranks(agent: Agent) -> None:
    ready = agent.root / "rank0-ready"
    run = (f'if [ "$LAUNCHER_NODE_RANK" = 1 ]; then {_gate(ready)}; echo dying; exit 3; fi; '
           f"echo waiting; touch {ready}; sleep 60")
    job = agent.submit(run)
    rec = agent.wait_status(job, timeout=15)
    assert rec["status"] == "FAILED"
    assert rec["failed_rank"] == 1 and rec["exit_code"] == 3
    assert rec["reason"] == "rank 1 exited with code 3"
    assert rec["ended_at"] - rec["started_at"] < 10  # not the 60 s the others would sleep
    for pgid in _rank_pgids(agent, job).values():
        assert not _group_alive(pgid)
    lines, _ = agent.logs(job)
    assert "(rank 1) dying" in lines and "(rank 0) waiting" in lines
    # the queue moves on after a failed job
    nxt = agent.submit("echo next", num_nodes=1)
    assert agent.wait_status(nxt)["status"] == "SUCCEEDED"


def test_rank_killed_from_outside_fails_the_job(agent: Agent) -> None:
    """What `launcher local preempt` without notice does: SIGKILL a node's processes."""
    job = agent.submit("echo up; sleep 60", num_nodes=3)
    _wait_log(agent, job, "up", 3)
    pid2 = next(r["pid"] for r in agent.doc("status")["running_ranks"] if r["rank"] == 2)
    os.killpg(pid2, signal.SIGKILL)  # the rank's wrapper ...
    os.killpg(_rank_pgids(agent, job)[2], signal.SIGKILL)  # ... and its run
    rec = agent.wait_status(job, timeout=10)
    assert rec["status"] == "FAILED" and rec["failed_rank"] == 2
    assert rec["reason"] == "rank 2: killed by SIGKILL" and rec["exit_code"] == 137


# ---------------------------------------------------------------------------- logs


def test_logs_follow_streams_and_waits_for_a_pending_job(agent: Agent) -> None:
    blocker = agent.submit("sleep 0.5", num_nodes=1)
    job = agent.submit('for i in 1 2 3; do echo "line $i"; sleep 0.1; done; printf tail-no-newline',
                       num_nodes=2)
    follower = agent.proc("logs", str(job), "--follow")
    out, err = follower.communicate(timeout=20)
    assert follower.returncode == 0, err
    lines = out.splitlines()
    assert lines[-1].startswith(core.END_MARKER)
    assert json.loads(lines[-1][len(core.END_MARKER):])["status"] == "SUCCEEDED"
    for rank in (0, 1):
        mine = [ln for ln in lines if ln.startswith(f"(rank {rank}) ")]
        assert mine == [f"(rank {rank}) line 1", f"(rank {rank}) line 2", f"(rank {rank}) line 3",
                        f"(rank {rank}) tail-no-newline"]
    only1, _ = agent.logs(job, "--rank", "1")
    assert only1 and all(ln.startswith("(rank 1) ") for ln in only1)
    assert agent.job(blocker)["status"] == "SUCCEEDED"


def test_logs_offsets_sends_only_new_complete_lines(agent: Agent) -> None:
    """`logs JOB --offsets R=B,...`: the incremental sync the managed-jobs controller
    runs on its poll - only complete lines past each rank's offset, and the offsets to
    ask from next (a partial last line waits for its newline)."""
    gate = agent.root / "gate"  # the partial line stays partial until the test says
    job = agent.submit(f'echo one; echo two; printf par; {_gate(gate)}; echo tial; echo three',
                       num_nodes=2)
    agent.wait_status(job, ("RUNNING",))
    deadline = time.monotonic() + 10
    lines: list[str] = []
    rec: dict = {}
    while time.monotonic() < deadline:
        lines, rec = agent.logs(job, "--offsets", "0=0")
        if len([ln for ln in lines if ln.startswith("(rank 0)")]) >= 2:
            break
        time.sleep(0.05)
    assert [ln for ln in lines if ln.startswith("(rank 0)")] == ["(rank 0) one", "(rank 0) two"]
    off = rec["log_offsets"]
    assert off["0"] == len(b"one\ntwo\n")
    gate.touch()
    agent.wait_status(job)
    spec = ",".join(f"{r}={b}" for r, b in off.items())
    more, rec2 = agent.logs(job, "--offsets", spec)
    assert [ln for ln in more if ln.startswith("(rank 0)")] == ["(rank 0) partial",
                                                               "(rank 0) three"]
    again, _ = agent.logs(job, "--offsets", ",".join(f"{r}={b}" for r, b in
                                                       rec2["log_offsets"].items()))
    assert again == []


def test_client_killed_mid_run_leaves_job_running_and_logs_complete(agent: Agent) -> None:
    job = agent.submit("for i in $(seq 1 15); do echo tick $i; sleep 0.1; done", num_nodes=2)
    follower = agent.proc("logs", str(job), "--follow")
    assert follower.stdout is not None
    first = follower.stdout.readline()
    assert first.startswith("(rank ")
    follower.kill()
    follower.wait()
    rec = agent.wait_status(job)
    assert rec["status"] == "SUCCEEDED"
    lines, _ = agent.logs(job)
    for rank in (0, 1):
        assert [ln for ln in lines if ln.startswith(f"(rank {rank})")] == [
            f"(rank {rank}) tick {i}" for i in range(1, 16)]


# ---------------------------------------------------------------------------- daemon


def test_setup_is_idempotent_and_checks_versions(agent: Agent) -> None:
    pid = agent.daemon_pid()
    again = agent.setup()
    assert again["daemon_pid"] == pid and again["daemon_running"]
    assert (agent.home / "nodes.json").stat().st_mode & 0o777 == 0o600
    assert (agent.home / "jobs.db").stat().st_mode & 0o777 == 0o600
    wrong = agent.run("setup", "--expect-version", "0" * 64, stdin="{}", check=False)
    assert wrong.returncode == core.EXIT_VERSION
    assert json.loads(wrong.stdout)["version"] == again["version"]
    # the fast entry point setup wrote runs the same agent
    fast = subprocess.run([str(agent.home / "agent"), "status"], capture_output=True, text=True,
                          env=agent.env, timeout=30)
    assert json.loads(fast.stdout)["daemon"]["pid"] == pid


def test_daemon_restart_keeps_queue_and_adopts_running_job(agent: Agent, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    running = agent.submit(f"echo a; {_gate(gate)}; echo b", num_nodes=2)
    queued = agent.submit("echo second", num_nodes=1)
    agent.wait_status(running, ("RUNNING",))
    os.kill(agent.daemon_pid(), signal.SIGKILL)
    _wait_for(lambda: not core.daemon_running(core.Paths(str(agent.home))), what="daemon death")
    assert agent.job(running)["status"] == "RUNNING"  # nobody finalised it
    late = agent.submit("echo third", num_nodes=1)  # a submit starts a daemon again
    assert core.daemon_running(core.Paths(str(agent.home)))
    gate.touch()
    recs = [agent.wait_status(j) for j in (running, queued, late)]
    assert [r["status"] for r in recs] == ["SUCCEEDED"] * 3
    lines, _ = agent.logs(running)
    assert sorted(lines) == ["(rank 0) a", "(rank 0) b", "(rank 1) a", "(rank 1) b"]
    assert any(e["kind"] == "job_adopted" and e["job_id"] == running for e in agent.events())


def test_log_follower_restarts_a_dead_daemon(agent: Agent, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job = agent.submit(f"echo a; {_gate(gate)}; echo b", num_nodes=1)
    _wait_log(agent, job, "a", 1)
    follower = agent.proc("logs", str(job), "--follow")
    os.kill(agent.daemon_pid(), signal.SIGKILL)
    _wait_for(lambda: not core.daemon_running(core.Paths(str(agent.home))), what="daemon death")
    gate.touch()
    out, _ = follower.communicate(timeout=30)  # the follower notices within 5 s
    assert out.splitlines()[:2] == ["(rank 0) a", "(rank 0) b"]
    assert json.loads(out.splitlines()[-1][len(core.END_MARKER):])["status"] == "SUCCEEDED"


def test_adopted_job_failure_is_seen(agent: Agent, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job = agent.submit(f'{_gate(gate)}; exit "$((LAUNCHER_NODE_RANK + 4))"', num_nodes=2)
    agent.wait_status(job, ("RUNNING",))
    os.kill(agent.daemon_pid(), signal.SIGKILL)
    _wait_for(lambda: not core.daemon_running(core.Paths(str(agent.home))), what="daemon death")
    agent.setup()
    gate.touch()
    rec = agent.wait_status(job)
    assert rec["status"] == "FAILED" and rec["exit_code"] in (4, 5)


# ---------------------------------------------------------------------------- autostop


def test_autostop_fires_after_idle_not_while_busy(agent: Agent, tmp_path: Path) -> None:
    fired, gate = tmp_path / "fired", tmp_path / "gate"
    job = agent.submit(_gate(gate), num_nodes=1)
    idle_min = 0.01  # 0.6 s
    agent.doc("autostop", "--idle-minutes", str(idle_min), "--down",
              "--action", f"date +%s.%N > {fired}")
    time.sleep(idle_min * 60 + 0.5)
    assert not fired.exists()  # busy while the job runs
    gate.touch()
    rec = agent.wait_status(job)
    _wait_for(fired.exists, timeout=10, what="autostop action")
    _wait_for(lambda: fired.read_text().strip(), what="action output")
    at = float(fired.read_text())
    assert at >= rec["ended_at"] + idle_min * 60 - 0.05
    assert at < rec["ended_at"] + idle_min * 60 + 10
    ev = [e for e in agent.events() if e["kind"] == "autostop"]
    assert len(ev) == 1 and "down" in ev[0]["detail"]
    status = agent.doc("status")
    assert status["autostop"]["down"] is True and status["idle_since"] is not None


def test_autostop_off_does_not_fire(agent: Agent, tmp_path: Path) -> None:
    fired = tmp_path / "fired"
    agent.doc("autostop", "--idle-minutes", "0.03", "--action", f"touch {fired}")
    agent.doc("autostop", "--off")
    time.sleep(0.03 * 60 + 0.7)
    assert not fired.exists()
    assert agent.doc("status")["autostop"] is None


# ---------------------------------------------------------------------------- notices


def _write_notice(agent: Agent, rank: int, grace: float) -> None:
    tmp = agent.home / f".notice-{rank}.tmp"
    tmp.write_text(json.dumps({"rank": rank, "grace_seconds": grace, "detail": "test"}))
    os.replace(tmp, agent.home / f"notice-rank-{rank}.json")


def test_notice_is_relayed_as_sigterm_and_recorded(agent: Agent) -> None:
    run = ("trap 'echo \"term after $(( $(date +%s%N) / 1000000 - START ))ms\"; exit 0' TERM; "
           "START=$(( $(date +%s%N) / 1000000 )); echo up; sleep 30 & wait")
    job = agent.submit(run, num_nodes=2)
    _wait_log(agent, job, "up", 2)
    sent = time.time()
    _write_notice(agent, 1, grace=8.0)
    rec = agent.wait_status(job)
    assert rec["ended_at"] - sent < 6.0  # SIGTERM went out at once, not at the grace's end
    assert rec["status"] == "FAILED" and rec["reason"].startswith("preempted")
    assert rec["failed_rank"] == 1
    assert rec["notice"]["rank"] == 1 and rec["notice"]["grace_seconds"] == 8.0
    assert rec["notice"]["source"] == "local-file"
    lines, _ = agent.logs(job)
    assert sum(1 for ln in lines if "term after" in ln) == 2
    kinds = [e["kind"] for e in agent.events()]
    assert "notice" in kinds
    assert agent.doc("status")["last_notice"]["rank"] == 1
    # no new job starts while the node is going away (grace + margin) ...
    nxt = agent.submit("echo later", num_nodes=1)
    time.sleep(0.3)
    assert agent.job(nxt)["status"] == "PENDING"
    # ... and the same notice file is not relayed twice (even by a new daemon)
    os.kill(agent.daemon_pid(), signal.SIGKILL)
    _wait_for(lambda: not core.daemon_running(core.Paths(str(agent.home))), what="daemon death")
    agent.setup()
    assert agent.wait_status(nxt)["notice"] is None
    assert [e["kind"] for e in agent.events()].count("notice") == 1


# ---------------------------------------------------------------------------- secrets


def test_secrets_stay_out_of_outputs_and_process_lists(agent: Agent) -> None:
    secret = "s3cr3t-value-93f1"
    gate = agent.root / "gate"
    job = agent.submit(f'[ "${{TOKEN%-93f1}}" = s3cr3t-value ] && echo has-token; {_gate(gate)}',
                       num_nodes=2, name="secret-job", envs={"TOKEN": secret},
                       secret_names=["TOKEN"])
    _wait_log(agent, job, "has-token", 2)
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert not list((agent.home / "logs" / str(job)).glob(".rank-*"))  # spawn scripts removed
    outputs = [agent.run(*args).stdout for args in
               (("queue",), ("job", str(job)), ("status",), ("events",))]
    gate.touch()
    lines, rec = agent.logs(job, "--follow")
    assert rec["status"] == "SUCCEEDED" and "(rank 1) has-token" in lines
    outputs.append(agent.run("queue").stdout)
    for out in outputs:
        assert secret not in out
    assert "secret-job" in outputs[0]


# ---------------------------------------------------------------------------- pure parts


def _worker(**kw: object) -> core.WorkerAccess:
    base: dict = {"rank": 2, "ip": "10.123.0.12", "kind": "ssh", "host": "10.123.0.12",
                  "port": 2222, "user": "root", "key_path": "~/.launcher-agent/internal_key"}
    base.update(kw)
    return core.parse_worker(base)


def test_ssh_argv_pins_host_keys_and_never_prompts() -> None:
    argv = core.ssh_argv(_worker(), "/h/.launcher-agent/known_hosts", "bash -s")
    assert argv[0] == "ssh" and argv[-2:] == ["root@10.123.0.12", "bash -s"]
    opts = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"BatchMode=yes", "StrictHostKeyChecking=yes",
            "UserKnownHostsFile=/h/.launcher-agent/known_hosts", "ServerAliveInterval=5",
            "ServerAliveCountMax=3", "IdentitiesOnly=yes"} <= opts
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-i") + 1] == os.path.expanduser("~/.launcher-agent/internal_key")
    no_key = core.ssh_argv(_worker(key_path=None), "/kh", "true")
    assert "-i" not in no_key
    assert core.ssh_kill_command(4321, "TERM") == "kill -TERM -- -4321"


def test_rank_end_explanations() -> None:
    ssh, local = _worker(), core.parse_worker({"rank": 0, "ip": "127.0.0.1", "kind": "local"})
    lost = core.parse_control("LAUNCHER_PGID=77\nConnection to 10.123.0.12 closed by remote host.\n")
    assert lost.pgid == 77 and lost.exit_code is None
    assert core.explain_rank_end(2, ssh, 255, lost) == (
        255, "rank 2: lost connection to 10.123.0.12: Connection to 10.123.0.12 closed by remote host.")
    done = core.parse_control("LAUNCHER_PGID=77\nLAUNCHER_EXIT=255\n")
    assert core.explain_rank_end(2, ssh, 255, done) == (255, "rank 2 exited with code 255")
    assert core.explain_rank_end(0, local, -9, core.RankControl()) == (
        137, "rank 0: killed by SIGKILL")
    ok = core.parse_control("LAUNCHER_EXIT=0")
    assert core.explain_rank_end(0, local, 0, ok) == (0, None)


def test_rank_script_runs_under_bash_over_stdin(tmp_path: Path) -> None:
    """The exact program ssh would feed to `bash -s` on a worker, run here."""
    env = [("A", "x y"), ("B", "it's $HOME")]
    script = core.rank_script(env, str(tmp_path), 'echo "$A|$B|$PWD"; echo err >&2; exit 7')
    res = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=10)
    assert res.returncode == 7
    assert res.stdout.splitlines() == [f"x y|it's $HOME|{tmp_path}", "err"]
    ctl = core.parse_control(res.stderr)
    assert ctl.exit_code == 7 and ctl.pgid is not None


def _pid_gone(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> bool:
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_rank_script_kills_stale_groups_and_its_own_leftovers(tmp_path: Path) -> None:
    """A node's rank kills the recorded groups of earlier jobs (a head that lost the node
    could not) before it starts, and whatever its run left behind (`cmd &`) when it ends."""
    home = tmp_path / "node"
    (home / ".launcher-agent" / "ranks").mkdir(parents=True)
    stale = subprocess.Popen(["sleep", "300"], start_new_session=True)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (home / ".launcher-agent" / "ranks" / "job-1-rank-0.pgid").write_text(f"{stale.pid} {boot}\n")
    other_boot = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (home / ".launcher-agent" / "ranks" / "job-1-rank-1.pgid").write_text(
        f"{other_boot.pid} not-this-boot\n")  # pid from before a reboot: never killed
    env = dict(os.environ, HOME=str(home))
    # the subshell says when its trap is set (a loaded machine may not have run it yet
    # when the run ends and the group gets SIGTERM)
    run = ("sleep 301 & echo $! > bg.pid; "
           "(trap 'echo bye > term.txt; exit 0' TERM; : > trap.set; "
           "while :; do sleep 0.05; done) & "
           "while [ ! -e trap.set ]; do sleep 0.01; done; echo started")
    script = core.rank_script([], None, run, job_id=2, rank=0)
    try:
        res = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True,
                             timeout=10, env=env, cwd=home)
        assert res.returncode == 0 and res.stdout.startswith("started\n")
        assert _pid_gone(stale)
        assert other_boot.poll() is None
        bg = int((home / "bg.pid").read_text())
        assert not Path(f"/proc/{bg}").exists() or "Z" in Path(f"/proc/{bg}/stat").read_text(
            ).split(") ")[1][:1]
        assert list((home / ".launcher-agent" / "ranks").iterdir()) == []  # records dropped
        assert (home / "term.txt").read_text() == "bye\n"  # SIGTERM first: handlers run
    finally:
        for p in (stale, other_boot):
            p.kill()
            p.wait()


def test_cli_argument_parsing() -> None:
    from launcher.runtime import agent_cli

    cmd, args = agent_cli.parse_args(["logs", "3", "--follow", "--rank", "1"])
    assert (cmd, args.job_id, args.follow, args.rank) == ("logs", 3, True, 1)
    cmd, args = agent_cli.parse_args(["cancel", "1", "2"])
    assert (cmd, args.job_ids, args.all) == ("cancel", [1, 2], None)
    cmd, args = agent_cli.parse_args(["autostop", "--idle-minutes", "0.5", "--action", "x y"])
    assert (args.idle_minutes, args.action, args.down) == (0.5, "x y", None)
    for bad in (["logs"], ["logs", "1", "--rank"], ["queue", "4"], ["bogus"], [],
                ["autostop", "--idle-minutes", "soon"], ["job", "1", "--follow"]):
        with pytest.raises(core.AgentError) as err:
            agent_cli.parse_args(bad)
        assert err.value.code == core.EXIT_INVALID


def test_a_preempted_local_worker_runs_nothing(agent: Agent) -> None:
    # What `launcher local preempt` leaves in a reclaimed node's home: like a vanished
    # VM, the node must not run a rank that the agent starts after the preemption.
    (agent.nodes[2] / core.PREEMPTED_MARKER).touch()
    job = agent.submit("echo ran-here; sleep 30", num_nodes=3)
    rec = agent.wait_status(job, timeout=30)
    assert rec["status"] == "FAILED" and rec["failed_rank"] == 2
    lines, _ = agent.logs(job)
    assert not any(ln.startswith("(rank 2) ran-here") for ln in lines)
    assert any("this node was preempted" in ln for ln in lines)


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_ended_jobs_forget_their_secret_values(agent: Agent) -> None:
    """Succeeded, cancelled while pending, and left by an older agent (the daemon's
    start sweeps them): no file of the agent's home keeps the values afterwards."""
    gate = agent.root / "gate"
    first = agent.submit(f'[ -n "$TOKEN" ] && echo has-token; {_gate(gate)}', num_nodes=1,
                         envs={"TOKEN": "tok-first-4711", "PLAIN": "kept"},
                         secret_names=["TOKEN"])
    pending = agent.submit("echo never", num_nodes=1, envs={"TOKEN": "tok-pending-4711"},
                           secret_names=["TOKEN"])
    _wait_log(agent, first, "has-token", 1)
    assert agent.doc("cancel", str(pending))["cancelled"] == [pending]
    gate.touch()
    assert agent.wait_status(first)["status"] == "SUCCEEDED"
    conn = core.connect(core.Paths(str(agent.home)))
    try:
        spec = json.loads(conn.execute("SELECT spec_json FROM jobs WHERE id = ?",
                                       (first,)).fetchone()[0])
        assert spec["envs"] == {"PLAIN": "kept"} and spec["secret_names"] == ["TOKEN"]
        # an ended job still holding its values (as an older agent left it)
        stale = dict(spec, envs={"TOKEN": "tok-stale-4711"})
        conn.execute("UPDATE jobs SET spec_json = ? WHERE id = ?", (json.dumps(stale), first))
    finally:
        conn.close()
    agent.run("shutdown")
    agent.submit("true", num_nodes=1)  # starts a new daemon, which sweeps
    _wait_for(lambda: not _files_holding(agent.home, b"tok-stale-4711"), what="sweep")
    for value in (b"tok-first-4711", b"tok-pending-4711", b"tok-stale-4711"):
        assert _files_holding(agent.home, value) == []
