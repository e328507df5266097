"""First-contact details of the CLI: --version, one duration format, option help that
reads as the real syntax, and a clean stderr (no library deprecation warnings)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import launcher
from launcher.cli.table import format_duration

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env}, cwd=REPO)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    p = run(flag)
    assert p.returncode == 0 and p.stdout == f"launcher {launcher.__version__}\n" and not p.stderr


def test_version_through_the_click_group() -> None:
    """The fast path aside, the group itself knows --version (and lists it in --help)."""
    p = subprocess.run(
        [sys.executable, "-c", "from launcher.cli.lazy import root_group; "
         "root_group().main(['--version'], prog_name='launcher')"],
        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0 and p.stdout.strip() == f"launcher {launcher.__version__}"
    assert "--version" in run("--help").stdout


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (0, "0s"), (59.9, "59s"), (60, "1m00s"), (125, "2m05s"), (3599, "59m59s"),
    (3600, "1h00m"), (7380, "2h03m"), (86400, "1d00h"), (3 * 86400 + 4 * 3600 + 5, "3d04h"),
])
def test_one_duration_format(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_queue_and_jobs_queue_render_durations_alike() -> None:
    from launcher.cli.cli_index import _import_all

    _import_all()  # register every command in the CLI's own order (other tests compare it)
    from launcher.cli import cluster_cmds, jobs_cmds

    for secs in (5, 125, 7380, 90000):
        assert cluster_cmds._fmt_duration(1000.0, 1000.0 + secs) == jobs_cmds._dur(secs)


@pytest.mark.parametrize("command", [["launch"], ["exec"], ["jobs", "launch"]])
def test_env_and_secret_help_show_the_real_syntax(command: list[str]) -> None:
    out = " ".join(run(*command, "--help").stdout.split())
    assert "--env NAME[=VALUE]" in out and "--secret NAME[=VALUE]" in out
    assert "--env NAME=VALUE, or --env NAME to pass NAME's value from your shell" in out
    assert "NAME:" not in out


def test_pinned_click_is_the_one_without_deprecation_warnings() -> None:
    """click 8.5 deprecates names typer < 0.25 imports (two warnings on every call)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    click_req = next(Requirement(d) for d in deps if Requirement(d).name == "click")
    typer_req = next(Requirement(d) for d in deps if Requirement(d).name == "typer")
    assert "8.5.1" not in click_req.specifier and version("click") in click_req.specifier
    assert version("typer") in typer_req.specifier


@pytest.mark.parametrize("args", [["status"], ["gpus", "H100:8"], ["--help"]])
def test_stderr_is_clean_with_warnings_shown(args: list[str], tmp_path: Path) -> None:
    p = run(*args, PYTHONWARNINGS="default", LAUNCHER_HOME=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stderr in ("", "No clusters.\n"), p.stderr
