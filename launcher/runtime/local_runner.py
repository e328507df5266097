"""`LocalRunner`: the runner for nodes that live on this machine (the local cloud).

A node's home is `node.local_root` (HOME is set to it; relative and `~/`
paths resolve against it). Commands run as `bash -c` in their own process
group (session), so a timeout kills the whole tree.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import IO

from launcher.clouds.base import NodeInfo
from launcher.runtime.runner import (
    CommandResult,
    CommandTimeoutError,
    NodeUnreachableError,
    OutputCallback,
    StreamCollector,
    check_env_names,
    local_node_path,
)

_KILL_GRACE_S = 1.0
# A file in a local node's home that marks it preempted (written by the local cloud's
# preempt, holding the time it did so; read by the agent, which starts no rank there;
# agent.py has the same name).
PREEMPTED_MARKER = ".launcher-preempted"
# After the command exits, how long to keep reading output that a process it
# left behind (holding the pipes open) may still be writing.
_DRAIN_AFTER_EXIT_S = 0.05


class LocalRunner:
    """Runs commands on this machine with a per-node home. Thread-safe; nothing to close."""

    def __init__(self, node: NodeInfo) -> None:
        self.node = node
        self.home = node.local_root or os.path.expanduser("~")

    def path(self, remote_path: str) -> str:
        """The absolute path on this machine for a node path."""
        return local_node_path(self.home, remote_path)

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
        """See CommandRunner.run. Raises NodeUnreachableError if the home is missing."""
        check_env_names(env)
        self.require_alive()
        full_env = dict(os.environ)
        full_env["HOME"] = self.home
        full_env.pop("PWD", None)
        if env:
            full_env.update(env)
        workdir = self.path(cwd) if cwd else self.home
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=workdir,
                env=full_env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            return CommandResult(1, "", f"bash: cd: {workdir}: {exc.strerror}\n")
        if stdin is not None:
            assert proc.stdin is not None
            threading.Thread(
                target=_feed_stdin, args=(proc.stdin, stdin.encode()), daemon=True
            ).start()
        out = StreamCollector(on_output)
        err = StreamCollector(on_output)
        deadline = None if timeout is None else started + timeout
        try:
            timed_out = _pump(proc, out, err, deadline)
        except BaseException:  # Ctrl-C, or on_output raised: leave nothing running
            _kill_group(proc)
            raise
        if timed_out:
            _kill_group(proc)
            raise CommandTimeoutError(
                f"Command on node {self.node.node_id} timed out after {timeout:g}s and was killed.",
                timeout=timeout or 0.0,
                stdout=out.finish(),
                stderr=err.finish(),
            )
        return CommandResult(proc.returncode, out.finish(), err.finish())

    def require_alive(self) -> None:
        """Raise NodeUnreachableError when the node's home was deleted (terminated), as an
        SSH runner would for a machine that no longer exists. A preempted node's files stay
        readable (its logs are fetched after the preemption); the head-node agent is what
        refuses to start ranks on it (see PREEMPTED_MARKER)."""
        if not os.path.isdir(self.home):
            raise NodeUnreachableError(
                f"Node {self.node.node_id}: its home {self.home} does not exist "
                "(the node was terminated).",
                host="localhost",
            )

    def put_text(self, text: str, remote_path: str, mode: int | None = None) -> None:
        """See CommandRunner.put_text."""
        self._write_atomic(remote_path, text.encode(), mode)

    def put_file(self, local_path: str, remote_path: str, mode: int | None = None) -> None:
        """See CommandRunner.put_file."""
        with open(local_path, "rb") as f:
            data = f.read()
        if mode is None:
            mode = os.stat(local_path).st_mode & 0o7777
        self._write_atomic(remote_path, data, mode)

    def sync_dir(self, local_dir: str, remote_dir: str, *, respect_gitignore: bool = True) -> None:
        """See CommandRunner.sync_dir."""
        from launcher.runtime import sync  # lazy: exec/queue never sync

        self.require_alive()
        files = sync.list_sync_files(local_dir, respect_gitignore=respect_gitignore)
        dest = self.path(remote_dir)
        os.makedirs(dest, exist_ok=True)
        sync.copy_files(local_dir, files, dest)

    def close(self) -> None:
        """Nothing to release."""

    def _write_atomic(self, remote_path: str, data: bytes, mode: int | None) -> None:
        self.require_alive()
        dest = self.path(remote_path)
        parent = os.path.dirname(dest)
        os.makedirs(parent, exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".launcher-put-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            # a local node's home is under LAUNCHER_HOME: private, whatever the source mode
            os.chmod(tmp, (mode if mode is not None else 0o600) & ~0o077)
            os.replace(tmp, dest)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def _feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _pump(
    proc: subprocess.Popen[bytes],
    out: StreamCollector,
    err: StreamCollector,
    deadline: float | None,
) -> bool:
    """Read both pipes until the command exits. True if the deadline passed first."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    open_streams = 2
    exited_at: float | None = None
    try:
        while open_streams:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None:
                wait = exited_at + _DRAIN_AFTER_EXIT_S - now
                if wait <= 0:
                    break
            else:
                wait = 0.2 if deadline is None else min(0.2, deadline - now)
                if wait <= 0:
                    return True
            for key, _ in sel.select(wait):
                data = os.read(key.fd, 65536)
                if data:
                    key.data.feed(data)
                else:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
        if exited_at is None:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                proc.wait(remaining)
            except subprocess.TimeoutExpired:
                return True
        return False
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, SIGKILL it after a grace period."""
    for sig, grace in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            # the leader is gone; make sure stragglers in the group are too
            os.killpg(proc.pid, signal.SIGKILL)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
        return
