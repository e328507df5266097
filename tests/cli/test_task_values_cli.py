"""Envs and secrets without a value in the YAML: planning (cost, --dryrun) works
without them; a real launch / managed job needs them, given with --env/--secret
(NAME=VALUE or a bare NAME taken from the caller's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]

TASK = """\
name: needs-values
resources:
  {where}
envs:
  HF_TOKEN: null
secrets:
  WANDB_API_KEY: null
run: echo "token=$HF_TOKEN key=$WANDB_API_KEY"
"""




def run(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **(extra_env or {})}, cwd=REPO, stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def task_file(tmp_path: Path, where: str) -> str:
    path = tmp_path / "t.yaml"
    path.write_text(TASK.format(where=where))
    return str(path)


def test_cost_and_dryrun_need_no_values(tmp_path: Path) -> None:
    path = task_file(tmp_path, "accelerators: H100:8")
    cost = run("cost", path, "--json")
    assert cost.returncode == 0, cost.stderr
    dry = run("launch", path, "--dryrun", "--json")
    assert dry.returncode == 0, dry.stderr
    assert '"placements"' in dry.stdout


def test_real_launch_names_existing_flags(tmp_path: Path) -> None:
    path = task_file(tmp_path, "infra: local")
    env_missing = run("launch", path, "-y")
    assert env_missing.returncode == 2
    assert "envs.HF_TOKEN" in env_missing.stderr and "--env HF_TOKEN=VALUE" in env_missing.stderr
    secret_missing = run("launch", path, "-y", "--env", "HF_TOKEN=t")
    assert secret_missing.returncode == 2
    assert "--secret WANDB_API_KEY=VALUE" in secret_missing.stderr
    jobs = run("jobs", "launch", path, "-y", "-d", "--env", "HF_TOKEN=t")
    assert jobs.returncode == 2 and "--secret WANDB_API_KEY" in jobs.stderr
    for cmd in (["launch"], ["exec", "somecluster"], ["jobs", "launch"]):
        helptext = run(*cmd, "--help").stdout
        assert "--secret" in helptext and "--env" in helptext, cmd


def test_launch_with_values_from_flags_and_environment(tmp_path: Path) -> None:
    path = task_file(tmp_path, "infra: local")
    proc = run(
        "launch", path, "-y", "-c", "vals", "--env", "HF_TOKEN=tok", "--secret", "WANDB_API_KEY",
        extra_env={"WANDB_API_KEY": "from-env"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "token=tok key=from-env" in proc.stdout


def test_bare_name_not_in_environment_is_a_usage_error(tmp_path: Path) -> None:
    path = task_file(tmp_path, "infra: local")
    env = {k: v for k, v in os.environ.items() if k != "NOT_SET_ANYWHERE_XYZ"}
    proc = subprocess.run(
        [*CLI, "launch", path, "--dryrun", "--secret", "NOT_SET_ANYWHERE_XYZ"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
    )
    assert proc.returncode == 2
    assert "--secret NOT_SET_ANYWHERE_XYZ" in proc.stderr and "Traceback" not in proc.stderr
