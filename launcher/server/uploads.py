"""Uploaded task files on the server: content-addressed, per user, materialized as trees
that replace the task's local paths. Cheap to import (no FastAPI).

    server/uploads/<user>/blobs/<sha[:2]>/<sha256>   one file's content
    server/uploads/<user>/trees/<tree id>/<n>        root n of one manifest (a dir or a file)

- A user's blobs and trees are theirs alone: a manifest is materialized only from that
  user's blobs, and the hashes a client may ask about are looked up only there (asking
  cannot tell whether someone else uploaded some content).
- A tree is named by the hash of its manifest, so the same workdir launched again reuses
  it; it is built in a temporary directory and renamed into place (never half there).
  Managed jobs keep pointing at their tree: every recovery syncs from it again.
- Unused uploads are garbage-collected (launcher.server.uploads_gc): blobs and trees
  carry their last use in their mtime.
- `server_task` is the only way a submitted task becomes a `Task` on the server: every
  local path in it must be one of the user's uploads, so a client can never make the
  server read (and ship to a node) a file of the server's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import LauncherError
from launcher.runtime.upload_manifest import (
    ManifestRoot,
    UploadManifest,
    UploadTooLargeError,
)
from launcher.server.settings import server_dir

if TYPE_CHECKING:
    from launcher.task.model import Task

_SHA = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


class UploadError(LauncherError):
    exit_code = 2


class UploadStore:
    """One user's uploads under the server's home."""

    def __init__(self, user: str, home: Path | None = None) -> None:
        self.root = server_dir(home) / "uploads" / user
        self.blobs = self.root / "blobs"
        self.trees = self.root / "trees"
        for d in (self.root.parent, self.root, self.blobs, self.trees):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)

    def blob_path(self, sha: str) -> Path:
        return self.blobs / sha[:2] / sha

    def missing(self, digests: list[str]) -> list[str]:
        """The digests this user has not uploaded yet (in the order given)."""
        bad = [d for d in digests if not _SHA.match(d)]
        if bad:
            raise UploadError(f"Not a SHA-256 digest: {bad[0][:80]!r}.")
        out = []
        for d in dict.fromkeys(digests):
            try:
                os.utime(self.blob_path(d))  # in use again: kept from garbage collection
            except FileNotFoundError:
                out.append(d)
        return out

    def ingest_tar(self, tar_path: Path, max_member: int) -> tuple[int, int]:
        """Store every member of the tar at `tar_path` (each named by its SHA-256) as a
        blob, checking the content against its name. Returns (files, bytes) stored."""
        count = total = 0
        try:
            with tarfile.open(tar_path, mode="r|*") as tar:
                for member in tar:
                    if not member.isreg() or not _SHA.match(member.name):
                        raise UploadError(f"Upload member {member.name[:80]!r} is not a blob "
                                          "named by its SHA-256.")
                    if member.size > max_member:
                        raise UploadTooLargeError("upload", member.name, member.size, max_member)
                    src = tar.extractfile(member)
                    assert src is not None
                    total += self._store(member.name, src)
                    count += 1
        except tarfile.TarError as exc:
            raise UploadError(f"The upload is not a readable tar stream ({exc}).") from None
        return count, total

    def _store(self, sha: str, src: Any) -> int:
        dest = self.blob_path(sha)
        dest.parent.mkdir(mode=0o700, exist_ok=True)
        h, n = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".in-")
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    n += len(chunk)
            if h.hexdigest() != sha:
                raise UploadError(f"Uploaded content does not match its hash {sha[:12]}... "
                                  "(the file changed while uploading?): launch again.")
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return n

    def materialize(self, manifest: UploadManifest) -> list[Path]:
        """The server-side path of each root of `manifest`, in order, built from this
        user's blobs. Raises UploadError when a blob was never uploaded."""
        digest = hashlib.sha256(json.dumps(manifest.to_json()["roots"], sort_keys=True,
                                           default=list).encode()).hexdigest()
        tree = self.trees / digest[:32]
        paths = [tree / str(i) for i in range(len(manifest.roots))]
        if tree.exists():
            os.utime(tree)  # reused: kept from garbage collection (uploads_gc.py)
            return paths
        tmp = Path(tempfile.mkdtemp(dir=self.trees, prefix=".build-"))
        try:
            for i, root in enumerate(manifest.roots):
                self._build_root(root, tmp / str(i))
            try:
                os.rename(tmp, tree)
            except OSError:  # built at the same time by another request: theirs stands
                if not tree.exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return paths

    def _build_root(self, root: ManifestRoot, dest: Path) -> None:
        if not root.is_dir:
            f = root.files[0]
            self._copy_blob(root, f.sha256, f.path or os.path.basename(root.source), dest,
                            f.mode)
            return
        dest.mkdir(mode=0o700)
        for f in root.files:
            target = dest / f.path
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if f.link is not None:
                os.symlink(f.link, target)
            else:
                self._copy_blob(root, f.sha256, f.path, target, f.mode)

    def _copy_blob(self, root: ManifestRoot, sha: str, rel: str, dest: Path, mode: int) -> None:
        blob = self.blob_path(sha)
        if not blob.exists():
            raise UploadError(f"{root.label}: the content of {rel or root.source} was not "
                              "uploaded (it changed, or the upload was cut short): launch "
                              "again.")
        shutil.copyfile(blob, dest)
        os.chmod(dest, (mode & 0o777) | 0o600)
        os.utime(blob)


