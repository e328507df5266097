"""`launcher jobs` CLI behaviour around the controller process and feasibility (real
CLI subprocesses, the real local cloud and controller)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launcher.api import jobs as api

from .test_e2e_local import _running_attempt, _task, _wait, fast_controller  # noqa: F401

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]


def test_launch_y_still_refuses_an_unsatisfiable_task(tmp_path: Path) -> None:
    task = tmp_path / "huge.yaml"
    task.write_text("name: huge\nresources:\n  infra: local\n  accelerators: H100:4096\n"
                    "run: echo hi\n")
    out = subprocess.run([*CLI, "jobs", "launch", "-y", "-d", str(task)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr and out.stderr.strip()
    assert api.jobs_queue() == []  # nothing was queued


def test_queue_and_logs_start_a_missing_controller_and_never_hang(tmp_path: Path) -> None:
    job = api.jobs_launch(_task(tmp_path, count_to=15, step_s=0.1))
    _running_attempt(job.id, 1)
    api.jobs_controller_stop()
    assert not api.jobs_controller_status().running
    out = subprocess.run([*CLI, "jobs", "queue"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "no controller was running" in out.stderr and "started it" in out.stderr
    assert api.jobs_controller_status().running
    api.jobs_controller_stop()
    t0 = time.monotonic()
    out = subprocess.run([*CLI, "jobs", "logs", str(job.id)], capture_output=True, text=True,
                         timeout=90)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 < 60 and "count 15" in out.stdout
    assert api.jobs_status(job.id).status == "SUCCEEDED"


def test_ctrl_c_while_following_says_the_job_keeps_running(tmp_path: Path) -> None:
    proc = subprocess.Popen([*CLI, "jobs", "launch", "-y", _task(tmp_path, count_to=300)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # following: wait for the job's own output
            if "count 1" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "keeps running" in err and "launcher jobs logs 1" in err and "Traceback" not in err
    _wait(lambda: api.jobs_status(1).status == "RUNNING", what="job still running")
    api.jobs_cancel(1)
    assert api.jobs_wait(1, timeout=30).status == "CANCELLED"


def test_a_free_placement_launches_without_a_prompt_and_takes_detach_run(tmp_path: Path) -> None:
    # Like `launch`: only a paid placement asks; stdin here is not a terminal.
    out = subprocess.run([*CLI, "jobs", "launch", "--detach-run", _task(tmp_path, count_to=2)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert "submitted" in out.stderr and "Aborted" not in out.stderr
    [job] = api.jobs_queue()
    _wait(lambda: api.jobs_status(job.id).status == "SUCCEEDED", timeout=60, what="success")


def test_logs_ensures_the_controller_once_at_start(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import contextlib
    import threading

    from launcher.cli import main
    from launcher.jobs.state_machine import ManagedJobStatus as S
    from launcher.jobs.store import JobStore

    store = JobStore()
    job = store.add_job(name="j", task_yaml="run: x", task_source=None, strategy="FAILOVER",
                        max_restarts_on_errors=0, recover_on_exit_codes=())
    calls: list[float] = []
    monkeypatch.setattr(api, "ensure_controller", lambda: calls.append(time.time()))
    end = threading.Timer(1.0, lambda: store.transition(job.id, S.CANCELLED, "test"))
    end.start()
    try:
        with contextlib.suppress(SystemExit):
            main(["jobs", "logs", str(job.id)])
    finally:
        end.cancel()
        store.close()
    assert len(calls) == 1, calls
