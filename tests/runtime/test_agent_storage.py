"""The checkpoint store at the agent level: the real agent daemon and rank programs,
each node's bucket_sync.py talking to moto's S3 server on 127.0.0.1.

The nodes get bucket_sync.py in `~/.launcher-storage/` as the client puts it there
(storage_nodes.install_on_nodes); the job spec carries the store and the interval.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.runtime import agent_storage
from launcher.runtime.agent import JobSpec as AgentJobSpec
from tests.checkpoint_view import committed
from tests.moto_s3 import S3Server, s3  # noqa: F401 - the fixture
from tests.runtime.test_agent import RUNTIME_DIR, Agent

STORE = "s3://ckpt-bkt/run/task-1"


@pytest.fixture
def agent2(tmp_path: Path, s3: S3Server) -> Iterator[Agent]:  # noqa: F811
    s3.client().create_bucket(Bucket="ckpt-bkt")
    a = Agent(tmp_path / "cluster", num_nodes=2)  # after `s3`: its env reaches the nodes
    for node in a.nodes:
        (node / ".launcher-storage").mkdir()
        for name in ("bucket_sync.py", "s3_stdlib.py", "checkpoint_sync.py"):
            shutil.copy(RUNTIME_DIR / name, node / ".launcher-storage" / name)
    a.setup()
    try:
        yield a
    finally:
        a.close()


def _until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def _view(s3: S3Server) -> dict[str, str]:  # noqa: F811
    """What a restore of STORE would write (the latest committed saves)."""
    return committed(s3.keys("ckpt-bkt"), lambda k: s3.read("ckpt-bkt", k), "run/task-1")


def _spec(run: str, interval: float) -> dict[str, object]:
    return {"run": run, "num_nodes": 2, "checkpoint_dir": "ckpt", "checkpoint_store": STORE,
            "checkpoint_save_seconds": interval}


def test_restore_then_periodic_save_while_running(agent2: Agent, s3: S3Server) -> None:  # noqa: F811
    s3.client().put_object(Bucket="ckpt-bkt", Key="run/task-1/step.txt", Body=b"41\n")
    run = ('echo "restored $(cat $LAUNCHER_CHECKPOINT_DIR/step.txt)"; '
           'echo $((41 + 1 + LAUNCHER_NODE_RANK)) > "$LAUNCHER_CHECKPOINT_DIR/rank-$LAUNCHER_NODE_RANK.txt"; '
           "sleep 60")
    job = agent2.submit(**{"run": run, "num_nodes": 2},
                        **{k: v for k, v in _spec(run, 0.5).items() if k not in ("run", "num_nodes")})
    _until(lambda: sorted(_view(s3)) == ["rank-0.txt", "rank-1.txt", "step.txt"])
    assert agent2.job(job)["status"] == "RUNNING"  # ... periodically, while the job runs
    assert _view(s3)["rank-1.txt"] == "43\n"  # every node uploads its own directory
    agent2.run("cancel", str(job))
    lines, rec = agent2.logs(job)
    for rank in (0, 1):  # both nodes restored the whole prefix before the run
        assert f"(rank {rank}) restored 41" in lines
        assert any(ln.startswith(f"(rank {rank}) launcher: restored 1 file(s)") for ln in lines)
    assert rec["status"] == "CANCELLED"


def test_save_at_exit_uploads_the_last_write(agent2: Agent, s3: S3Server) -> None:  # noqa: F811
    # (from another directory: the node-relative dir is exported as an absolute path)
    run = 'cd /; sleep 0.3; echo final > "$LAUNCHER_CHECKPOINT_DIR/last-$LAUNCHER_NODE_RANK.txt"'
    spec = {**_spec(run, 3600), "checkpoint_dir": "~/ckpt"}  # no periodic save: only at exit
    job = int(agent2.doc("submit", stdin=json.dumps(spec))["job_id"])
    rec = agent2.wait_status(job)
    assert rec["status"] == "SUCCEEDED"
    # the rank is reported ended only after its save: the objects are there already
    assert _view(s3) == {"last-0.txt": "final\n", "last-1.txt": "final\n"}
    assert (agent2.nodes[1] / "ckpt" / "last-1.txt").read_text() == "final\n"


def test_interruption_notice_saves_at_once(agent2: Agent, s3: S3Server) -> None:  # noqa: F811
    # A job that ignores SIGTERM and is SIGKILLed at the end of the notice's grace: the
    # rank's own save at exit never runs, the daemon's save on the notice does.
    run = ("trap '' TERM; echo 7 > \"$LAUNCHER_CHECKPOINT_DIR/step-$LAUNCHER_NODE_RANK.txt\"; "
           "echo written; sleep 60")
    job = int(agent2.doc("submit", stdin=json.dumps(_spec(run, 3600)))["job_id"])
    _until(lambda: all((n / "ckpt" / f"step-{i}.txt").exists()
                       for i, n in enumerate(agent2.nodes)))
    notice = agent2.home / "notice-rank-1.json"
    tmp = notice.with_suffix(".tmp")
    tmp.write_text(json.dumps({"grace_seconds": 4}))
    tmp.rename(notice)
    _until(lambda: sorted(_view(s3)) == ["step-0.txt", "step-1.txt"], timeout=3.5)
    assert agent2.job(job)["status"] == "RUNNING"  # saved during the grace, not at exit
    agent2.run("cancel", str(job))


def test_hooks_only_for_s3_stores() -> None:
    assert agent_storage.rank_hooks(AgentJobSpec("x", checkpoint_dir="c")) == ([], [], [])
    assert agent_storage.rank_hooks(AgentJobSpec("x", checkpoint_dir="c",
                                                 checkpoint_store="r2://b/p")) == ([], [], [])
    before, during, after = agent_storage.rank_hooks(
        AgentJobSpec("x", checkpoint_dir="c", checkpoint_store="s3://b/p",
                     checkpoint_save_seconds=42))
    assert "restore" in "\n".join(before) and "read -r -t 42 " in "\n".join(during)
    assert "save" in "\n".join(after)
    for interval, shown in [(1e6, "1000000"), (0.25, "0.25"), (1e-5, "0.001")]:
        _, during, _ = agent_storage.rank_hooks(AgentJobSpec(
            "x", checkpoint_dir="c", checkpoint_store="s3://b/p",
            checkpoint_save_seconds=interval))
        assert f"read -r -t {shown} " in "\n".join(during)  # bash's read: no 1e+06, no 0


def _session_processes(sid: int) -> list[str]:
    """'pid cmdline' of each live process in session `sid` (zombies excluded)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(f"{stat.parent.name} {cmd}")
    return out


