"""The typer application object and small rendering helpers shared by command modules.

Command modules import only this, typer and (lazily, inside command bodies)
`launcher.api` and rich. Nothing here may import a cloud SDK or paramiko.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="launcher",
    help="Launch GPU jobs on the cheapest cloud that fits, and keep spot jobs alive.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: typer's rich help formatter costs ~140 ms per `--help`.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

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


def print_json(data: Any) -> None:
    """Print machine-readable output: plain JSON on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