def check_manifest(manifest: UploadManifest, max_root_bytes: int) -> None:
    """Refuse a root over the size limit (naming its path and size) or a path that
    would leave its root (absolute, `..`, or a link pointing outside)."""
    for root in manifest.roots:
        if root.size > max_root_bytes:
            raise UploadTooLargeError(root.label, root.source, root.size, max_root_bytes)
        if root.field not in ("workdir", "file_mounts") or (root.field == "file_mounts"
                                                            and not root.key):
            raise UploadError(f"Upload root {root.field!r} is not a workdir or a file mount.")
        if not root.is_dir and len(root.files) != 1:
            raise UploadError(f"{root.label}: a single-file upload has {len(root.files)} files.")
        for f in root.files:
            if root.is_dir and not _inside(f.path):
                raise UploadError(f"{root.label}: the path {f.path[:200]!r} leaves its directory.")
            if f.link is not None and (not root.is_dir or os.path.isabs(f.link)
                                       or not _inside(os.path.join(os.path.dirname(f.path),
                                                                   f.link))):
                raise UploadError(f"{root.label}: the link {f.path!r} -> {f.link!r} points "
                                  "outside its directory, which an upload cannot carry.")
            if f.link is None and not _SHA.match(f.sha256):
                raise UploadError(f"{root.label}: {f.path!r} has no SHA-256 digest.")


def _inside(rel: str) -> bool:
    if not rel or os.path.isabs(rel) or "\\" in rel or "\0" in rel:
        return False
    norm = os.path.normpath(rel)
    return norm != ".." and not norm.startswith("../") and norm != "."


def server_task(task_dict: Mapping[str, Any], *, user: str, source: str | None,
                secrets: Mapping[str, str] | None, uploads: Any | None,
                max_root_bytes: int) -> Task:
    """The `Task` a client submitted, its local paths replaced by `user`'s uploaded
    copies (`uploads`: an UploadManifest's JSON). Raises LauncherError for a malformed
    task, a missing upload, or any local path that is not one of the user's uploads."""
    from launcher.task.model import Task

    d = json.loads(json.dumps(task_dict))  # a private deep copy to rewrite
    store = UploadStore(user)
    if uploads is not None:
        manifest = UploadManifest.from_json(uploads)
        check_manifest(manifest, max_root_bytes)
        mounts = d.get("file_mounts") if isinstance(d.get("file_mounts"), dict) else {}
        for root, path in zip(manifest.roots, store.materialize(manifest), strict=True):
            if root.field == "workdir":
                d["workdir"] = str(path)
            elif isinstance(mounts.get(root.key), str):
                mounts[root.key] = str(path)
            else:
                raise UploadError(f"{root.label}: the task has no such local file mount.")
    task = Task.from_dict(d, source=source or "the submitted task",
                          secret_overrides=dict(secrets) if secrets else None)
    mine = store.trees.resolve()
    for label, local in _local_paths(task):
        if not Path(os.path.expanduser(local)).resolve().is_relative_to(mine):
            raise UploadError(
                f"{label}: {local} is a path on your machine that was not uploaded; this "
                "client must upload it (update launcher on the client to match the server).")
    for remote, m in task.storage_mounts.items():
        if m.source_is_local or m.source_list:
            raise UploadError(
                f"file_mounts.{remote}.source: a local source for a storage mount cannot go "
                "through the server yet; upload it to the bucket first, or use a plain file "
                "mount (`{remote}: ./path`), which is uploaded.")
    return task


def _local_paths(task: Task) -> list[tuple[str, str]]:
    out = [("workdir", task.workdir)] if task.workdir is not None else []
    return out + [(f"file_mounts.{r}", s) for r, s in task.file_mounts.items() if "://" not in s]
