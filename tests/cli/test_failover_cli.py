"""`launch` when every placement failed: the failover history as a table (stderr) or,
with --json, as {"error", "attempts"}; the exit code is ProvisionFailedError's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import launcher.api.launch as api_launch
from launcher.cli import main
from launcher.clouds.base import FailoverAttempt, ProvisionFailedError

HISTORY = [
    FailoverAttempt("aws", "us-east-1", "us-east-1a", "p5.48xlarge", "CapacityError",
                    "InsufficientInstanceCapacity: none left"),
    FailoverAttempt("gcp", "us-central1", None, "a3-highgpu-8g", "QuotaError",
                    "GPUS_ALL_REGIONS exceeded"),
]


@pytest.fixture
def failing_launch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def launch(task: object, name: str, **kw: Any) -> None:
        seen.update(kw)
        raise ProvisionFailedError("Could not provision cluster 'c': every placement failed.",
                                   HISTORY)

    monkeypatch.setattr(api_launch, "launch", launch)
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cpus: 1+\nrun: echo hi\n")
    return task, seen


def _run(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return int(exit_info.value.code or 0)


def test_history_table(failing_launch: tuple[Path, dict[str, Any]],
                       capsys: pytest.CaptureFixture[str]) -> None:
    task, seen = failing_launch
    code = _run(["launch", str(task), "-c", "c", "-y", "--retry-until-up"])
    err = capsys.readouterr().err
    assert code == ProvisionFailedError.exit_code
    lines = err.splitlines()
    header = next(ln for ln in lines if ln.startswith("CLOUD"))
    assert header.split() == ["CLOUD", "REGION", "ZONE", "INSTANCE", "TYPE", "ERROR", "MESSAGE"]
    aws = next(ln for ln in lines if ln.startswith("aws"))
    assert aws.split()[:5] == ["aws", "us-east-1", "us-east-1a", "p5.48xlarge", "CapacityError"]
    assert "InsufficientInstanceCapacity: none left" in aws
    assert next(ln for ln in lines if ln.startswith("gcp")).split()[2] == "-"
    assert lines[-1] == "Error: Could not provision cluster 'c': every placement failed."
    assert seen["retry_until_up"] is True


def test_history_json(failing_launch: tuple[Path, dict[str, Any]],
                      capsys: pytest.CaptureFixture[str]) -> None:
    task, seen = failing_launch
    code = _run(["launch", str(task), "-c", "c", "-y", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == ProvisionFailedError.exit_code
    assert out["error"].startswith("Could not provision cluster 'c'")
    assert [(a["cloud"], a["zone"], a["error_type"]) for a in out["attempts"]] == [
        ("aws", "us-east-1a", "CapacityError"), ("gcp", None, "QuotaError")]
    assert seen["retry_until_up"] is False
