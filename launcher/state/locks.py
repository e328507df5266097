"""Per-cluster locks and the identity of the process holding a cluster.

Long operations on one cluster (launch, exec's sync+setup, stop/start/down) hold
`cluster_lock(name)`: an `fcntl.flock` on `$LAUNCHER_HOME/locks/<name>.lock`. The kernel
drops the lock when its holder dies, so a lock left by a killed process is recovered by
construction; the file only keeps the holder's pid for error messages. Re-exported by
launcher.state (import them from there).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ClusterBusyError


def launcher_process() -> tuple[int, str]:
    """(pid, host name) of this process, as recorded in `launch_pid` / `launch_host`."""
    import socket

    return os.getpid(), socket.gethostname()


# ------------------------------------------------------------------------- locks


@dataclass
class ClusterLock:
    """A held per-cluster lock; release with `release()` or by leaving `cluster_lock`."""

    name: str
    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _lock_holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        return "another process"
    return f"process {text}" if text else "another process"


def acquire_cluster_lock(name: str, *, wait: float = 0.0, purpose: str = "") -> ClusterLock:
    """Take the per-cluster lock, waiting up to `wait` seconds. Blocking.

    Raises ClusterBusyError naming the holder when it stays taken. The kernel
    releases the lock if the holder dies, so stale locks never block anyone.
    """
    from launcher.config.settings import launcher_home

    lock_dir = launcher_home() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"{name}.lock"
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    delay = 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                holder = _lock_holder(path)
                os.close(fd)
                raise ClusterBusyError(
                    f"Cluster {name!r} is busy: {holder} is operating on it. "
                    "Wait for it to finish (or stop it), then retry."
                ) from None
            # flock has no timed wait; back off briefly (lock waits are rare and short).
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.2)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}{' (' + purpose + ')' if purpose else ''}\n".encode())
    return ClusterLock(name, path, fd)


@contextlib.contextmanager
def cluster_lock(name: str, *, wait: float = 0.0, purpose: str = "") -> Iterator[ClusterLock]:
    """Context-manager form of `acquire_cluster_lock`; releases on exit."""
    lock = acquire_cluster_lock(name, wait=wait, purpose=purpose)
    try:
        yield lock
    finally:
        lock.release()


def launch_process_gone(pid: int | None, host: str | None) -> bool:
    """True when the process recorded as launching a cluster (`launch_pid` on
    `launch_host`) is known to be gone: it ran on this host and no process has that pid
    now. False when it may still run, or cannot be told (another host, nothing recorded).
    A pid reused by an unrelated process reads as alive (the safe side: nothing is
    claimed then)."""
    if pid is None or host is None or host != launcher_process()[1]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
