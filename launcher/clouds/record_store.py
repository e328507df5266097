"""The cloud-owned JSON record files under `$LAUNCHER_HOME/<cloud>/...` (dirs 0700,
files 0600): atomic writes (temp file + rename), read-modify-write under an fcntl lock.

`ClusterRecords(cloud)` is the `<cloud>/clusters/<cluster>.json` store the clouds keep
their per-cluster records in (what they must find again on `terminate(name)`); the
schema of a record belongs to each cloud's own module.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launcher.config.settings import launcher_home


def load_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; None when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`, {} when there is none."""
    return load_json(path) or {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` atomically (a 0600 temp file renamed over `path`)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive fcntl lock of `path` (a `.<name>.lock` file beside it)."""
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def updating(path: Path) -> Iterator[dict[str, Any]]:
    """The object in `path`, locked; written back when the block ends without error."""
    with locked(path):
        data = read_json(path)
        yield data
        write_json(path, data)


class ClusterRecords:
    """`$LAUNCHER_HOME/<cloud>/clusters/<cluster>.json`. With `private_parent`, the
    `<cloud>` directory is (re)made 0700 too."""

    def __init__(self, cloud: str, *, private_parent: bool = False) -> None:
        self.cloud = cloud
        self.private_parent = private_parent

    def dir(self) -> Path:
        path = launcher_home() / self.cloud / "clusters"
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.private_parent:
            os.chmod(path.parent, 0o700)
        return path

    def path(self, cluster: str) -> Path:
        if "/" in cluster or cluster.startswith("."):
            raise ValueError(f"invalid cluster name {cluster!r}")
        return self.dir() / f"{cluster}.json"

    def read(self, cluster: str) -> dict[str, Any]:
        """The record, {} when there is none."""
        return read_json(self.path(cluster))

    def update(self, cluster: str) -> contextlib.AbstractContextManager[dict[str, Any]]:
        """Read-modify-write the record under its lock."""
        return updating(self.path(cluster))

    def drop(self, cluster: str) -> None:
        """Forget the cluster. Idempotent."""
        with contextlib.suppress(FileNotFoundError):
            self.path(cluster).unlink()

    def all(self) -> dict[str, dict[str, Any]]:
        """Every recorded cluster -> its record."""
        return {p.stem: read_json(p) for p in sorted(self.dir().glob("*.json"))}
