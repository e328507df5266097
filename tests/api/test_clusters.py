"""The cluster lifecycle end to end on the real local cloud (real agent, real processes).

Each test launches small clusters in its own LAUNCHER_HOME and tears them down;
a fixture kills whatever a failing test left behind.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.cluster_common import ClusterNotReadyError, TaskDoesNotFitError
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.clouds.base import NodeState, ProvisionRequest
from launcher.clouds.local import LocalCloud, _node_pids
from launcher.errors import ClusterNotFoundError
from launcher.runtime.execution import SetupFailedError
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB
from launcher.task.model import Task

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cleanup(launcher_home: Path) -> Iterator[None]:
    """Downs whatever a test left, then checks that no agent daemon, rank or setup
    process of the test's LAUNCHER_HOME is still alive (per test, so it holds however
    xdist spreads the module over workers)."""
    yield
    root = launcher_home / "local"
    if root.exists():
        for cdir in root.iterdir():
            LocalCloud().terminate(cdir.name)
    _assert_no_strays([launcher_home])


def _task(run: str | None, *, nodes: int = 1, setup: str | None = None, **extra: object) -> Task:
    d: dict[str, object] = {"name": "t", "num_nodes": nodes, "resources": {"infra": "local"}}
    if run is not None:
        d["run"] = run
    if setup is not None:
        d["setup"] = setup
    d.update(extra)
    return Task.from_dict(d)


def _cluster_pids(home: Path, name: str) -> set[int]:
    pids: set[int] = set()
    cdir = home / "local" / name
    if cdir.exists():
        for node in cdir.glob("node-*"):
            pids |= _node_pids(node)
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _wait(cond, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_hello_example_runs_and_down_leaves_nothing(launcher_home: Path) -> None:
    lines: list[str] = []
    setup_lines: list[str] = []
    task = Task.from_yaml(str(REPO / "task_examples" / "hello.yaml"))
    result = launch(task, "hello", on_line=lines.append, on_setup_line=setup_lines.append)
    assert result.exit_code == 0 and result.job_status == "SUCCEEDED"
    assert result.created and result.cloud == "local" and result.hourly_cost == 0
    assert lines == ["(rank 0) hello from node 0 of 1"]
    assert setup_lines and setup_lines[0].startswith("(setup) setting up on ")
    [row] = api.status()
    assert (row.name, row.status, row.num_nodes) == ("hello", "UP", 1)
    assert _cluster_pids(launcher_home, "hello"), "the agent daemon should be running"
    daemon = json.loads((launcher_home / "local/hello/node-0/.launcher-agent/daemon.json").read_text())
    assert _alive(daemon["pid"])
    api.down("hello")
    assert _cluster_pids(launcher_home, "hello") == set()
    assert not _alive(daemon["pid"])  # checked by pid too, not only by our own scan
    assert not (launcher_home / "local" / "hello").exists()
    assert api.status() == []
    with pytest.raises(ClusterNotFoundError):
        api.down("hello")


def test_three_node_gang_sees_ranks_ips_env_secrets_and_workdir(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "data.txt").write_text("synced")
    run = (
        'echo "rank=$LAUNCHER_NODE_RANK sky=$SKYPILOT_NODE_RANK n=$LAUNCHER_NUM_NODES '
        'ips=$(echo $LAUNCHER_NODE_IPS | tr " " ,) env=$MY_VAR secret=$MY_SECRET '
        'file=$(cat data.txt) info=$LAUNCHER_CLUSTER_INFO"'
    )
    task = _task(run, nodes=3, envs={"MY_VAR": "v1"}, secrets={"MY_SECRET": "s3cr3t"}, workdir=str(work))
    lines: list[str] = []
    result = launch(task, "gang", on_line=lines.append)
    assert result.exit_code == 0
    assert len(lines) == 3
    for rank in range(3):
        [line] = [x for x in lines if x.startswith(f"(rank {rank}) ")]
        assert f"rank={rank} sky={rank} n=3" in line
        assert "ips=127.0.0.1,127.0.0.1,127.0.0.1" in line
        assert "env=v1 secret=s3cr3t file=synced" in line
        assert '"cloud": "local"' in line
    # secrets never reach status or queue
    assert "s3cr3t" not in repr(api.status()) and "s3cr3t" not in repr(api.queue("gang"))
    api.down("gang")


def test_local_gpus_are_split_between_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "T4:4")  # what nvidia-smi would report
    run = 'echo "rank=$LAUNCHER_NODE_RANK cvd=$CUDA_VISIBLE_DEVICES gpus=$LAUNCHER_NUM_GPUS_PER_NODE"'
    setup = 'echo "setup cvd=$CUDA_VISIBLE_DEVICES"'
    task = _task(run, nodes=2, setup=setup, resources={"infra": "local", "accelerators": "T4:2"})
    lines: list[str] = []
    setup_lines: list[str] = []
    result = launch(task, "gpu", on_line=lines.append, on_setup_line=setup_lines.append)
    assert result.exit_code == 0
    assert sorted(lines) == ["(rank 0) rank=0 cvd=0,1 gpus=2", "(rank 1) rank=1 cvd=2,3 gpus=2"]
    assert sorted(setup_lines) == ["(setup 0) setup cvd=0,1", "(setup 1) setup cvd=2,3"]
    api.down("gpu")


def test_setup_failure_keeps_cluster_and_names_the_node(launcher_home: Path) -> None:
    setup = ('if [ "$LAUNCHER_NODE_RANK" = 1 ]; then echo "cannot install foo" >&2; exit 9; fi; '
             'echo slow; sleep 30')
    setup_lines: list[str] = []
    with pytest.raises(SetupFailedError) as ei:
        launch(_task("echo never", nodes=2, setup=setup), "sf", on_setup_line=setup_lines.append)
    assert ei.value.rank == 1 and "cannot install foo" in str(ei.value)
    assert not [x for x in setup_lines if "setsid" in x]  # node 0's killed setup stays quiet
    log = (launcher_home / "logs" / "sf")
    assert not [p for p in log.rglob("*.log") if "setsid" in p.read_text()]
    assert "launcher down sf" in str(ei.value)
    [row] = api.status()
    assert row.status == "UP"  # kept, like SkyPilot: inspect it, fix the task, relaunch
    # the relaunch with a fixed setup reuses the same cluster
    result = launch(_task("echo fixed", nodes=2, setup="true"), "sf")
    assert result.reused and not result.created and result.exit_code == 0
    api.down("sf")


def test_setup_failure_with_down_takes_the_new_cluster_down(launcher_home: Path) -> None:
    with pytest.raises(SetupFailedError):
        launch(_task("echo never", setup="exit 1"), "sfd", down=True)
    assert api.status() == []
    assert _cluster_pids(launcher_home, "sfd") == set()


def test_gang_failure_propagates_exit_code_and_stops_other_ranks() -> None:
    run = 'if [ "$LAUNCHER_NODE_RANK" = 1 ]; then sleep 0.3; exit 7; fi; sleep 30; echo survived'
    t0 = time.monotonic()
    result = launch(_task(run, nodes=3), "gf")
    assert time.monotonic() - t0 < 20
    assert result.exit_code == 7 and result.job_status == "FAILED" and result.failed_rank == 1
    [job] = api.queue("gf")
    assert job.status.value == "FAILED" and job.exit_code == 7
    api.down("gf")


def test_exec_queue_logs_cancel_on_a_running_cluster() -> None:
    launch(_task("echo first"), "q")
    lines: list[str] = []
    r = exec_("q", "echo from-exec; exit 4", on_line=lines.append)
    assert (r.job_id, r.exit_code) == (2, 4) and lines == ["(rank 0) from-exec"]
    # a task file through exec: no setup, its run with its env
    r = exec_("q", _task("echo task-$X", setup="exit 1", envs={"X": "y"}), on_line=lines.append)
    assert r.exit_code == 0 and lines[-1] == "(rank 0) task-y"
    long = exec_("q", "echo started; sleep 60", detach_run=True)
    assert long.exit_code is None
    assert _wait(lambda: api.queue("q")[-1].status.value == "RUNNING")
    got: list[str] = []
    rec = api.logs("q", long.job_id, follow=False, on_line=got.append)
    assert rec.status.value == "RUNNING"
    res = api.cancel("q", [long.job_id])  # type: ignore[list-item]
    assert res.cancelled == (long.job_id,)
    jobs = api.queue("q")
    assert [j.status.value for j in jobs] == ["SUCCEEDED", "FAILED", "SUCCEEDED", "CANCELLED"]
    assert [j.id for j in jobs] == [1, 2, 3, 4]
    first: list[str] = []
    api.logs("q", 1, follow=False, on_line=first.append)
    assert first == ["(rank 0) first"]
    api.down("q")


def test_relaunch_with_incompatible_task_is_refused() -> None:
    launch(_task("true"), "small")
    with pytest.raises(TaskDoesNotFitError, match="needs 2 nodes"):
        launch(_task("true", nodes=2), "small")
    api.down("small")


def test_stop_start_keeps_queue_history(launcher_home: Path) -> None:
    launch(_task("echo one"), "ss")
    api.stop("ss")
    assert api.status()[0].status == "STOPPED"
    assert _cluster_pids(launcher_home, "ss") == set()
    with pytest.raises(ClusterNotReadyError, match="launcher start ss"):
        exec_("ss", "true")
    api.start("ss")
    assert api.status()[0].status == "UP"
    r = exec_("ss", "echo two")
    assert r.exit_code == 0 and [j.id for j in api.queue("ss")] == [1, 2]
    with StateDB() as db:
        reasons = [u.end_reason for u in db.usage("ss")]
    assert reasons == ["stopped", None]
    api.down("ss")


def test_autostop_down_takes_an_idle_local_cluster_down(launcher_home: Path) -> None:
    # 0.02 idle minutes = 1.2 s: the test override of the minute-granular CLI option
    result = launch(_task("echo bye"), "auto", idle_minutes=0.02, down=True)
    assert result.exit_code == 0
    assert api.status()[0].to_json()["autostop"] == {"idle_minutes": 0.02, "down": True}
    assert _wait(lambda: api.status() == [], timeout=20), "autostop never took the cluster down"
    assert _wait(lambda: _cluster_pids(launcher_home, "auto") == set(), timeout=5)
    assert not (launcher_home / "local" / "auto").exists()


def test_launch_down_takes_the_cluster_down_after_the_job(launcher_home: Path) -> None:
    lines: list[str] = []
    result = launch(_task("echo last words; exit 3"), "dn", down=True, on_line=lines.append)
    assert result.exit_code == 3 and lines == ["(rank 0) last words"]
    assert api.status() == []
    assert _cluster_pids(launcher_home, "dn") == set()


def test_autostop_set_and_cancel_on_a_running_cluster() -> None:
    launch(_task("true"), "as")
    api.autostop("as", 30, down=False)
    assert api.status()[0].to_json()["autostop"] == {"idle_minutes": 30, "down": False}
    api.autostop("as", None)
    assert api.status()[0].to_json()["autostop"] is None
    api.down("as")


_TRAP = (
    "trap 'echo got SIGTERM > ~/sigterm.txt; exit 143' TERM; "
    "echo running; for i in $(seq 600); do sleep 0.1; done"
)


def test_preempt_with_notice_delivers_sigterm_then_kills(launcher_home: Path) -> None:
    r = launch(_task(_TRAP, nodes=2), "pn", detach_run=True)
    assert _wait(lambda: api.queue("pn")[-1].status.value == "RUNNING")
    head = launcher_home / "local" / "pn" / "node-0"
    assert _wait(lambda: any(head.glob(".launcher-agent/logs/*/rank-1.log")))
    t0 = time.monotonic()
    assert api.local_preempt("pn", node=1, notice_seconds=10) == [1]
    assert time.monotonic() - t0 < 8  # returned when the job exited, not after the whole notice
    node1 = launcher_home / "local" / "pn" / "node-1"
    assert (node1 / "sigterm.txt").read_text().strip() == "got SIGTERM"
    assert LocalCloud().query("pn")["pn-1"] is NodeState.PREEMPTED
    assert api.status()[0].status == "PREEMPTED"
    assert _node_pids(node1) == set()
    with pytest.raises(ClusterNotReadyError, match="relaunch"):
        exec_("pn", "true")
    # relaunching the name replaces the preempted cluster
    again = launch(_task("echo back", nodes=2), "pn")
    assert again.created and again.exit_code == 0
    del r
    api.down("pn")


def test_preempted_worker_keeps_job_history_readable() -> None:
    launch(_task("echo one; sleep 60", nodes=2), "ph", detach_run=True)
    assert _wait(lambda: api.queue("ph")[-1].status.value == "RUNNING")
    api.local_preempt("ph", node=1)
    assert api.status()[0].status == "PREEMPTED"
    assert _wait(lambda: api.queue("ph")[-1].status.is_terminal)  # the head still answers
    lines: list[str] = []
    record = api.logs("ph", 1, on_line=lines.append)  # never follows a preempted cluster
    assert record.status.value == "FAILED" and "(rank 0) one" in lines
    with pytest.raises(ClusterNotReadyError, match="PREEMPTED"):
        exec_("ph", "true")
    api.local_preempt("ph", node=0)  # the head is gone too: nothing to read from
    with pytest.raises(ClusterNotReadyError, match="PREEMPTED"):
        api.queue("ph")
    api.down("ph")


def test_preempt_without_notice_kills_at_once(launcher_home: Path) -> None:
    launch(_task("sleep 60"), "pk", detach_run=True)
    assert _wait(lambda: api.queue("pk")[-1].status.value == "RUNNING")
    api.local_preempt("pk")
    assert LocalCloud().query("pk") == {"pk-0": NodeState.PREEMPTED}
    assert _cluster_pids(launcher_home, "pk") == set()
    assert api.status(refresh=True)[0].status == "PREEMPTED"
    api.down("pk")


def test_status_refresh_forgets_a_cluster_gone_from_the_cloud() -> None:
    launch(_task("true"), "gone")
    LocalCloud().terminate("gone")  # e.g. autostop downed it while we were away
    assert [r.name for r in api.status()] == ["gone"]
    assert api.status(refresh=True) == []


class _AllLostCloud:
    """A cloud whose view says every node of any cluster is TERMINATED; counts terminates."""

    def __init__(self) -> None:
        self.terminated: list[str] = []

    def query(self, cluster: str) -> dict[str, NodeState]:
        return {f"{cluster}-0": NodeState.TERMINATED}

    def terminate(self, cluster: str) -> None:
        self.terminated.append(cluster)


@pytest.mark.parametrize("cloud", ["ssh", "aws"])
def test_status_refresh_never_forgets_a_cluster_whose_machines_may_be_held(cloud: str) -> None:
    fake = _AllLostCloud()
    with StateDB() as db:
        db.create_cluster("held", PlacementRecord(cloud, "lab", None, "pool", 1, False))
        db.set_status("held", ClusterStatus.UP, "test")
    views = api.status(refresh=True, cloud_fn=lambda _name: fake)  # type: ignore[arg-type,return-value]
    if cloud == "ssh":
        # a pool host that stopped answering is still allocated to the cluster: keep the
        # row (DEGRADED) so `down` can give the host back
        assert [(v.name, v.status) for v in views] == [("held", "DEGRADED")]
        assert fake.terminated == []
    else:
        # the cloud says it is all gone: forget it, but release whatever may remain first
        assert views == [] and fake.terminated == ["held"]


class _CannotStop:
    """The local cloud without its stop/start capability (like an ssh pool)."""

    def __init__(self) -> None:
        self.inner = LocalCloud()
        self.name = self.inner.name

    def __getattr__(self, attr: str) -> object:
        if attr in ("stop", "start"):
            raise AttributeError(attr)
        return getattr(self.inner, attr)


def test_launch_i_without_down_on_a_chosen_cloud_that_cannot_stop_leaves_nothing(
        launcher_home: Path) -> None:
    from launcher.errors import LauncherError

    # no cloud named in the task: the refusal can only come after the optimizer chose
    task = Task.from_dict({"name": "t", "run": "true"})
    with pytest.raises(LauncherError, match="cannot stop"):
        launch(task, "nostop", idle_minutes=5, cloud_fn=lambda _n: _CannotStop())  # type: ignore[arg-type,return-value]
    assert LocalCloud().query("nostop") == {}
    assert api.status() == []


def test_down_of_a_cluster_left_init_by_a_dead_launch(launcher_home: Path) -> None:
    """A launch killed mid-provision leaves an INIT row and machines: down finds both."""
    with StateDB() as db:
        db.create_cluster("dead", PlacementRecord("local", "local", None, "local", 2, False))
    LocalCloud().provision(ProvisionRequest("dead", "local", "local", None, "local", 2, False))
    assert api.status()[0].status == "INIT"
    with pytest.raises(ClusterNotReadyError):
        exec_("dead", "true")
    api.down("dead")
    assert not (launcher_home / "local" / "dead").exists() and api.status() == []


def test_relaunch_of_an_init_cluster_provisions_afresh() -> None:
    with StateDB() as db:
        db.create_cluster("redo", PlacementRecord("local", "local", None, "local", 1, False))
    result = launch(_task("echo ok"), "redo")
    assert result.created and result.exit_code == 0
    assert api.status()[0].status == "UP"
    api.down("redo")


def test_clusters_of_managed_jobs_are_not_launched_or_exec_on_by_hand() -> None:
    with StateDB() as db:
        db.create_cluster("mj", PlacementRecord("local", "local", None, "local", 1, False),
                          owner="managed-job:7")
        db.set_status("mj", ClusterStatus.UP)
    for fn in (lambda: exec_("mj", "true"), lambda: launch(_task("true"), "mj")):
        with pytest.raises(ClusterNotReadyError, match="belongs to managed-job:7"):
            fn()
    api.down("mj")  # taking it down by hand stays possible


def test_bad_file_mounts_fail_before_anything_is_provisioned(
    launcher_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An S3 mount with no AWS credentials here is refused before provisioning."""
    from launcher.runtime.execution import FileMountError

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(FileMountError, match="needs AWS credentials"):
        launch(_task("true", file_mounts={"~/ckpt": "s3://bucket/ckpt"}), "fm")
    assert api.status() == [] and not (launcher_home / "local" / "fm").exists()


