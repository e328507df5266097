"""Client-side orchestration on real local nodes: file sync, parallel setup, fail fast, env."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launcher.clouds.base import ProvisionRequest
from launcher.clouds.local import LocalCloud
from launcher.runtime import execution
from launcher.runtime.execution import (
    FileMountError,
    SetupFailedError,
    node_env,
    open_runners,
    resolve_file_mounts,
    run_setup,
    sync_task_files,
)
from launcher.task.model import Task


def _cluster(name: str, nodes: int):  # type: ignore[no-untyped-def]
    return LocalCloud().provision(
        ProvisionRequest(name, "local", "local", None, "local", nodes, False)
    )


def test_node_env_has_launcher_and_skypilot_names() -> None:
    cluster = _cluster("env", 3)
    env = node_env(cluster, 2, gpus_per_node=2, task_id="t-1", cuda_visible_devices="4,5")
    assert env["LAUNCHER_NODE_RANK"] == env["SKYPILOT_NODE_RANK"] == "2"
    assert env["LAUNCHER_NODE_IPS"] == "127.0.0.1\n127.0.0.1\n127.0.0.1"
    assert env["SKYPILOT_NUM_NODES"] == "3" and env["LAUNCHER_NUM_GPUS_PER_NODE"] == "2"
    assert env["LAUNCHER_TASK_ID"] == "t-1" and env["CUDA_VISIBLE_DEVICES"] == "4,5"
    info = json.loads(env["LAUNCHER_CLUSTER_INFO"])
    assert info == {"cluster_name": "env", "cloud": "local", "region": "local", "zone": None, "num_nodes": 3}


def test_sync_workdir_and_file_mounts_to_every_node(tmp_path: Path) -> None:
    work = tmp_path / "proj"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "a.py").write_text("print(1)")
    (work / ".gitignore").write_text("*.log\n")
    (work / "big.log").write_text("ignored")
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.txt").write_text("data")
    single = tmp_path / "one.txt"
    single.write_text("one")
    task = Task.from_dict({"workdir": str(work), "file_mounts": {"~/data": str(data), "cfg/one.txt": str(single)}})
    cluster = _cluster("sync", 2)
    events: list[str] = []
    sync_task_files(open_runners(cluster), task, on_event=events.append)
    for node in cluster.nodes:
        root = Path(node.local_root or "")
        assert (root / "sky_workdir" / "pkg" / "a.py").read_text() == "print(1)"
        assert not (root / "sky_workdir" / "big.log").exists()
        assert (root / "data" / "d.txt").read_text() == "data"
        assert (root / "cfg" / "one.txt").read_text() == "one"
    assert events and "2 node(s)" in events[0]


def test_unsupported_bucket_file_mount_is_refused_clearly() -> None:
    task = Task.from_dict({"file_mounts": {"~/ckpt": "r2://bucket/ckpt"}})
    with pytest.raises(FileMountError, match="r2 buckets .* not supported yet"):
        sync_task_files(open_runners(_cluster("b", 1)), task)


def test_bucket_file_mount_error_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("run: echo\nfile_mounts:\n  /ckpt: r2://bucket/ckpt\n")
    with pytest.raises(FileMountError) as err:
        resolve_file_mounts(Task.from_yaml(str(path)))
    assert "t.yaml:3, field 'file_mounts./ckpt'" in str(err.value)
    assert "not supported yet" in str(err.value)


def test_setup_runs_on_all_nodes_in_parallel_with_env_and_logs(launcher_home: Path) -> None:
    cluster = _cluster("setup", 3)
    runners = open_runners(cluster)
    envs = [{**node_env(cluster, n.rank), "GREETING": "hi"} for n in cluster.nodes]
    lines: list[str] = []
    log_dir = execution.setup_log_dir("setup")
    t0 = time.monotonic()
    run_setup(
        cluster, runners,
        'echo "$GREETING from $LAUNCHER_NODE_RANK in $PWD"; sleep 0.5; touch ~/setup-done',
        envs=envs, log_dir=log_dir, on_line=lines.append,
    )
    assert time.monotonic() - t0 < 1.4  # parallel, not 3 x 0.5 s
    assert sorted(lines) == [f"(setup {r}) hi from {r} in {cluster.nodes[r].local_root}" for r in range(3)]
    for n in cluster.nodes:
        assert (Path(n.local_root or "") / "setup-done").exists()
        log = (log_dir / f"setup-node-{n.rank}.log").read_text()
        assert f"hi from {n.rank}" in log
    assert log_dir.parent == launcher_home / "logs" / "setup"


def test_setup_runs_in_synced_workdir(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "req.txt").write_text("numpy")
    cluster = _cluster("wd", 1)
    runners = open_runners(cluster)
    sync_task_files(runners, Task.from_dict({"workdir": str(work)}))
    lines: list[str] = []
    run_setup(cluster, runners, "cat req.txt", envs=[{}], log_dir=execution.setup_log_dir("wd"), on_line=lines.append)
    assert lines == ["(setup) numpy"]


def test_setup_failure_fails_fast_kills_others_and_names_node() -> None:
    cluster = _cluster("fail", 3)
    runners = open_runners(cluster)
    script = (
        'if [ "$LAUNCHER_NODE_RANK" = 1 ]; then echo "pip: no matching distribution" >&2; '
        'echo line2; exit 42; fi; sleep 30; touch ~/should-not-exist'
    )
    t0 = time.monotonic()
    with pytest.raises(SetupFailedError) as ei:
        run_setup(cluster, runners, script, envs=[node_env(cluster, r) for r in range(3)],
                  log_dir=execution.setup_log_dir("fail"))
    assert time.monotonic() - t0 < 10
    err = ei.value
    assert err.rank == 1 and err.returncode == 42
    assert "node 1" in str(err) and "pip: no matching distribution" in str(err) and "line2" in str(err)
    assert "exit code 42" in str(err) and str(err.log_path) in str(err)
    # the other nodes' setup was killed: their `touch` never runs
    time.sleep(0.2)
    for r in (0, 2):
        assert not (Path(cluster.nodes[r].local_root or "") / "should-not-exist").exists()
    LocalCloud().terminate("fail")


def test_parallel_reraises_first_error() -> None:
    def f(x: int) -> int:
        if x == 2:
            raise ValueError("two")
        return x * 10

    assert execution.parallel(f, [1, 3]) == [10, 30]
    with pytest.raises(ValueError, match="two"):
        execution.parallel(f, [1, 2, 3])
