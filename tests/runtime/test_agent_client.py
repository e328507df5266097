"""AgentClient driving the real agent on a local 'cluster' through the real LocalRunner,
and the JSON contract between launcher/runtime/jobspec.py and the stdlib agent."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from launcher.clouds.base import ClusterInfo, NodeInfo
from launcher.runtime import agent as core
from launcher.runtime.agent_client import (
    AGENT_DIR,
    AGENT_FILES,
    AgentClient,
    AgentError,
    JobNotFoundError,
    agent_sources,
    agent_version,
    default_autostop_action,
    known_hosts_text,
)
from launcher.runtime.jobspec import JobRecord, JobShapeError, JobSpec, JobStatus, WorkerAccess
from launcher.runtime.local_runner import LocalRunner
from launcher.runtime.runner import CommandResult

if TYPE_CHECKING:
    from tests.netns import SSHNodeSet


class CountingRunner(LocalRunner):
    """The real LocalRunner, counting round trips (install must be one when current)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.calls: list[str] = []

    def run(self, command: str, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
            timeout: float | None = None, on_output: Callable[[str], None] | None = None,
            stdin: str | None = None) -> CommandResult:
        self.calls.append(command)
        return super().run(command, env=env, cwd=cwd, timeout=timeout, on_output=on_output,
                           stdin=stdin)

    def put_text(self, text: str, remote_path: str, mode: int | None = None) -> None:
        self.calls.append(f"put {remote_path}")
        super().put_text(text, remote_path, mode)


def make_cluster(root: Path, n: int = 3, name: str = "tcl") -> ClusterInfo:
    nodes = []
    for i in range(n):
        d = root / f"node-{i}"
        d.mkdir(parents=True)
        nodes.append(NodeInfo(rank=i, node_id=f"{name}-{i}", internal_ip=f"127.0.0.{i + 1}",
                              local_root=str(d)))
    return ClusterInfo(cluster_name=name, cloud="local", region="local", zone=None,
                       instance_type="local", use_spot=False, nodes=tuple(nodes))


def workers_of(cluster: ClusterInfo) -> list[WorkerAccess]:
    return [WorkerAccess(rank=n.rank, ip=n.internal_ip, kind="local", home=n.local_root)
            for n in cluster.nodes]


@pytest.fixture
def env_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_AGENT_KILL_GRACE", "1")


@pytest.fixture
def client(tmp_path: Path, env_fast: None) -> Iterator[AgentClient]:
    cluster = make_cluster(tmp_path / "c")
    c = AgentClient(CountingRunner(cluster.head), cluster)
    c.install(workers_of(cluster))
    try:
        yield c
    finally:
        _stop_agent(c)


def _stop_agent(c: AgentClient) -> None:
    home = Path(str(c.cluster.head.local_root)) / ".launcher-agent"
    with contextlib.suppress(Exception):
        c.shutdown(cancel_jobs=True)
    with contextlib.suppress(Exception):
        if core.daemon_running(core.Paths(str(home))):
            os.kill(int(json.loads((home / "daemon.json").read_text())["pid"]), signal.SIGKILL)


# ---------------------------------------------------------------------------- JSON contract


@pytest.mark.parametrize(("ours", "theirs"), [(JobSpec, core.JobSpec),
                                               (WorkerAccess, core.WorkerAccess)])
def test_field_names_match_the_agent(ours: type, theirs: Any) -> None:
    assert {f.name for f in dataclasses.fields(ours)} == set(theirs.__slots__)


def test_jobspec_json_is_what_the_agent_parses() -> None:
    spec = JobSpec(run="echo hi", name="n", envs={"A": "1", "S": "x"}, secret_names=("S",),
                   num_nodes=2, gpus_per_node=0.5, workdir="~/w", task_id="t",
                   checkpoint_dir="/c", cluster_info_json='{"cloud": "local"}')
    parsed = core.parse_job_spec(json.loads(json.dumps(spec.to_json())))
    for name in core.JobSpec.__slots__:
        ours = getattr(spec, name)
        assert getattr(parsed, name) == (list(ours) if isinstance(ours, tuple) else ours)
    assert JobSpec.from_json(spec.to_json()) == spec


