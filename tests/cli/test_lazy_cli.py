"""The lazily-resolved root group: what users see is exactly typer's full group (help
text, command list, errors), the index is derived from the code and rebuilt when a
command module changes, and `launcher --help` needs neither click nor typer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from launcher.cli import cli_index
from launcher.cli.lazy import LazyGroup

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]


def run(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "LAUNCHER_HOME": str(home), "COLUMNS": "100", **env},
    )  # fmt: skip


def full_help(*args: str) -> str:
    """What typer's whole group prints (in this process: COLUMNS=100 as in run())."""
    group = cli_index.full_group()
    ctx = group.make_context("launcher", list(args) or ["--dummy-unused"], resilient_parsing=True)
    for name in args:
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        ctx = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        group = cmd  # type: ignore[assignment]
    return ctx.get_help() + "\n"


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")


@pytest.mark.parametrize("args", [(), ("jobs",), ("catalog",), ("launch",), ("gpus",)])
def test_help_is_typers_own(args: tuple[str, ...], launcher_home: Path) -> None:
    for _ in range(2):  # first call builds the index, the second reads it
        proc = run(*args, "--help", home=launcher_home)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == full_help(*args)


def test_index_lists_every_command_with_its_module(launcher_home: Path) -> None:
    index = cli_index.load_index()
    group = cli_index.full_group()
    assert [c["name"] for c in index["commands"]] == list(group.commands)
    by_name = {c["name"]: c for c in index["commands"]}
    assert by_name["launch"]["modules"] == ["launcher.cli.cluster_cmds"]
    assert by_name["gpus"]["modules"] == ["launcher.cli.catalog_cmds"]
    assert "launcher.cli.jobs_cmds" in by_name["jobs"]["modules"]
    lazy = LazyGroup(index)
    ctx = click.Context(lazy, info_name="launcher")
    assert lazy.list_commands(ctx) == list(group.commands)
    cmd = lazy.get_command(ctx, "status")
    assert cmd is not None and cmd.help == group.commands["status"].help
    assert lazy.get_command(ctx, "nope") is None


def test_index_cache_is_keyed_by_the_cli_sources(
    launcher_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_index.load_index()
    files = list((launcher_home / "cache").glob("cli-index-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    data["commands"] = []  # a stale / tampered cache with the right key is used as is...
    files[0].write_text(json.dumps(data))
    assert cli_index.load_index()["commands"] == []
    monkeypatch.setattr(cli_index, "_key", lambda: "00000000")  # ...a new key rebuilds
    fresh = cli_index.load_index()
    assert fresh["commands"] and fresh["key"] == "00000000"
    assert [p.name for p in (launcher_home / "cache").glob("cli-index-*.json")] == [
        "cli-index-00000000.json"
    ]


def test_index_home_is_launcher_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from launcher.config.settings import launcher_home

    for value in (str(tmp_path / "h"), "~/somewhere", "rel/dir"):
        monkeypatch.setenv("LAUNCHER_HOME", value)
        assert cli_index._home() == os.path.normpath(str(launcher_home()))
    monkeypatch.delenv("LAUNCHER_HOME")
    assert cli_index._home() == os.path.normpath(str(launcher_home()))


def test_top_level_help_imports_neither_click_nor_typer(launcher_home: Path) -> None:
    run("--help", home=launcher_home)  # build the index
    probe = (
        "import sys; from launcher.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(repr(sorted(m for m in ('click', 'typer') if m in sys.modules)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60,
        env={**os.environ, "LAUNCHER_HOME": str(launcher_home), "COLUMNS": "100"},
    )  # fmt: skip
    assert proc.stderr.strip().endswith("[]"), proc.stderr
    assert proc.stdout == full_help()


def test_unknown_command_suggests_and_exits_2(launcher_home: Path) -> None:
    proc = run("lanch", home=launcher_home)
    assert proc.returncode == 2
    assert "No such command 'lanch'. Did you mean 'launch'?" in proc.stderr
    assert "Traceback" not in proc.stderr
