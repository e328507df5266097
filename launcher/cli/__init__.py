"""`launcher` command line: a thin typer skin over `launcher.api`.

`main()` is the console-script entry point. It turns every `LauncherError`
into a one-paragraph message on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

from launcher.cli.app import app

# Command modules register themselves on `app` when imported.
from launcher.cli import catalog_cmds, cluster_cmds, jobs_cmds  # noqa: E402,F401  isort: skip


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Exits the process with the command's status."""
    import click

    from launcher.errors import LauncherError

    try:
        rv = app(args=argv, standalone_mode=False, prog_name="launcher")
    except LauncherError as err:
        sys.stderr.write(f"Error: {err}\n")
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)