def test_worker_access_json_is_what_the_agent_parses() -> None:
    w = WorkerAccess(rank=1, ip="10.0.0.2", kind="ssh", host="10.0.0.2", port=2222, user="u",
                     key_path="~/k", cuda_visible_devices="2,3")
    assert core.parse_worker(json.loads(json.dumps(w.to_json()))).to_json() == w.to_json()
    assert WorkerAccess.from_json(w.to_json()) == w
    with pytest.raises(JobShapeError):
        WorkerAccess(rank=1, ip="x", kind="ssh")


def test_agent_record_json_is_what_jobrecord_parses(tmp_path: Path) -> None:
    conn = core.connect(core.Paths(str(tmp_path)))
    notice = {"rank": 1, "grace_seconds": 30.0, "received_at": 5.0, "source": "local-file",
              "detail": "d"}
    conn.execute(
        "INSERT INTO jobs (name, status, spec_json, num_nodes, submitted_at, started_at, "
        "ended_at, exit_code, failed_rank, reason, notice_json) "
        "VALUES ('j', 'FAILED', '{}', 2, 1.0, 2.0, 3.0, 143, 1, 'preempted: x', ?)",
        (json.dumps(notice),))
    row = conn.execute("SELECT * FROM jobs").fetchone()
    assert isinstance(row, sqlite3.Row)
    rec = JobRecord.from_json(json.loads(json.dumps(core.record_json(row))))
    assert rec.status is JobStatus.FAILED and rec.status.is_terminal
    assert (rec.id, rec.num_nodes, rec.exit_code, rec.failed_rank) == (1, 2, 143, 1)
    assert rec.notice is not None and rec.notice.to_json() == notice
    assert JobRecord.from_json(rec.to_json()) == rec
    with pytest.raises(JobShapeError):
        JobRecord.from_json({**rec.to_json(), "status": "EXPLODED"})


def test_agent_version_matches_what_the_agent_computes(tmp_path: Path) -> None:
    sources = agent_sources()
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    assert core.agent_version(str(tmp_path)) == agent_version(sources)


# ---------------------------------------------------------------------------- install


def test_install_is_idempotent_and_one_round_trip_when_current(tmp_path: Path,
                                                              env_fast: None) -> None:
    cluster = make_cluster(tmp_path / "c", n=2)
    runner = CountingRunner(cluster.head)
    c = AgentClient(runner, cluster)
    try:
        c.install(workers_of(cluster))
        assert sum(1 for x in runner.calls if x.startswith("put ")) == len(AGENT_FILES)
        pid = c.status().daemon_pid
        runner.calls.clear()
        t0 = time.perf_counter()
        c.install(workers_of(cluster))
        took = time.perf_counter() - t0
        assert len(runner.calls) == 1 and "setup --expect-version" in runner.calls[0]
        assert c.status().daemon_pid == pid
        print(f"\ninstall (current agent): {took * 1000:.0f} ms")
        assert took < 2.0
    finally:
        _stop_agent(c)


def test_install_upgrades_changed_agent_and_restarts_daemon(tmp_path: Path,
                                                           env_fast: None) -> None:
    cluster = make_cluster(tmp_path / "c", n=1)
    runner = CountingRunner(cluster.head)
    c = AgentClient(runner, cluster)
    try:
        c.install(workers_of(cluster))
        home = Path(str(cluster.head.local_root)) / ".launcher-agent"
        with open(home / "agent_cli.py", "a") as f:
            f.write("\n# an older agent\n")
        c.shutdown()
        c.submit(JobSpec(run="true"))  # starts a daemon running the "older" files
        old = c.status()
        assert old.daemon_running and old.daemon_version != agent_version(agent_sources())
        runner.calls.clear()
        c.install(workers_of(cluster))
        assert [x.split()[0] for x in runner.calls] == [
            "~/.launcher-agent/agent", *["put"] * len(AGENT_FILES), "python3"]
        st = c.status()
        assert st.daemon_running and st.daemon_version == agent_version(agent_sources())
        assert st.version == st.daemon_version and st.daemon_pid != old.daemon_pid
    finally:
        _stop_agent(c)