def test_unknown_cluster_errors() -> None:
    for fn in (lambda: api.queue("nope"), lambda: exec_("nope", "true"), lambda: api.stop("nope")):
        with pytest.raises(ClusterNotFoundError, match="does not exist"):
            fn()


def _processes_under(roots: list[Path]) -> dict[int, str]:
    """Live processes whose command line, HOME or cwd lies under one of `roots`."""
    needles = [os.fsencode(str(r)) for r in roots]
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                homes = [v for v in f.read().split(b"\0") if v.startswith(b"HOME=")]
            cwd = os.fsencode(os.readlink(f"/proc/{entry.name}/cwd"))
        except OSError:
            continue
        if any(n in blob for n in needles for blob in (cmdline, cwd, *homes)) and _alive(
                int(entry.name)):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def _assert_no_strays(homes: list[Path]) -> None:
    """No process of `homes` is alive; processes being torn down right now get a moment
    to exit (waited on through pidfds, an event, not a sleep)."""
    real = Path.home() / ".launcher" / "local"
    assert os.environ["LAUNCHER_HOME"] != str(real.parent)
    strays = _processes_under(homes)
    if strays:  # processes being torn down right now get a moment to exit (pidfd = an event)
        import select

        poller = select.poll()
        fds = []
        for pid in strays:
            try:
                fds.append(os.pidfd_open(pid))
                poller.register(fds[-1], select.POLLIN)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while fds and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                poller.unregister(fd)
                os.close(fd)
                fds.remove(fd)
        for fd in fds:
            os.close(fd)
        strays = _processes_under(homes)
    assert strays == {}, f"stray processes: {strays}"


