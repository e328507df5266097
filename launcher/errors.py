"""User-facing error types.

Every error a user can cause or meet in normal operation derives from
`LauncherError`. The CLI prints `str(err)` as one paragraph (no traceback) and
exits with `err.exit_code`. Anything else escaping to the CLI is a bug.
"""

from __future__ import annotations


class LauncherError(Exception):
    """Base of all expected, user-facing failures. `str()` is the message shown."""

    exit_code: int = 1


class TaskValidationError(LauncherError):
    """A task file or dict is malformed.

    `field` is a dotted path (`resources.accelerators`, `num_nodes`), `line` the
    1-based YAML line when the task came from a file, `source` the file name.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        line: int | None = None,
        source: str | None = None,
    ) -> None:
        self.field = field
        self.line = line
        self.source = source
        self.reason = message
        where = []
        if source:
            where.append(source if line is None else f"{source}:{line}")
        elif line is not None:
            where.append(f"line {line}")
        if field:
            where.append(f"field '{field}'")
        prefix = f"Invalid task ({', '.join(where)}): " if where else "Invalid task: "
        super().__init__(prefix + message)


class UsageError(LauncherError):
    """A command line that cannot be acted on (missing names, a missing option): exit 2,
    like any other bad command-line input."""

    exit_code = 2


class NoPlacementError(LauncherError):
    """No catalog offer satisfies the task; the message explains why per constraint."""

    exit_code = 3


class ConfigError(LauncherError):
    """`~/.launcher/config.yaml` (or another local setting) is malformed."""

    exit_code = 2


class ClusterNotFoundError(LauncherError):
    """The named cluster does not exist in the state DB."""

    exit_code = 4


class ClusterBusyError(LauncherError):
    """Another command is operating on the same cluster (e.g. two launches of one name)."""

    exit_code = 5


class FileMountError(LauncherError):
    """A file mount a launch cannot do: a local path that does not exist, a bucket mode
    or store not supported yet, no credentials to copy with (the message names the field)."""

    exit_code = 2
