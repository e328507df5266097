"""`launcher jobs queue`'s table writes money like every other listing (launcher.catalog.money):
cents, and a sub-cent cost with two significant digits, never `$0.0000`."""

from __future__ import annotations

import time

import pytest

import launcher.api.jobs as jobs_api
from launcher.cli import main
from launcher.jobs.accounting import JobSummary


def summary(job_id: int, cost: float) -> JobSummary:
    now = time.time()
    return JobSummary(
        id=job_id, name=f"j{job_id}", status="RUNNING", cluster=f"mj-{job_id}-1",
        cloud="local", region="local", zone=None, recoveries=0, restarts_on_errors=0,
        attempts=1, submitted_at=now - 60, started_at=now - 50, ended_at=None, duration_s=50,
        node_hours=0.01, cost_so_far=cost, last_recovery_s=None, work_lost_s=0,
        failure_reason=None,
    )


def test_queue_cost_uses_the_money_format(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rows = [summary(1, 0.0), summary(2, 1234.5), summary(3, 0.0042)]
    monkeypatch.setattr(jobs_api, "ensure_controller", lambda: None)
    monkeypatch.setattr(jobs_api, "jobs_queue", lambda: rows)
    with pytest.raises(SystemExit) as exit_info:
        main(["jobs", "queue"])
    assert exit_info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    costs = [line.split()[-1] for line in lines[1:4]]
    assert costs == ["$0.00", "$1,234.50", "$0.0042"]
    assert "$0.0000" not in "\n".join(lines)