class _NothingLeftCloud:
    """A cloud that reports no node at all for any cluster (a launch killed after its
    security group was made, before RunInstances); its teardown may fail."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.terminated: list[str] = []

    def query(self, cluster: str) -> dict[str, NodeState]:
        return {}

    def terminate(self, cluster: str) -> None:
        if self.fail:
            raise RuntimeError("DependencyViolation (injected)")
        self.terminated.append(cluster)


def test_status_refresh_tears_down_a_cluster_with_no_node_before_forgetting_it() -> None:
    fake = _NothingLeftCloud()
    with StateDB() as db:  # left INIT by a launch killed before any instance existed
        db.create_cluster("half", PlacementRecord("aws", "us-east-1", None, "m6i.large", 2, False))
    views = api.status(refresh=True, cloud_fn=lambda _name: fake)  # type: ignore[arg-type,return-value]
    assert views == [] and fake.terminated == ["half"]


def test_status_refresh_keeps_a_cluster_whose_teardown_failed_and_says_so() -> None:
    fake = _NothingLeftCloud(fail=True)
    with StateDB() as db:
        db.create_cluster("half", PlacementRecord("aws", "us-east-1", None, "m6i.large", 2, False))
    notes: list[str] = []
    views = api.status(refresh=True, cloud_fn=lambda _name: fake, notes=notes)  # type: ignore[arg-type,return-value]
    assert [v.name for v in views] == ["half"]  # kept: `down` can retry
    assert any("half" in n and "teardown failed" in n and "launcher down half" in n
               and "DependencyViolation" in n for n in notes), notes
