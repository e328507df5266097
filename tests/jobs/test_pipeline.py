"""Issue 12: SkyPilot pipelines (several YAML documents) as chained managed jobs.

Loading and planning use task files written here; the chain is run for real on the
local cloud (controller process, agent): a stage starts only after the one before
SUCCEEDED, and a failed stage cancels the rest without running them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.api.pipelines import jobs_launch_pipeline, pipeline_stage_ids, plan_pipeline
from launcher.errors import TaskValidationError
from launcher.jobs.store import JobStore
from launcher.task.model import Task
from launcher.task.pipeline import load_pipeline

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]

PIPELINE = """\
    name: etl
    ---
    name: extract
    resources:
      cpus: 2+
    run: echo extracted
    ---
    name: train
    resources:
      accelerators: H100:8
      use_spot: true
    run: echo trained
    """


@pytest.fixture
def fast_controller(launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.1")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    yield launcher_home
    api.jobs_controller_stop()
    from launcher.clouds.local import LocalCloud, local_root

    root = local_root()
    for name in sorted(p.name for p in root.iterdir()) if root.exists() else []:
        LocalCloud().terminate(name)


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_pipeline_header_and_stages(tmp_path: Path) -> None:
    pl = load_pipeline(_write(tmp_path, PIPELINE))
    assert pl.is_pipeline and pl.name == "etl"
    assert [t.name for t in pl.stages] == ["extract", "train"]
    assert pl.stages[1].candidates()[0].accelerator == "H100"


def test_pipeline_without_header_and_one_document_file(tmp_path: Path) -> None:
    pl = load_pipeline(_write(tmp_path, "run: echo a\n---\nrun: echo b\n"))
    assert pl.name is None and [pl.stage_name(i) for i in range(2)] == ["stage-1", "stage-2"]
    single = load_pipeline(_write(tmp_path, "name: solo\nrun: x\n", "one.yaml"))
    assert not single.is_pipeline and single.stages[0].name == "solo"


def test_a_bad_stage_names_its_field_and_file_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: p\n---\nrun: a\n---\nresources:\n  cpus: many\nrun: b\n")
    with pytest.raises(TaskValidationError) as err:
        load_pipeline(path)
    assert err.value.field == "resources.cpus" and err.value.line == 6


def test_job_groups_are_refused_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: g\nexecution: parallel\n---\nrun: a\n---\nrun: b\n")
    with pytest.raises(TaskValidationError) as err:
        load_pipeline(path)
    assert err.value.field == "execution" and "one after another" in str(err.value)


def test_launch_on_a_pipeline_says_to_use_jobs_launch(tmp_path: Path) -> None:
    with pytest.raises(TaskValidationError, match="launcher jobs launch FILE") as err:
        Task.from_yaml(_write(tmp_path, PIPELINE))
    assert err.value.line == 3


def test_plan_pipeline_plans_every_stage(tmp_path: Path) -> None:
    plans = plan_pipeline(load_pipeline(_write(tmp_path, PIPELINE)))
    assert [sp.name for sp in plans] == ["extract", "train"]
    assert plans[0].plan is not None and plans[1].plan is not None
    assert all(p.accelerator == "H100" and p.use_spot for p in plans[1].plan.placements)


def test_jobs_launch_dryrun_json_plans_every_stage(tmp_path: Path) -> None:
    out = subprocess.run([*CLI, "jobs", "launch", str(_write(tmp_path, PIPELINE)), "--dryrun",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["pipeline"] == "etl" and [s["name"] for s in data["stages"]] == ["extract", "train"]
    assert data["stages"][1]["plan"]["placements"][0]["accelerator"] == "H100"


def test_chain_runs_in_order_and_a_failed_stage_cancels_the_rest(
    tmp_path: Path, fast_controller: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    path = _write(tmp_path, f"""\
        name: chain
        ---
        name: first
        resources: {{cloud: local}}
        run: sleep 1; echo first >> {marks}/order
        ---
        name: second
        resources: {{cloud: local}}
        run: echo second >> {marks}/order; exit 3
        ---
        name: third
        resources: {{cloud: local}}
        run: echo third >> {marks}/order
        """)
    ids_file = marks / "ids"
    path.write_text(path.read_text().replace(
        "run: sleep 1; echo first", f'run: echo "$SKYPILOT_TASK_IDS" > {ids_file}; sleep 1; echo first'))
    jobs = jobs_launch_pipeline(load_pipeline(path))
    ids = [j.id for j in jobs]
    assert pipeline_stage_ids(ids[0]) == ids and pipeline_stage_ids(ids[1]) == [ids[1]]
    final = [api.jobs_wait(i, timeout=90).status for i in ids]
    assert final == ["SUCCEEDED", "FAILED", "CANCELLED"]
    assert (marks / "order").read_text().split() == ["first", "second"]  # never ran third
    # SkyPilot's SKYPILOT_TASK_IDS: every stage's task id, in order
    assert ids_file.read_text().split() == [j.task_id for j in jobs]
    rows = {r.id: r for r in api.jobs_queue()}
    assert [rows[i].display_name for i in ids] == [
        "chain[1/3] first", "chain[2/3] second", "chain[3/3] third"]
    assert rows[ids[2]].pipeline_id == ids[0]
    store = JobStore()
    try:
        third = store.job(ids[2])
    finally:
        store.close()
    assert third.failure_reason and "stage 2 (second" in third.failure_reason


def test_a_header_and_one_task_is_a_plain_task_for_launch(tmp_path: Path) -> None:
    """SkyPilot's `sky launch` takes a one-stage pipeline (header + task) as that task."""
    task = Task.from_yaml(_write(tmp_path, "name: p\n---\nname: only\nrun: echo hi\n"))
    assert task.name == "only" and task.run == "echo hi"
    assert task.line_of("run") == 4  # lines count from the top of the file


def test_a_deadline_stage_keeps_its_deadline_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    text = PIPELINE.replace(
        "      use_spot: true\n",
        "      use_spot: true\n      job_recovery: {strategy: deadline, deadline: 36h, "
        "duration: 24h}\n")
    jobs = jobs_launch_pipeline(load_pipeline(_write(tmp_path, text)), start_controller=False,
                                check=False)
    store = JobStore()
    rows = [store.job(j.id) for j in jobs]
    assert rows[0].deadline is None
    assert rows[1].strategy == "DEADLINE" and rows[1].deadline is not None
    assert rows[1].deadline.work_s == 24 * 3600.0
    bad = text.replace("      use_spot: true\n", "")  # a deadline stage with no spot
    with pytest.raises(TaskValidationError) as err:
        jobs_launch_pipeline(load_pipeline(_write(tmp_path, bad, "bad.yaml")),
                             start_controller=False, check=False)
    assert "stage 2 (train)" in str(err.value) and err.value.field == "resources.use_spot"
