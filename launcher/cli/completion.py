"""Shell completion: the root options and the values completed from the state DB.

- `--install-completion` / `--show-completion` are typer's standard options (the shell
  is detected from the parent process, as typer does); naming the shell right after the
  option (`launcher --show-completion zsh`) picks it instead. `COMPLETION_OPTIONS`
  builds them for the lazily-resolved root group (launcher/cli/lazy.py) with the help
  text typer gives them, so `launcher --help` reads the same as typer's own group.
- The installed script calls `launcher` with `_LAUNCHER_COMPLETE=complete_<shell>`;
  `shell_complete` answers it with typer's completion classes.
- `complete_cluster_name` / `complete_managed_job_id` are the `autocompletion`
  callbacks of the commands that take a cluster NAME or a managed job ID. They read
  `$LAUNCHER_HOME/state.db` read-only with sqlite3 alone (no launcher.state, no
  network, nothing created when there is no DB), and answer [] on any error: a
  completion never fails a shell.

Cheap to import: click and the stdlib (typer only when completion runs).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import click

__all__ = [
    "COMPLETION_OPTIONS",
    "SHELLS",
    "cluster_names",
    "complete_cluster_name",
    "complete_managed_job_id",
    "completion_options",
    "managed_job_ids",
    "pick_shell",
    "shell_complete",
]

PROG_NAME = "launcher"
COMPLETE_VAR = "_LAUNCHER_COMPLETE"
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
# typer's own help text for its two options (typer/completion.py)
COMPLETION_OPTIONS = {
    "--install-completion": "Install completion for the current shell.",
    "--show-completion": "Show completion for the current shell, to copy it or customize "
                         "the installation.",
}
_SHELL_KEY = "launcher.completion_shell"


def _run_option(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from typer.completion import install_callback, show_callback

    shell: str | bool = ctx.meta.get(_SHELL_KEY) or True  # True: detect, as typer does
    if param.name == "install_completion":
        install_callback(ctx, param, shell)
    else:
        show_callback(ctx, param, shell)


def completion_options() -> list[click.Option]:
    """The root group's `--install-completion` and `--show-completion` (eager flags)."""
    return [
        click.Option([flag], is_flag=True, expose_value=False, is_eager=True,
                     callback=_run_option, help=text)
        for flag, text in COMPLETION_OPTIONS.items()
    ]


def pick_shell(ctx: click.Context, args: list[str]) -> list[str]:
    """`launcher --show-completion zsh`: remember the shell named right after a
    completion option and drop it from `args` (typer's flags would ignore it)."""
    if len(args) >= 2 and args[0] in COMPLETION_OPTIONS and args[1] in SHELLS:
        ctx.meta[_SHELL_KEY] = args[1]
        return args[:1] + args[2:]
    return args


def shell_complete(cli: click.Command, ctx_args: MutableMapping[str, Any]) -> None:
    """Answer the completion request in `_LAUNCHER_COMPLETE`, if any, and exit."""
    instruction = os.environ.get(COMPLETE_VAR)
    if not instruction:
        return
    from typer.completion import completion_init
    from typer.completion import shell_complete as typer_shell_complete

    completion_init()  # typer's bash/zsh/fish/powershell classes, its instruction style
    sys.exit(typer_shell_complete(cli, ctx_args, PROG_NAME, COMPLETE_VAR, instruction))


# ---------------------------------------------------------------- values


def _state_db() -> str:
    from launcher.cli.cli_index import _home

    return os.path.join(_home(), "state.db")


def _query(sql: str) -> list[tuple[Any, ...]]:
    """Rows of `sql` from the state DB, read-only; [] when there is no DB or on any
    error (a completion must never fail the shell)."""
    path = _state_db()
    if not os.path.isfile(path):
        return []
    from launcher.state import store

    try:
        conn = store.connect_readonly(path, timeout=1.0)
        try:
            return list(conn.execute(sql).fetchall())
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 - a completion never fails the shell
        return []


def cluster_names(prefix: str = "") -> list[str]:
    """Names of the clusters in the state DB that start with `prefix`, sorted."""
    return [str(name) for (name,) in _query("SELECT name FROM clusters ORDER BY name")
            if str(name).startswith(prefix)]


def managed_job_ids(prefix: str = "") -> list[tuple[str, str]]:
    """(id, "name (STATUS)") of the managed jobs whose id starts with `prefix`, newest
    first."""
    rows = _query("SELECT id, name, status FROM managed_jobs ORDER BY id DESC")
    return [(str(i), f"{name} ({status})") for i, name, status in rows
            if str(i).startswith(prefix)]


def _given(ctx: click.Context) -> set[str]:
    """Values already on the command line (`down a b <TAB>` does not offer a, b)."""
    out: set[str] = set()
    for value in ctx.params.values():
        if isinstance(value, list | tuple):
            out.update(str(v) for v in value)
        elif isinstance(value, str):
            out.add(value)
    return out


def complete_cluster_name(ctx: click.Context, incomplete: str) -> Iterable[str]:
    """typer `autocompletion`: cluster names starting with what was typed."""
    given = _given(ctx)
    return [n for n in cluster_names(incomplete) if n not in given]


def complete_managed_job_id(incomplete: str) -> Iterable[tuple[str, str]]:
    """typer `autocompletion`: managed job ids (with name and status as the help)."""
    return managed_job_ids(incomplete)
