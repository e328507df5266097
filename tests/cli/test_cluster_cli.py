"""The cluster commands as a user runs them: real `launcher` processes, exit codes, JSON
shapes, no tracebacks, concurrency between CLIs, a client killed mid-job."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

from launcher.cli import main
from launcher.state.db import PlacementRecord, StateDB

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]




def run(*args: str, timeout: float = 60, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
        env=os.environ.copy(), cwd=REPO,
    )


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL, env=os.environ.copy(), cwd=REPO,
    )


def write_task(path: Path, run_script: str, *, nodes: int = 1, setup: str | None = None) -> Path:
    lines = [f"name: {path.stem}", f"num_nodes: {nodes}", "resources:", "  infra: local", "run: |"]
    lines += [f"  {x}" for x in run_script.splitlines()]
    if setup is not None:
        lines += ["setup: |"] + [f"  {x}" for x in setup.splitlines()]
    path.write_text("\n".join(lines) + "\n")
    return path


def no_traceback(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr


def test_readme_command_hello_without_y_on_a_non_tty(launcher_home: Path) -> None:
    """README command 1: the free local cloud never asks, even with stdin not a terminal."""
    p = run("launch", "task_examples/hello.yaml")
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert "(rank 0) hello from node 0 of 1" in p.stdout.splitlines()
    assert "Cluster name: launcher-" in p.stderr
    status = json.loads(run("status", "--json").stdout)
    assert len(status) == 1
    assert set(status[0]) == {"name", "cloud", "region", "zone", "num_nodes", "status", "hourly_cost", "autostop",
                              "status_reason", "status_seen_at"}
    assert status[0]["cloud"] == "local" and status[0]["status"] == "UP" and status[0]["autostop"] is None
    name = status[0]["name"]
    jobs = json.loads(run("queue", name, "--json").stdout)
    assert [set(j) for j in jobs] == [{"id", "name", "status", "submitted_at", "started_at", "ended_at", "exit_code"}]
    assert jobs[0]["status"] == "SUCCEEDED" and jobs[0]["exit_code"] == 0
    assert isinstance(jobs[0]["submitted_at"], float)
    refused = run("down", name)  # no -y and stdin is not a terminal: refuse, keep it
    no_traceback(refused)
    assert refused.returncode == 1 and "-y" in refused.stderr
    assert run("down", "--all", "-y").returncode == 0
    assert json.loads(run("status", "--json").stdout) == []


def test_multinode_rendezvous_example() -> None:
    p = run("launch", "task_examples/multinode-rendezvous.yaml", "-c", "rdv", "-y", timeout=120)
    assert p.returncode == 0, p.stderr
    for rank in range(3):
        assert any(
            line.startswith(f"(rank {rank}) rank {rank}/3: ring all-reduce OK") for line in p.stdout.splitlines()
        ), p.stdout
    run("down", "rdv", "-y")


def test_job_exit_code_is_the_cli_exit_code(tmp_path: Path) -> None:
    task = write_task(tmp_path / "fail.yaml", 'echo "rank $LAUNCHER_NODE_RANK"\n[ "$LAUNCHER_NODE_RANK" = 1 ] && exit 7\nsleep 20', nodes=2)
    p = run("launch", str(task), "-c", "ec", "-y")
    no_traceback(p)
    assert p.returncode == 7
    assert "FAILED" in p.stderr
    e = run("exec", "ec", "--", "exit 3")
    assert e.returncode == 3
    ok = run("exec", "ec", "--", "echo", "two", "words")
    assert ok.returncode == 0 and ok.stdout.strip() == "(rank 0) two words"
    d = run("exec", "ec", "-d", "--", "sleep 60")
    assert d.returncode == 0 and "Job 4 submitted" in d.stderr
    c = run("cancel", "ec", "4")
    assert c.returncode == 0 and "Cancelled job(s) 4" in c.stderr
    jobs = json.loads(run("queue", "ec", "--json").stdout)
    assert [(j["id"], j["status"], j["exit_code"]) for j in jobs][:3] == [
        (1, "FAILED", 7), (2, "FAILED", 3), (3, "SUCCEEDED", 0)]
    assert jobs[3]["status"] == "CANCELLED"
    c = run("cancel", "ec", "9")
    assert c.returncode == 4 and "no job 9" in c.stderr
    no_traceback(c)
    lg = run("logs", "ec", "1")  # a followed log ends like exec/launch: with the verdict
    assert lg.returncode == 7 and "Job 1 on ec FAILED" in lg.stderr
    typo = run("exec", "ec", "typo.yaml")  # never run as a shell command
    no_traceback(typo)
    assert typo.returncode != 0 and "not found" in typo.stderr and "-- CMD" in typo.stderr
    q = run("exec", "ec", "--", "printf", "%s|", "a  b", "c'd")  # word quoting survives
    assert q.returncode == 0 and q.stdout.strip() == "(rank 0) a  b|c'd|"
    bg = run("exec", "ec", "--", "sleep 7$((7+0))7 & echo started")  # background child
    assert bg.returncode == 0 and bg.stdout.strip() == "(rank 0) started"
    assert subprocess.run(["pgrep", "-f", "^sleep 777$"], capture_output=True).returncode == 1
    client = spawn("exec", "ec", "--", "echo go; sleep 30")
    assert client.stdout is not None and client.stdout.readline().strip() == "(rank 0) go"
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=20)
    assert "launcher logs ec 7" in err and "launcher cancel ec 7" in err, err
    run("down", "ec", "-y")


def test_setup_failure_message(tmp_path: Path) -> None:
    task = write_task(tmp_path / "sf.yaml", "echo never", setup="echo 'pip: resolution impossible'\nexit 5")
    p = run("launch", str(task), "-c", "sfc", "-y")
    no_traceback(p)
    assert p.returncode == 1
    assert "Setup failed on node 0" in p.stderr and "pip: resolution impossible" in p.stderr
    run("down", "sfc", "-y")


def test_errors_are_one_paragraph_with_exit_codes(tmp_path: Path) -> None:
    p = run("queue", "nope")
    no_traceback(p)
    assert p.returncode == 4 and "does not exist" in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnum_nodez: 2\nrun: echo\n")
    p = run("launch", str(bad), "-y")
    no_traceback(p)
    assert p.returncode == 2 and "num_nodez" in p.stderr
    p = run("launch", str(tmp_path / "missing.yaml"), "-y")
    assert p.returncode == 2 and "does not exist" in p.stderr
    p = run("launch", "task_examples/hello.yaml", "-c", "Bad_Name", "-y")
    assert p.returncode == 2 and "Invalid cluster name" in p.stderr
    p = run("down", "nope", "-y")
    assert p.returncode == 4
    p = run("cancel", "nope")  # no ids: the latest job of a cluster that does not exist
    assert p.returncode == 4 and "does not exist" in p.stderr
    no_traceback(p)


def test_dryrun_json_launches_nothing() -> None:
    p = run("launch", "task_examples/multinode-rendezvous.yaml", "--dryrun", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict)
    assert json.loads(run("status", "--json").stdout) == []


def test_same_name_launched_twice_at_once_one_is_refused(tmp_path: Path) -> None:
    gate = tmp_path / "release"
    # the first launch holds the cluster (its setup waits for the gate) while the second starts
    task = write_task(
        tmp_path / "slow.yaml", "echo done",
        setup=f"for i in $(seq 600); do [ -e {gate} ] && exit 0; sleep 0.05; done; exit 1",
    )
    first = spawn("launch", str(task), "-c", "twin", "-y")
    assert first.stderr is not None
    for line in first.stderr:
        if "Running setup" in line:
            break
    second = run("launch", str(task), "-c", "twin", "-y")
    no_traceback(second)
    assert second.returncode == 5 and "is busy" in second.stderr, second.stderr
    assert f"process {first.pid}" in second.stderr
    gate.touch()
    out, err = first.communicate(timeout=90)
    assert first.returncode == 0, err
    assert "(rank 0) done" in out
    status = json.loads(run("status", "--json").stdout)
    assert [(s["name"], s["status"]) for s in status] == [("twin", "UP")]
    run("down", "twin", "-y")


def test_two_different_names_at_once_both_launch(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pair.yaml", "echo ok")
    procs = [spawn("launch", str(task), "-c", name, "-y") for name in ("one", "two")]
    for p in procs:
        _, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
    # and a status at the same time as a launch works too
    status = json.loads(run("status", "--json").stdout)
    assert sorted(s["name"] for s in status) == ["one", "two"]
    assert run("down", "one", "two", "-y").returncode == 0


def test_client_killed_mid_job_job_finishes_and_logs_are_complete(tmp_path: Path) -> None:
    task = write_task(tmp_path / "long.yaml", "echo start\nsleep 1\necho middle\nsleep 1\necho end")
    client = spawn("launch", str(task), "-c", "kc", "-y")
    assert client.stdout is not None
    first = client.stdout.readline()
    assert first.strip() == "(rank 0) start"
    client.send_signal(signal.SIGKILL)
    client.wait()
    # follow from another client until the end, then a no-follow read is complete
    f = run("logs", "kc", "1")
    assert f.returncode == 0 and f.stdout.splitlines() == ["(rank 0) start", "(rank 0) middle", "(rank 0) end"]
    nf = run("logs", "kc", "--no-follow")
    assert nf.stdout.splitlines() == ["(rank 0) start", "(rank 0) middle", "(rank 0) end"]
    assert json.loads(run("queue", "kc", "--json").stdout)[0]["status"] == "SUCCEEDED"
    run("down", "kc", "-y")


def test_local_preempt_cli_and_status(tmp_path: Path, launcher_home: Path) -> None:
    task = write_task(tmp_path / "sig.yaml", "trap 'echo TERM > ~/term.txt; exit 143' TERM\necho up\nwhile true; do sleep 0.1; done", nodes=2)
    assert run("launch", str(task), "-c", "lp", "-y", "--detach-run").returncode == 0
    deadline = time.monotonic() + 15
    while json.loads(run("queue", "lp", "--json").stdout)[0]["status"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    p = run("local", "preempt", "lp", "--node", "0", "--notice", "10")
    assert p.returncode == 0, p.stderr
    assert (launcher_home / "local" / "lp" / "node-0" / "term.txt").read_text().strip() == "TERM"
    status = json.loads(run("status", "--json").stdout)
    assert status[0]["status"] == "PREEMPTED"
    e = run("exec", "lp", "--", "true")
    assert e.returncode == 4 and "PREEMPTED" in e.stderr
    assert run("local", "preempt", "nope").returncode == 4
    run("down", "lp", "-y")


def test_stop_start_autostop_cli() -> None:
    assert run("launch", "task_examples/hello.yaml", "-c", "life", "-y", "-i", "30").returncode == 0
    assert json.loads(run("status", "--json").stdout)[0]["autostop"] == {"idle_minutes": 30, "down": False}
    assert run("autostop", "life", "-i", "10", "--down").returncode == 0
    assert json.loads(run("status", "--json").stdout)[0]["autostop"] == {"idle_minutes": 10, "down": True}
    assert run("autostop", "life").returncode == 0  # no -i: 5 minutes, as in SkyPilot
    assert json.loads(run("status", "--json").stdout)[0]["autostop"] == {"idle_minutes": 5, "down": False}
    assert run("autostop", "life", "--cancel").returncode == 0
    no_names = run("stop")
    assert no_names.returncode == 2 and "give cluster names" in no_names.stderr
    assert run("stop", "life", "-y").returncode == 0  # SkyPilot's `sky stop -y` spelling
    assert json.loads(run("status", "--json").stdout)[0]["status"] == "STOPPED"
    assert run("start", "life", "-y").returncode == 0
    ex = run("exec", "life", "--", "echo back")
    assert ex.returncode == 0 and ex.stdout.strip() == "(rank 0) back"
    assert run("down", "life", "-y").returncode == 0


def test_status_of_an_unknown_cluster_names_it(launcher_home: Path) -> None:
    """`status typo` must not say "No clusters." and exit 0 as if none existed."""
    p = run("status", "nosuch")
    no_traceback(p)
    assert p.returncode == 4
    assert p.stderr.startswith("Error: Cluster 'nosuch' does not exist.")  # as every command
    assert "No clusters." not in p.stderr
    q = run("queue", "nosuch")
    assert q.stderr.splitlines()[0].startswith("Error: Cluster 'nosuch' does not exist.")
    two = run("status", "nosuch", "other")
    assert two.stderr.startswith("Error: Clusters not found: nosuch, other.")
    j = run("status", "nosuch", "--json")
    assert j.returncode == 4 and json.loads(j.stdout) == []
    assert run("status").returncode == 0


def test_cancel_without_ids_cancels_the_latest_active_job(tmp_path: Path) -> None:
    """`launcher cancel NAME` (SkyPilot's `sky cancel NAME`) stops the newest active job."""
    task = write_task(tmp_path / "idle.yaml", "true")
    assert run("launch", str(task), "-c", "cl", "-y").returncode == 0
    assert run("exec", "cl", "-d", "--", "sleep 60").returncode == 0
    assert run("exec", "cl", "-d", "--", "sleep 60").returncode == 0
    c = run("cancel", "cl")
    no_traceback(c)
    assert c.returncode == 0 and "Cancelled job(s) 3" in c.stderr
    jobs = json.loads(run("queue", "cl", "--json").stdout)
    assert [j["status"] for j in jobs][1:] == ["RUNNING", "CANCELLED"]
    assert run("cancel", "cl", "-a").returncode == 0
    n = run("cancel", "cl")
    assert n.returncode == 0 and "No pending or running jobs" in n.stderr
    run("down", "cl", "-y")


def test_image_id_on_local_is_reported_as_ignored(tmp_path: Path) -> None:
    """A docker image on the local cloud is not applied; the launch says so instead of
    silently running the task on the host."""
    task = tmp_path / "img.yaml"
    task.write_text("resources:\n  infra: local\n  image_id: docker:ubuntu:22.04\nrun: echo hi\n")
    p = run("launch", str(task), "-c", "img", "-y")
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert "image_id 'docker:ubuntu:22.04' is ignored on the local cloud" in p.stderr
    run("down", "img", "-y")


def test_launch_dryrun_takes_skypilot_use_spot_and_infra_overrides() -> None:
    """`sky launch --use-spot --infra aws/us-east-1` spellings override the task."""
    p = run("launch", "task_examples/train-2node-rdma.yaml", "--dryrun", "--json",
            "--use-spot", "--infra", "aws/us-east-1")
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["placements"]
    assert rows and all(r["use_spot"] and (r["cloud"], r["region"]) == ("aws", "us-east-1") for r in rows)
    both = run("launch", "task_examples/hello.yaml", "--dryrun", "--infra", "aws", "--cloud", "aws")
    assert both.returncode == 2 and "not both" in both.stderr


def test_ctrl_c_during_setup_says_what_is_left(tmp_path: Path) -> None:
    """Ctrl-C before the job is submitted names the cluster left UP and what to do."""
    task = write_task(tmp_path / "slowsetup.yaml", "echo ran", setup="sleep 30")
    proc = spawn("launch", str(task), "-c", "intr", "-y")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(s["name"] == "intr" and s["status"] == "UP"
               for s in json.loads(run("status", "--json").stdout)):
            break
        time.sleep(0.2)
    time.sleep(0.5)  # into setup
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err
    assert "Interrupted before the job was submitted; cluster intr is UP" in err
    assert "launcher down intr" in err
    run("down", "intr", "-y")


def test_down_says_an_unknown_cluster_does_not_exist_before_asking(
        launcher_home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    p = run("down", "nosuch")  # stdin is not a terminal: it would refuse without -y
    no_traceback(p)
    assert p.returncode == 4
    assert p.stderr.startswith("Error: Cluster 'nosuch' does not exist.")
    assert "pass -y" not in p.stderr
    # with a real cluster beside it, only the real one is asked about
    with StateDB() as db:
        db.create_cluster("real", PlacementRecord(
            cloud="local", region="local", zone=None, instance_type="local", num_nodes=1,
            use_spot=False, hourly_cost=0.0, resources="1x local"))
    asked: list[str] = []

    def confirm(text: str, **_: object) -> bool:
        asked.append(text)
        return False  # the user says no

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(typer, "confirm", confirm)
    monkeypatch.setattr(sys, "stdin", Tty())
    with pytest.raises(SystemExit) as exit_info:
        main(["down", "nosuch", "real"])
    err = capsys.readouterr().err
    assert asked == ["Terminate real?"]
    assert err.splitlines()[0].startswith("Error: Cluster 'nosuch' does not exist.")
    assert exit_info.value.code == 130  # declined
    with StateDB() as db:
        assert db.get_cluster("real") is not None