def test_client_without_agent_says_so(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path / "c", n=1)
    c = AgentClient(LocalRunner(cluster.head), cluster)
    with pytest.raises(AgentError, match="not installed"):
        c.queue()


# ---------------------------------------------------------------------------- jobs


def test_submit_follow_and_first_output_latency(client: AgentClient) -> None:
    lines: list[str] = []
    first: list[float] = []

    def on_line(line: str) -> None:
        if not first:
            first.append(time.perf_counter())
        lines.append(line)

    t0 = time.perf_counter()
    job = client.submit(JobSpec(run='echo "hello from $LAUNCHER_NODE_RANK"', num_nodes=3,
                                name="hello"))
    rec = client.follow_logs(job, on_line)
    latency = first[0] - t0
    print(f"\nsubmit -> first output line: {latency * 1000:.0f} ms")
    assert rec.status is JobStatus.SUCCEEDED and rec.exit_code == 0 and rec.name == "hello"
    assert sorted(lines) == [f"(rank {r}) hello from {r}" for r in range(3)]
    assert latency < 2.0
    assert [j.id for j in client.queue()] == [job]
    assert client.job(job) == rec


def test_submit_and_follow_one_round_trip(client: AgentClient) -> None:
    lines: list[str] = []
    submitted: list[int] = []
    first: list[float] = []

    def on_line(line: str) -> None:
        first.append(time.perf_counter())
        lines.append(line)

    t0 = time.perf_counter()
    rec = client.submit_and_follow(JobSpec(run="echo one; echo two >&2", num_nodes=2),
                                   on_line, on_submitted=submitted.append)
    print(f"\nsubmit_and_follow -> first output line: {(first[0] - t0) * 1000:.0f} ms")
    assert submitted == [rec.id] and rec.status is JobStatus.SUCCEEDED
    assert sorted(lines) == ["(rank 0) one", "(rank 0) two", "(rank 1) one", "(rank 1) two"]
    bad = JobSpec(run="true", num_nodes=3)
    bad = dataclasses.replace(bad, num_nodes=7)
    with pytest.raises(AgentError, match="needs 7 nodes"):
        client.submit_and_follow(bad, on_line)


def test_failed_gang_record_through_client(client: AgentClient) -> None:
    job = client.submit(JobSpec(run='[ "$LAUNCHER_NODE_RANK" = 2 ] && exit 9; sleep 30',
                                num_nodes=3))
    rec = client.follow_logs(job, lambda _l: None)
    assert rec.status is JobStatus.FAILED
    assert (rec.failed_rank, rec.exit_code, rec.reason) == (2, 9, "rank 2 exited with code 9")


def test_cancel_through_client(client: AgentClient) -> None:
    running = client.submit(JobSpec(run="sleep 30", num_nodes=1))
    pending = client.submit(JobSpec(run="echo never", num_nodes=1))
    deadline = time.monotonic() + 10
    while client.job(running).status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    res = client.cancel([pending])
    assert res.cancelled == (pending,)
    res = client.cancel(None)
    assert res.cancelled == (running,)
    assert {j.status for j in client.queue()} == {JobStatus.CANCELLED}
    with pytest.raises(JobNotFoundError):
        client.cancel([running, 4242])
    with pytest.raises(JobNotFoundError):
        client.job(4242)
    with pytest.raises(JobNotFoundError):
        client.follow_logs(4242, lambda _l: None)