@pytest.mark.parametrize("how", ["sigkill", "normal"])
def test_saver_loop_ends_with_its_rank(tmp_path: Path, how: str) -> None:
    """The periodic saver runs while the rank runs and is gone as soon as the rank's bash
    program is, even when that program is SIGKILLed (no trap runs) with an hour left on the
    saver's interval."""
    import os
    import signal
    import subprocess

    from launcher.runtime import agent

    home = tmp_path / "home"
    (home / ".launcher-storage").mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    (home / ".launcher-storage" / "bucket_sync.py").write_text(
        f"import sys\nopen({str(calls)!r}, 'a').write(sys.argv[1] + '\\n')\n")
    spec = AgentJobSpec("x", checkpoint_dir="ckpt", checkpoint_store="s3://b/p",
                        checkpoint_save_seconds=0.2 if how == "normal" else 3600)
    run = "sleep 1.5" if how == "normal" else "sleep 60"
    script = agent.rank_script([], None, run, job_id=1, rank=0,
                               hooks=agent_storage.rank_hooks(spec))
    proc = subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "HOME": str(home)},
                            start_new_session=True)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(script.encode())
    proc.stdin.close()
    line = proc.stderr.readline().decode()
    assert line.startswith("LAUNCHER_PGID="), line
    run_pgid = int(line.split("=")[1])
    try:
        if how == "sigkill":
            _until(lambda: len(_session_processes(proc.pid)) >= 3)  # wrapper, run, saver
            proc.kill()  # as a lost node or a SIGKILLed agent would
            proc.wait(timeout=10)
            os.killpg(run_pgid, signal.SIGKILL)  # the run: the agent's stale-group cleanup
        else:
            assert proc.wait(timeout=30) == 0
            saves = calls.read_text().split()
            assert saves[0] == "restore" and saves[-1] == "save"
            assert saves.count("save") >= 2, saves  # periodic (every 0.2 s), then at exit
            # only the wrapper's own lines on its control channel (no job notices)
            assert proc.stderr.read().decode().splitlines() == ["LAUNCHER_EXIT=0"]
        _until(lambda: _session_processes(proc.pid) == [], timeout=3.0)
    finally:
        for entry in _session_processes(proc.pid):
            os.kill(int(entry.split()[0]), signal.SIGKILL)
