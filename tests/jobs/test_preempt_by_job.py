"""The managed-spot demo as a person follows it (real CLI, real controller, local cloud):

- `launcher local preempt JOB_ID` (or `--job JOB_ID`) preempts the cluster the job runs
  on now, whatever attempt that is; a wrong id or an ended job is refused clearly;
- the README's managed-spot commands run as written, in order;
- the demo task lasts long enough to follow by hand;
- `jobs logs` shows setup output with one `(setup)` prefix, and a managed job's setup
  sees the job's SKYPILOT_TASK_ID on every attempt.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from launcher.api import jobs as api
from launcher.api.jobs import setup_line
from tests.docs.test_doc_commands import extract, split

from .test_e2e_local import _logs, _running_attempt, _task, _wait, fast_controller  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_preempt_by_job_id_follows_the_job_to_its_current_cluster(tmp_path: Path) -> None:
    job = api.jobs_launch(_task(tmp_path, count_to=3000, step_s=0.1))
    first = _running_attempt(job.id, 1)
    p = _cli("local", "preempt", str(job.id))
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == f"Preempted node(s) 0 of {first}."
    second = _running_attempt(job.id, 2)
    assert second != first
    p = _cli("local", "preempt", "--job", str(job.id), "--notice", "2")
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == f"Preempted node(s) 0 of {second}."
    _running_attempt(job.id, 3)
    assert api.jobs_status(job.id).recoveries == 2
    _wait(lambda: any("resuming from" in ln for ln in _logs(job.id)), what="a resumed attempt")
    api.jobs_cancel(job.id)
    _wait(lambda: api.jobs_status(job.id).status == "CANCELLED", what="cancelled")
    ended = _cli("local", "preempt", str(job.id))
    assert ended.returncode == 1
    assert (f"Managed job {job.id} has ended (CANCELLED): it has no cluster to preempt."
            in ended.stderr)


def test_preempt_refuses_a_missing_job_and_an_ambiguous_target() -> None:
    p = _cli("local", "preempt", "99")
    assert p.returncode == 4 and "No managed job with id 99" in p.stderr
    p = _cli("local", "preempt", "mj-1-1", "--job", "1")
    assert p.returncode == 2 and "Name one cluster or one managed job" in p.stderr
    p = _cli("local", "preempt")
    assert p.returncode == 2 and "Name one cluster or one managed job" in p.stderr
    assert "Traceback" not in p.stderr


def _readme_spot_commands() -> list[list[str]]:
    cmds = [argv for c in extract(REPO / "README.md") for argv in split(c.text)]
    start = next(i for i, a in enumerate(cmds) if "task_examples/count-resumable.yaml" in a)
    spot = cmds[start:start + 4]
    assert [a[1:3] for a in spot] == [["jobs", "launch"], ["jobs", "queue"],
                                      ["local", "preempt"], ["jobs", "logs"]], spot
    return spot


def test_the_readme_managed_spot_walkthrough_runs_as_written() -> None:
    launch, queue, preempt, logs = _readme_spot_commands()
    # as written, at a test's pace (the demo itself lasts ~2 minutes; see the next test)
    p = _cli(*launch[1:], "--env", "STEP_S=0.1")
    assert p.returncode == 0, p.stderr
    m = re.search(r"Managed job (\d+) ", p.stderr)
    assert m, p.stderr
    job_id = int(m.group(1))
    assert job_id == 1  # the id the README's next commands use, on a fresh machine
    first = _running_attempt(job_id, 1)
    p = _cli(*queue[1:])
    assert p.returncode == 0 and first in p.stdout and first == f"mj-{job_id}-1"
    p = _cli(*preempt[1:])
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == f"Preempted node(s) 0 of {first}."
    _running_attempt(job_id, 2)

    def resumed() -> bool:
        out = _cli(*logs[1:])
        assert out.returncode == 0, out.stderr
        return "=== attempt 2 (preemption)" in out.stdout and "resuming from" in out.stdout

    _wait(resumed, what="attempt 2 resumed from the checkpoint")
    api.jobs_cancel(job_id)


def test_the_demo_task_lasts_long_enough_to_follow_by_hand() -> None:
    doc = yaml.safe_load((REPO / "task_examples" / "count-resumable.yaml").read_text())
    envs = doc["envs"]
    assert int(envs["COUNT_TO"]) * float(envs["STEP_S"]) >= 60
    assert doc["resources"]["use_spot"] is True and doc["resources"]["infra"] == "local"


def test_jobs_launch_shows_setup_output_with_one_prefix(tmp_path: Path) -> None:
    ids = tmp_path / "task-ids"
    task = _task(tmp_path, count_to=3, step_s=0.05,
                 setup=f'echo running setup\necho "setup $SKYPILOT_TASK_ID" >> {ids}',
                 run=f'echo "run $SKYPILOT_TASK_ID" >> {ids}; python3 count_resumable.py')
    p = _cli("jobs", "launch", "-y", task)
    assert p.returncode == 0, p.stderr
    assert "(setup) running setup" in p.stdout
    assert "(setup) (setup)" not in p.stdout
    from launcher.jobs.store import JobStore

    store = JobStore()
    task_id = store.job(api.jobs_queue()[-1].id).task_id
    store.close()
    # a managed job's setup sees its task id (SkyPilot sets it), the same as its run
    assert ids.read_text().splitlines() == [f"setup {task_id}", f"run {task_id}"]


def test_setup_line_prefixes_only_what_has_no_prefix() -> None:
    assert setup_line("(setup) running setup") == "(setup) running setup"
    assert setup_line("(setup 2) running setup") == "(setup 2) running setup"
    assert setup_line("Provisioning mj-1-1") == "(setup) Provisioning mj-1-1"
    assert setup_line("(setup-ish) x") == "(setup) (setup-ish) x"
