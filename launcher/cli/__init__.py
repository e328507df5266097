"""`launcher` command line: a thin typer skin over `launcher.api`.

`main()` is the console-script entry point. It runs the lazily-resolved root group
(launcher/cli/lazy.py: only the command being run is imported and converted) and
turns every `LauncherError` into a one-paragraph message on stderr and a non-zero
exit, never a traceback; so does a `ModuleNotFoundError` of a cloud SDK that is not
installed (one line naming the `pip install 'launcher[...]'` extra). It runs with
umask 077 and makes `LAUNCHER_HOME` private (launcher/state/files.py). `launcher --help` alone is printed from the index's rendered
copy (same text click renders; no click import). `launcher.cli.app` (the typer app
with every command registered) is still available as an attribute, imported on
first access.
"""

from __future__ import annotations

import sys
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":  # the full typer app, for callers that want it
        from launcher.cli.cli_index import _import_all

        return _import_all()
    raise AttributeError(f"module 'launcher.cli' has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Exits the process with the command's status."""
    import os

    os.umask(0o077)  # = state_files.private_umask(): whatever launcher writes stays private
    args = sys.argv[1:] if argv is None else argv
    if args in (["--help"], ["-h"]):  # the commonest first call: answered from the index
        from launcher.cli.cli_index import cached_help

        text = cached_help()
        if text is not None:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            sys.exit(0)
    if args in (["--version"], ["-V"]):  # as fast as --help: no click import
        from launcher import __version__

        sys.stdout.write(f"launcher {__version__}\n")
        sys.exit(0)
    import click

    from launcher.cli.lazy import root_group
    from launcher.errors import LauncherError

    try:
        from launcher.state.files import secure_home

        secure_home()  # 0700; an existing readable home is made private, with a warning
        rv = root_group().main(args=argv, standalone_mode=False, prog_name="launcher")
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
    except ModuleNotFoundError as err:  # a cloud SDK (an optional extra) not installed
        from launcher.clouds.sdk import as_missing_sdk

        missing = as_missing_sdk(err)
        if missing is None:
            raise
        sys.stderr.write(f"Error: {missing}\n")
        sys.exit(missing.exit_code)
    except Exception as err:  # a full disk is an expected failure, not a bug
        from launcher.state.db import launcher_home
        from launcher.state.diskspace import full_message, is_disk_full_error, is_full
        from launcher.state.store import STORAGE_ERRORS

        storage = isinstance(err, STORAGE_ERRORS)
        if not (is_disk_full_error(err) or (storage and is_full(launcher_home()))):
            raise
        sys.stderr.write(f"Error: {full_message(launcher_home())}\n")
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)
