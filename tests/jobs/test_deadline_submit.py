"""Submitting a DEADLINE job (refusals naming the field, the settings stored with the job)
and what `launcher jobs queue` shows of it (table and --json)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.errors import TaskValidationError
from launcher.jobs import deadline_store as dl
from launcher.jobs.store import JobStore
from launcher.task.model import Task


def _task(body: str, spot: bool = True) -> Task:
    return Task.from_yaml_str(
        "name: d\nresources:\n  infra: local\n" + ("  use_spot: true\n" if spot else "")
        + "  job_recovery:\n" + "".join(f"    {ln}\n" for ln in body.strip().splitlines())
        + "run: echo hi\n")


def test_settings_are_stored_with_the_job(launcher_home: Path) -> None:
    before = time.time()
    job = api.jobs_launch(_task("strategy: deadline\ndeadline: 36h\nduration: 24h\n"
                                "restart_overhead: 15m\nprogress: reported\npolicy: greedy"),
                          start_controller=False, check=False)
    store = JobStore()
    row = store.job(job.id)
    assert row.strategy == "DEADLINE" and row.deadline is not None
    assert before + 36 * 3600 <= row.deadline.deadline_at <= time.time() + 36 * 3600
    assert (row.deadline.work_s, row.deadline.restart_overhead_s) == (24 * 3600.0, 900.0)
    assert (row.deadline.progress, row.deadline.policy) == ("reported", "greedy")
    stored = Task.from_dict(json.loads(row.task_yaml))  # what the controller relaunches
    assert stored.job_recovery == _task(
        "strategy: deadline\ndeadline: 36h\nduration: 24h\nrestart_overhead: 15m\n"
        "progress: reported\npolicy: greedy").job_recovery


def test_absolute_deadline_and_default_policy(launcher_home: Path) -> None:
    at = time.time() + 7200
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    job = api.jobs_launch(_task(f"strategy: deadline\ndeadline: '{iso}'\nduration: 1h"),
                          start_controller=False, check=False)
    row = JobStore().job(job.id)
    assert row.deadline is not None and abs(row.deadline.deadline_at - int(at)) < 1
    assert row.deadline.policy == "launcher" and row.deadline.restart_overhead_s is None


@pytest.mark.parametrize(
    ("body", "spot", "field", "words"),
    [
        ("strategy: deadline\ndeadline: 36h\nduration: 24h", False, "resources.use_spot",
         "nothing to save"),
        ("strategy: deadline\ndeadline: '2020-01-01T00:00Z'\nduration: 1h", True,
         "resources.job_recovery.deadline", "already past"),
        ("strategy: deadline\ndeadline: '{soon}'\nduration: 1h", True,
         "resources.job_recovery.deadline", "cannot be met even on on-demand"),
    ],
)
def test_refusals_name_the_field(launcher_home: Path, body: str, spot: bool, field: str,
                                 words: str) -> None:
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1800))
    with pytest.raises(TaskValidationError) as err:
        api.jobs_launch(_task(body.replace("{soon}", soon), spot), start_controller=False,
                        check=False)
    assert err.value.field == field and words in str(err.value)
    assert api.jobs_queue() == []  # nothing was queued


def test_queue_shows_deadline_mode_progress_and_projected_finish(
        launcher_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = api.jobs_launch(_task("strategy: deadline\ndeadline: 10h\nduration: 4h\n"
                                "restart_overhead: 10m"), start_controller=False, check=False)
    store = JobStore()
    row = store.job(job.id)
    now = time.time()
    # what the controller logs: a decision to go spot, the spot gang progressing for 1 h
    dl.add_log(store, job.id, now - 3700, "decision", "tick", tick=0, mode="spot",
               current="idle", spot_available=True, done_s=0.0, slack_s=6 * 3600.0,
               restart_overhead_s=600.0, attempt=1)
    dl.add_log(store, job.id, now - 3600, "running", "attempt 1 up", mode="spot", attempt=1)
    summary = api.jobs_status(job.id)
    assert summary.deadline_at == row.deadline.deadline_at  # type: ignore[union-attr]
    assert (summary.mode, summary.decided) == ("spot", "spot")
    assert summary.progress == pytest.approx(0.25, abs=0.01)
    assert summary.projected_finish_at == pytest.approx(now + 3 * 3600, abs=60)
    from launcher.cli import main

    monkeypatch.setattr(api, "ensure_controller", lambda: None)
    with contextlib.suppress(SystemExit):
        main(["jobs", "queue", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out[0]["mode"] == "spot" and out[0]["progress"] == pytest.approx(0.25, abs=0.01)
    assert {"deadline_at", "projected_finish_at", "decided"} <= set(out[0])
    with contextlib.suppress(SystemExit):
        main(["jobs", "queue"])
    text = capsys.readouterr().out
    assert "PROJECTED FINISH" in text and "spot" in text and "25%" in text


def test_deadline_tick_from_config_then_environment(launcher_home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.config.settings import ConfigError
    from launcher.jobs.daemon import config_from_env

    assert config_from_env().deadline_tick_s == 60.0
    (launcher_home / "config.yaml").write_text("jobs:\n  deadline_tick: 2m\n")
    assert config_from_env().deadline_tick_s == 120.0
    monkeypatch.setenv("LAUNCHER_JOBS_DEADLINE_TICK_S", "0.5")
    assert config_from_env().deadline_tick_s == 0.5
    (launcher_home / "config.yaml").write_text("jobs:\n  deadline_tick: soon\n")
    from launcher.config.settings import load_config

    with pytest.raises(ConfigError) as err:
        load_config()
    assert "jobs.deadline_tick" in str(err.value)


def test_logs_leave_out_refused_spot_launches(launcher_home: Path) -> None:
    from launcher.jobs import paths

    job = api.jobs_launch(_task("strategy: deadline\ndeadline: 10h\nduration: 4h"),
                          start_controller=False, check=False)
    store = JobStore()
    store.add_attempt(job.id, 1, "mj-z-1", "initial", market="spot")
    store.update_attempt(job.id, 1, outcome="NO_RESOURCE_RETRY", outcome_applied=1,
                         phase="ENDED", torn_down_at=time.time())
    store.add_attempt(job.id, 2, "mj-z-2", "initial", market="on_demand")
    store.update_attempt(job.id, 2, cloud="local", region="local", outcome="FAILED",
                         outcome_applied=1, phase="ENDED", torn_down_at=time.time(),
                         cluster_job_id=1)
    log = paths.attempt_log_path(job.id, 2)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("(rank 0) hello\n")
    lines: list[str] = []
    api.jobs_logs(job.id, lines.append, follow=False)
    assert not any("attempt 1" in ln for ln in lines)
    assert any("attempt 2" in ln for ln in lines) and "(rank 0) hello" in lines
