"""The command-runner contract: run commands and copy files on one node.

`runner_for(cluster, node)` gives a `LocalRunner` for nodes on this machine
(`node.ssh_user is None`: HOME and default cwd are `node.local_root`) and an
`SSHRunner` otherwise (paramiko, imported only inside `ssh_runner.py`).

Remote paths given to a runner may be absolute, relative, or start with
`~/`; relative and `~/` paths are relative to the node's home directory.

Errors every runner raises:
- `NodeUnreachableError`: the node cannot be reached (connect refused or timed
  out, authentication or host-key failure, connection lost mid-command).
- `CommandTimeoutError`: the command outlived its `timeout`; it was killed.
A command that merely exits non-zero is not an error: look at
`CommandResult.returncode` (or call `CommandResult.check()`).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.clouds.base import ClusterInfo, NodeInfo

OutputCallback = Callable[[str], None]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class NodeUnreachableError(LauncherError):
    """The node could not be reached, or the connection to it was lost."""

    exit_code = 6

    def __init__(self, message: str, *, host: str = "") -> None:
        super().__init__(message)
        self.host = host


class CommandTimeoutError(LauncherError):
    """A command ran longer than its timeout and was killed.

    `stdout`/`stderr` hold what it printed before it was killed.
    """

    exit_code = 7

    def __init__(self, message: str, *, timeout: float, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr


class CommandFailedError(LauncherError):
    """Raised by `CommandResult.check()` for a non-zero exit; names the last lines."""

    def __init__(self, message: str, result: CommandResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 10) -> str:
        """The last `lines` lines of stderr, or of stdout when stderr is empty."""
        text = self.stderr.strip() or self.stdout.strip()
        return "\n".join(text.splitlines()[-lines:])

    def check(self, what: str = "command") -> CommandResult:
        """Return self if the command succeeded, else raise CommandFailedError."""
        if self.returncode != 0:
            tail = self.tail()
            detail = f":\n{tail}" if tail else "."
            raise CommandFailedError(
                f"{what} failed with exit code {self.returncode}{detail}", self
            )
        return self


@runtime_checkable
class CommandRunner(Protocol):
    """Runs commands and writes files on one node. Methods block until done.

    Implementations are safe to call from several threads at once.
    """

    node: NodeInfo

    def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run `bash -c command` on the node (cwd default: the node's home).

        `env` is added to the node's environment. `on_output` is called with
        each output line (without its newline) as it arrives, stdout and
        stderr merged. `stdin` is fed to the command, which otherwise reads
        an empty stdin. Raises NodeUnreachableError, CommandTimeoutError.
        """
        ...

    def put_text(self, text: str, remote_path: str, mode: int | None = None) -> None:
        """Write `text` (UTF-8) to `remote_path` atomically, creating parent dirs."""
        ...

    def put_file(self, local_path: str, remote_path: str, mode: int | None = None) -> None:
        """Copy one local file to `remote_path` atomically; mode default = the local file's."""
        ...

    def sync_dir(self, local_dir: str, remote_dir: str, *, respect_gitignore: bool = True) -> None:
        """Copy a directory tree into `remote_dir` (created if missing).

        Skips `.git`, and what `.gitignore` excludes unless respect_gitignore
        is False. Files on the node that are not in `local_dir` are left alone.
        """
        ...

    def close(self) -> None:
        """Release connections. Idempotent. The runner may be used again afterwards."""
        ...


def runner_for(cluster: ClusterInfo, node: NodeInfo) -> CommandRunner:
    """The runner that reaches `node` of `cluster`. Does not connect yet."""
    if cluster.cloud == "slurm":  # job steps of the allocation, from the login node
        from launcher.clouds.slurm.steps import SrunRunner

        return SrunRunner(cluster, node)
    if node.ssh_user is None:
        from launcher.runtime.local_runner import LocalRunner

        return LocalRunner(node)
    from launcher.runtime.ssh_runner import SSHRunner

    return SSHRunner(node, key_path=cluster.ssh_key_path)


# ---- helpers shared by the runners -------------------------------------------------


def check_env_names(env: Mapping[str, str] | None) -> None:
    """Raise LauncherError for a variable name a shell cannot export."""
    for name in env or {}:
        if not _ENV_NAME.match(name):
            raise LauncherError(
                f"Invalid environment variable name {name!r}: use letters, digits and '_', "
                "not starting with a digit."
            )


def export_prefix(env: Mapping[str, str] | None) -> str:
    """`export A='x' B='y'; ` for a POSIX shell (empty string for no env)."""
    if not env:
        return ""
    check_env_names(env)
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + "; "


def shell_path(path: str) -> str:
    """A shell word for a remote path: `~` and `~/x` expand to $HOME, the rest is quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"'
    return shlex.quote(path)


class NodePathError(LauncherError):
    """A node path that would leave the node's home (on the local cloud, its root)."""

    exit_code = 2


def local_node_path(home: str, path: str) -> str:
    """Resolve a node path against a node home on this machine (local cloud).

    Absolute paths are this machine's paths (docs/local-cloud.md). A relative or `~/`
    path must stay inside the home, also through symlinks: raises NodePathError when
    `..` parts or a symlink would take it out."""
    if path == "~":
        return home
    rel = path[2:] if path.startswith("~/") else path
    if os.path.isabs(rel):
        return os.path.normpath(rel)
    full = os.path.normpath(os.path.join(home, rel))
    root = os.path.realpath(home)
    if os.path.commonpath([root, os.path.realpath(full)]) != root:
        raise NodePathError(f"node path {path!r} leaves the node's home ({home}); use an "
                            "absolute path or one under the home.")
    return full


class StreamCollector:
    """Collects one output stream; hands complete lines to `on_output` as they form."""

    def __init__(self, on_output: OutputCallback | None) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._pending = ""
        self._on_output = on_output

    def feed(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if not text:
            return
        self._parts.append(text)
        if self._on_output is None:
            return
        text = self._pending + text
        *lines, self._pending = text.split("\n")
        for line in lines:
            self._on_output(line.removesuffix("\r"))

    def finish(self) -> str:
        """Flush the last partial line; return everything collected."""
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._parts.append(tail)
            self._pending += tail
        if self._on_output is not None and self._pending:
            self._on_output(self._pending.removesuffix("\r"))
        self._pending = ""
        return "".join(self._parts)
