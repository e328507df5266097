"""The index of top-level commands that `launcher/cli/lazy.py`'s group runs from.

Derived, never written by hand: `build_index()` imports every command module,
converts the whole typer app once, and records what click shows for each command
(name, help, short help, hidden, deprecated), the modules that register it, the
group's own settings, and the rendered `launcher --help` text for the terminal
width in use. It is cached as JSON in `$LAUNCHER_HOME/cache/cli-index-<key>.json`,
keyed by the launcher version and the size and mtime of every file in
`launcher/cli/`, so an edited command module rebuilds it on the next call. When the
cache cannot be written the index is rebuilt each time (same output, slower).

Cheap to import (no click, no typer): `launcher --help` is answered from here.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import click
    import typer

__all__ = ["COMMAND_MODULES", "build_index", "cached_help", "full_group", "load_index"]

# Modules that register commands on `launcher.cli.app.app` when imported (which
# commands they hold is discovered from them, see build_index).
COMMAND_MODULES = (
    "launcher.cli.catalog_cmds",
    "launcher.cli.cluster_cmds",
    "launcher.cli.jobs_cmds",
    "launcher.cli.cost_report_cmds",
    "launcher.cli.api_cmds",
    "launcher.cli.clouds_cmds",
    "launcher.cli.health_cmds",
)
_CLI_DIR = os.path.dirname(os.path.abspath(__file__))
_INDEX_SCHEMA = 1


def _import_all() -> typer.Typer:
    import importlib

    from launcher.cli.app import app

    for name in COMMAND_MODULES:
        importlib.import_module(name)
    return app


def full_group() -> click.Group:
    """The whole CLI converted by typer (every module imported, every command built)."""
    import click
    import typer.main

    group = typer.main.get_command(_import_all())
    assert isinstance(group, click.Group)
    return group


def _modules_of(app: typer.Typer) -> dict[str, list[str]]:
    """Command name -> modules whose import registers it (a group: every module that
    added a command anywhere in its tree)."""
    from typer.main import get_command_name

    out: dict[str, list[str]] = {}
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or get_command_name(info.callback.__name__)
        out[name] = [info.callback.__module__]

    def tree(sub: typer.Typer) -> list[str]:
        mods = [c.callback.__module__ for c in sub.registered_commands if c.callback]
        for g in sub.registered_groups:
            if g.typer_instance is not None:
                mods += tree(g.typer_instance)
        return mods

    for ginfo in app.registered_groups:
        if ginfo.name and ginfo.typer_instance is not None:
            mods = tree(ginfo.typer_instance)
            if ginfo.typer_instance.registered_callback is not None:
                callback = ginfo.typer_instance.registered_callback.callback
                if callback is not None:
                    mods.append(callback.__module__)
            out[ginfo.name] = sorted(set(mods))
    return out


def build_index() -> dict[str, Any]:
    """The index from the real typer app (imports every command module)."""
    group = full_group()
    modules = _modules_of(_import_all())
    commands = []
    for name, cmd in group.commands.items():
        commands.append(
            {
                "name": name,
                "help": cmd.help,
                "short_help": cmd.short_help,
                "hidden": cmd.hidden,
                "deprecated": cmd.deprecated,
                "modules": modules.get(name, list(COMMAND_MODULES)),
            }
        )
    import click

    ctx = click.Context(group, info_name="launcher", **group.context_settings)
    return {
        "schema": _INDEX_SCHEMA,
        "help": group.help,
        "no_args_is_help": group.no_args_is_help,
        "context_settings": group.context_settings,
        "commands": commands,
        # `launcher --help` as click renders it at this width (see cached_help)
        "rendered_help": {str(ctx.make_formatter().width): group.get_help(ctx)},
    }


def help_width() -> int:
    """The width click formats help at here (its default: the terminal's columns,
    as shutil.get_terminal_size finds them, capped at 80, minus 2, at least 50)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return max(min(columns or 80, 80) - 2, 50)


def cached_help() -> str | None:
    """The rendered `launcher --help` for the current width, when the valid cached
    index has it (None: let click render it)."""
    index = _read(_key())
    if index is None:
        return None
    text = index.get("rendered_help", {}).get(str(help_width()))
    return text if isinstance(text, str) else None


def _key() -> str:
    from launcher import __version__

    parts = [str(_INDEX_SCHEMA), __version__]
    with os.scandir(_CLI_DIR) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if entry.name.endswith(".py"):
                st = entry.stat()
                parts.append(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    import zlib

    return f"{zlib.crc32('|'.join(parts).encode()):08x}"


def _home() -> str:
    """launcher.config.settings.launcher_home(), without importing launcher.config (its
    dataclasses and inspect imports would double the cost of `launcher --help`);
    tests/cli/test_lazy_cli.py checks the two agree."""
    env = os.environ.get("LAUNCHER_HOME")
    return os.path.abspath(os.path.expanduser(env) if env else os.path.expanduser("~/.launcher"))


def _index_path(key: str) -> str:
    return os.path.join(_home(), "cache", f"cli-index-{key}.json")


def _read(key: str) -> dict[str, Any] | None:
    try:
        with open(_index_path(key), encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(index, dict) and index.get("schema") == _INDEX_SCHEMA and index.get("key") == key:
        return index
    return None


def load_index() -> dict[str, Any]:
    """The cached index when it matches the installed CLI modules, else a fresh one
    (written to the cache, atomically, when possible; old ones removed)."""
    key = _key()
    index = _read(key)
    if index is None:
        index = build_index()
        index["key"] = key
        _write(_index_path(key), index)
    return index


def _write(path: str, index: dict[str, Any]) -> None:
    import contextlib
    import glob

    directory = os.path.dirname(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(index, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return
    for old in glob.glob(os.path.join(directory, "cli-index-*.json")):
        if old != path:
            with contextlib.suppress(OSError):
                os.unlink(old)