def test_client_killed_mid_follow_job_finishes(client: AgentClient, tmp_path: Path) -> None:
    job = client.submit(JobSpec(run="for i in $(seq 1 12); do echo step $i; sleep 0.1; done",
                                num_nodes=2))
    head = client.cluster.head
    script = textwrap.dedent(f"""
        import sys
        from launcher.clouds.base import NodeInfo, ClusterInfo
        from launcher.runtime.agent_client import AgentClient
        from launcher.runtime.local_runner import LocalRunner
        node = NodeInfo(rank=0, node_id="x", internal_ip="127.0.0.1", local_root={head.local_root!r})
        cl = ClusterInfo("tcl", "local", "local", None, "local", False, (node,))
        def on_line(line):
            print(line, flush=True)
        AgentClient(LocalRunner(node), cl).follow_logs({job}, on_line)
        print("FOLLOW-RETURNED", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("(rank ")
    os.killpg(proc.pid, signal.SIGKILL)  # the whole client process group, like a closed laptop
    proc.wait()
    lines: list[str] = []
    rec = client.follow_logs(job, lines.append)  # a new client picks it up
    assert rec.status is JobStatus.SUCCEEDED
    for r in (0, 1):
        assert [ln for ln in lines if ln.startswith(f"(rank {r})")] == [
            f"(rank {r}) step {i}" for i in range(1, 13)]
    snapshot: list[str] = []
    assert client.follow_logs(job, snapshot.append, follow=False) == rec
    assert sorted(snapshot) == sorted(lines)


def _kill_logs_command(head_root: str, job: int) -> bool:
    """SIGKILL the head's `agent logs JOB` process (as a loaded machine's OOM killer or a
    dropped connection would end it). True if one was found."""
    want = [b"logs", str(job).encode()]
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().rstrip(b"\0").split(b"\0")
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                mine = b"HOME=" + os.fsencode(head_root) in f.read().split(b"\0")
        except OSError:
            continue
        if mine and argv[-3:-1] == want and argv[-1] == b"--follow":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
            return True
    return False


@pytest.mark.parametrize("complete", [True, False])
def test_a_log_stream_cut_before_its_end_is_an_error_when_completeness_matters(
        client: AgentClient, complete: bool) -> None:
    job = client.submit(JobSpec(run="for i in $(seq 1 200); do echo step $i; sleep 0.02; done",
                                num_nodes=1))
    lines: list[str] = []
    killed: list[bool] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if len(lines) == 3:
            killed.append(_kill_logs_command(str(client.cluster.head.local_root), job))

    if complete:
        with pytest.raises(AgentError, match="incomplete"):
            client.follow_logs(job, on_line, complete=True)
    else:  # a follower (the CLI) still gets the job's record and can look again
        assert client.follow_logs(job, on_line).status is JobStatus.RUNNING
    assert killed == [True] and 3 <= len(lines) < 200
    client.cancel([job])


def test_autostop_and_events_through_client(client: AgentClient, tmp_path: Path) -> None:
    fired = tmp_path / "fired"
    client.set_autostop(0.01, down=True, action=f"touch {shlex.quote(str(fired))}")
    st = client.status()
    assert st.autostop is not None and st.autostop.down and st.autostop.idle_minutes == 0.01
    deadline = time.monotonic() + 10
    while not fired.exists():
        assert time.monotonic() < deadline, "autostop action did not run"
        time.sleep(0.05)
    kinds = [e.kind for e in client.events()]
    assert "autostop_set" in kinds and "autostop" in kinds
    last = client.events()[-1].id
    assert client.events(since=last) == []
    client.set_autostop(None)
    assert client.status().autostop is None


def test_default_autostop_action_is_a_runnable_launcher_command(tmp_path: Path,
                                                               launcher_home: Path) -> None:
    cluster = make_cluster(tmp_path / "c", n=1, name="no-such-cluster")
    action = default_autostop_action(cluster, down=True)
    assert action.startswith(f"LAUNCHER_HOME={launcher_home} ")
    assert action.endswith("down no-such-cluster -y")
    res = subprocess.run(["bash", "-c", action], capture_output=True, text=True, timeout=60)
    assert res.returncode == 4 and "no-such-cluster" in res.stderr  # ClusterNotFoundError
    assert default_autostop_action(dataclasses.replace(cluster, cloud="ssh"), down=True) == ""
    assert default_autostop_action(cluster, down=False).endswith("stop no-such-cluster")


def test_known_hosts_pins_ssh_workers_only() -> None:
    nodes = (
        NodeInfo(0, "h", "10.1.0.10", ssh_user="root", ssh_host_key="ssh-ed25519 AAAAhead"),
        NodeInfo(1, "w1", "10.1.0.11", ssh_user="root", ssh_host_key="ssh-ed25519 AAAAw1"),
        NodeInfo(2, "w2", "10.1.0.12", ssh_user="root", ssh_port=2222,
                 ssh_host_key="ssh-ed25519 AAAAw2\n"),
    )
    cluster = ClusterInfo("c", "ssh", "pool", None, "x", False, nodes)
    workers = [WorkerAccess(0, "10.1.0.10", "local")] + [
        WorkerAccess(n.rank, n.internal_ip, "ssh", host=n.internal_ip, port=n.ssh_port,
                     user="root") for n in nodes[1:]]
    assert known_hosts_text(cluster, workers) == (
        "10.1.0.11 ssh-ed25519 AAAAw1\n[10.1.0.12]:2222 ssh-ed25519 AAAAw2\n")


def test_agent_dir_is_under_the_head_home(client: AgentClient) -> None:
    home = Path(str(client.cluster.head.local_root))
    assert AGENT_DIR == "~/.launcher-agent"
    assert (home / ".launcher-agent" / "agent.py").exists()
    assert (home / ".launcher-agent" / "agent").stat().st_mode & 0o100


# ---------------------------------------------------------------------------- ssh workers


def _wait_until(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.netns
def test_ssh_worker_gang_on_sshd_nodes(ssh_nodes: Callable[[int], SSHNodeSet]) -> None:
    """The head's agent reaches workers over real ssh (pinned host keys, internal key):
    env in rank order, remote gang kill on failure, node loss -> FAILED, not a hang."""
    from launcher.runtime.execution import worker_access
    from launcher.runtime.ssh_runner import SSHRunner

    nodes = ssh_nodes(3)
    cluster = nodes.cluster_info("sshc")
    head = SSHRunner(cluster.head, key_path=cluster.ssh_key_path)
    client = AgentClient(head, cluster)
    try:
        key = "~/.launcher-agent/internal_key"
        head.put_text(Path(nodes.client_key_path).read_text(), key, mode=0o600)
        client.install(worker_access(cluster, key))

        lines: list[str] = []
        rec = client.submit_and_follow(JobSpec(
            run='echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) ips=$(echo $SKYPILOT_NODE_IPS)"',
            num_nodes=3), lines.append)
        assert rec.status is JobStatus.SUCCEEDED, lines
        ips = " ".join(n.host for n in nodes)
        for r, node in enumerate(nodes):
            assert f"(rank {r}) rank={r} host={node.hostname} ips={ips}" in lines

        # rank 1 fails -> rank 2's remote process group is killed over ssh
        run = ('if [ "$LAUNCHER_NODE_RANK" = 1 ]; then sleep 0.5; exit 3; fi; '
               "echo $$ > ~/sleeper.pid; sleep 60")
        t0 = time.monotonic()
        rec = client.submit_and_follow(JobSpec(run=run, num_nodes=3), lambda _l: None)
        assert (rec.status, rec.failed_rank, rec.exit_code) == (JobStatus.FAILED, 1, 3)
        print(f"\nssh gang failure (rank 1 exits after 0.5 s) -> FAILED: "
              f"{time.monotonic() - t0:.2f} s")
        assert time.monotonic() - t0 < 15
        sleeper = Path("/proc") / (nodes[2].home / "sleeper.pid").read_text().strip()
        _wait_until(lambda: not sleeper.exists(), "rank 2's remote process to die")

        # node 2 is lost mid-job -> FAILED naming it, within seconds
        job = client.submit(JobSpec(run="echo up; sleep 60", num_nodes=3))
        log2 = nodes[0].home / ".launcher-agent" / "logs" / str(job) / "rank-2.log"
        _wait_until(lambda: log2.exists() and "up" in log2.read_text(), "rank 2 to start")
        t0 = time.monotonic()
        nodes[2].kill()
        rec = client.follow_logs(job, lambda _l: None)
        assert rec.status is JobStatus.FAILED and rec.failed_rank == 2
        assert rec.reason is not None and f"lost connection to {nodes[2].host}" in rec.reason
        print(f"\nssh node lost -> job FAILED: {time.monotonic() - t0:.2f} s ({rec.reason})")
        assert time.monotonic() - t0 < 25
    finally:
        with contextlib.suppress(Exception):
            client.shutdown(cancel_jobs=True)
        head.close()
