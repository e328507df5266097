"""The typer application object and small rendering helpers shared by command modules.

Command modules import only this, typer and (lazily, inside command bodies)
`launcher.api` and rich. Nothing here may import a cloud SDK or paramiko.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from launcher.errors import LauncherError

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="launcher",
    help="Launch GPU jobs on the cheapest cloud that fits, and keep spot jobs alive.",
    no_args_is_help=True,
    # typer's --install-completion/--show-completion; `launcher` itself runs the lazy
    # root group (launcher/cli/lazy.py), which gives the same two options
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain click help: typer's rich help formatter costs ~140 ms per `--help`.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        from launcher import __version__

        sys.stdout.write(f"launcher {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                 help="Show the version and exit."),
) -> None:
    """Launch GPU jobs on the cheapest cloud that fits, and keep spot jobs alive."""


# Help of the repeatable --env / --secret options (their syntax, as parse_assignments reads it)
ENV_HELP = ("Set an environment variable: --env NAME=VALUE, or --env NAME to pass NAME's "
            "value from your shell. Repeatable.")
SECRET_HELP = ("Set a task secret: --secret NAME=VALUE, or --secret NAME to pass NAME's value "
               "from your shell. Repeatable.")


class CliUsageError(LauncherError):
    """Bad command-line input (a malformed option value): exit code 2, like click's."""

    exit_code = 2


_console: Console | None = None
_err_console: Console | None = None


def console() -> Console:
    """Rich console on stdout (created on first use: rich costs ~70 ms to import)."""
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console(highlight=False, soft_wrap=False)
    return _console


def err_console() -> Console:
    global _err_console
    if _err_console is None:
        from rich.console import Console

        _err_console = Console(stderr=True, highlight=False)
    return _err_console


def parse_assignments(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """`--env`/`--secret` values: `NAME=VALUE`, or a bare `NAME` taking the value from
    the caller's environment (as SkyPilot does). Raises LauncherError (exit 2) for a
    bare name that is not set here; names are validated when applied to the task."""
    import os

    out: dict[str, str] = {}
    for item in pairs or []:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in os.environ:
                raise CliUsageError(
                    f"{flag} {name}: '{name}' is not set in your environment; "
                    f"give the value as {flag} {name}=VALUE."
                )
            value = os.environ[name]
        if not name:
            raise CliUsageError(f"{flag} {item!r}: expected NAME=VALUE or NAME.")
        out[name] = value
    return out


def print_json(data: Any) -> None:
    """Print machine-readable output: plain JSON on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
