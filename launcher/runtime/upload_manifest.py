"""The task's local files, resolved once: which local paths a launch copies to its nodes
(`local_roots`), and what they contain (`build_manifest`: paths, sizes, SHA-256).

- The embedded path syncs each `LocalRoot` to the nodes (`execution.sync_task_files`).
- Through a server, the client builds the `UploadManifest`, the server keeps only the
  content it lacks (content-addressed, per user: `launcher.server.uploads`) and rewrites
  the task's local paths to its own copies, which it then syncs the same way.

Which files a directory contributes is `sync.list_sync_files`: a workdir honours
`.gitignore` (or `git ls-files`) and a top-level `.launcherignore` / `.skyignore`; a
directory file mount is taken whole (as the node sync copies it). `.git` never.
Symlinks are kept as links (their target text), as the node sync keeps them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import FileMountError as FileMountError  # re-exported
from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.task.model import Task

REMOTE_WORKDIR = "~/sky_workdir"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LocalRoot:
    """One local path a launch copies to every node.

    `field` is the task field it comes from (`workdir`, or `file_mounts` with `key` the
    remote path), `source` the absolute local path, `remote` where it goes on a node."""

    field: str
    key: str | None
    source: str
    remote: str
    is_dir: bool
    respect_gitignore: bool

    @property
    def label(self) -> str:
        return "workdir" if self.field == "workdir" else f"file_mounts.{self.key}"


def local_roots(task: Task) -> list[LocalRoot]:
    """The workdir (if any) then every local file mount of `task`. No I/O but stat.

    Raises FileMountError naming the field for a local path that does not exist."""
    roots: list[LocalRoot] = []
    if task.workdir:
        roots.append(LocalRoot("workdir", None, task.workdir, REMOTE_WORKDIR, True, True))
    for remote, source in task.file_mounts.items():
        if "://" in source:
            continue  # a bucket: copied node-side (storage_nodes)
        local = os.path.expanduser(source)
        if not os.path.isabs(local) and task.source_path:
            local = os.path.join(os.path.dirname(os.path.abspath(task.source_path)), local)
        if not os.path.exists(local):
            raise FileMountError(f"file_mounts[{remote!r}]: local path {source!r} does not exist.")
        roots.append(LocalRoot("file_mounts", remote, local, remote, os.path.isdir(local), False))
    return roots


@dataclass(frozen=True)
class ManifestFile:
    """One file of a root: `path` relative (POSIX; "" for a root that is one file)."""

    path: str
    size: int
    sha256: str
    mode: int  # permission bits
    link: str | None = None  # a symlink's target (then size 0, sha256 of the target text)


@dataclass(frozen=True)
class ManifestRoot:
    field: str
    key: str | None
    source: str
    is_dir: bool
    files: tuple[ManifestFile, ...]

    @property
    def label(self) -> str:
        return "workdir" if self.field == "workdir" else f"file_mounts.{self.key}"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class UploadManifest:
    roots: tuple[ManifestRoot, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.roots)

    def digests(self) -> set[str]:
        """Every content hash a server needs (links carry theirs inline)."""
        return {f.sha256 for r in self.roots for f in r.files if f.link is None}

    def to_json(self) -> dict[str, Any]:
        return {"roots": [{"field": r.field, "key": r.key, "source": r.source,
                           "is_dir": r.is_dir,
                           "files": [[f.path, f.size, f.sha256, f.mode, f.link] for f in r.files]}
                          for r in self.roots]}

    @staticmethod
    def from_json(data: Any) -> UploadManifest:
        """Parse (and shape-check) a manifest a client sent. Raises LauncherError."""
        try:
            roots = tuple(
                ManifestRoot(str(r["field"]), None if r["key"] is None else str(r["key"]),
                             str(r["source"]), bool(r["is_dir"]),
                             tuple(ManifestFile(str(p), int(s), str(h), int(m),
                                                None if ln is None else str(ln))
                                   for p, s, h, m, ln in r["files"]))
                for r in data["roots"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LauncherError(f"The upload manifest is malformed ({exc!r}).") from None
        return UploadManifest(roots)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _entry(full: str, rel: str) -> ManifestFile:
    # a root that is one file is read through a link (as the node sync's put_file does)
    st = os.lstat(full) if rel else os.stat(full)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(full)
        return ManifestFile(rel, 0, hashlib.sha256(target.encode()).hexdigest(), 0o777, target)
    return ManifestFile(rel, st.st_size, file_sha256(full), st.st_mode & 0o777)


def root_files(root: LocalRoot) -> list[str]:
    """The relative paths `root` contributes ([""] for a single file)."""
    if not root.is_dir:
        return [""]
    from launcher.runtime import sync

    return sync.list_sync_files(root.source, respect_gitignore=root.respect_gitignore)


def build_manifest(task: Task, *, max_root_bytes: int | None = None) -> UploadManifest:
    """The manifest of `task`'s local files (reads and hashes them all).

    With `max_root_bytes`, a root over it is refused before anything is hashed
    (`UploadTooLargeError`, naming the path and its size)."""
    out: list[ManifestRoot] = []
    for root in local_roots(task):
        rels = root_files(root)
        fulls = [os.path.join(root.source, r) if r else root.source for r in rels]
        if max_root_bytes is not None:
            size = sum(os.stat(f).st_size for f, r in zip(fulls, rels, strict=True)
                       if not (r and os.path.islink(f)))
            if size > max_root_bytes:
                raise UploadTooLargeError(root.label, root.source, size, max_root_bytes)
        files = tuple(_entry(full, rel) for full, rel in zip(fulls, rels, strict=True))
        out.append(ManifestRoot(root.field, root.key, root.source, root.is_dir, files))
    return UploadManifest(tuple(out))


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class UploadTooLargeError(LauncherError):
    """An upload over the server's limit."""

    exit_code = 2

    def __init__(self, label: str, source: str, size: int, limit: int) -> None:
        super().__init__(
            f"{label}: {source} is {human_bytes(size)} ({size} bytes), over the server's "
            f"upload limit of {human_bytes(limit)} ({limit} bytes; LAUNCHER_API_MAX_UPLOAD on "
            "the server). Leave large files out with .gitignore or .launcherignore, or put "
            "them in a bucket (file_mounts from s3://...).")
