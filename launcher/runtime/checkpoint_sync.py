"""Checkpoint saves committed by manifests, and restores that read one save exactly.
STDLIB ONLY; imports nothing from launcher (shipped next to bucket_sync.py, which calls
it for `save` and `restore` with a backend client of any store: S3, GCS, Azure Blob).

Layout under the store prefix P:

    P/.launcher/manifests/WRITER/SEQ.json       one per committed save (written last)
    P/.launcher/objects/WRITER/SEQ-TOKEN/REL    the files that save uploaded

WRITER names the node that saved (`rank-N`, from `LAUNCHER_NODE_RANK`: every node of a
gang saves its own directory), SEQ is the writer's save number (10 digits), TOKEN random
hex (two saves that race for one number never share objects). A manifest lists the
writer's whole checkpoint, REL -> {key, size, mtime_ns}: a file unchanged since the
previous save keeps the object that save uploaded.

`save` (one writer; serialized per directory on a node by a lock file):
1. read the writer's newest manifest;
2. upload, under the new save's objects, every file of DIR that is new or whose size or
   mtime differs from its entry, except temporary files (`TEMP_PATTERNS`) and files the
   node restored and has not touched since (`in step`, kept in its state file). A file
   whose size, mtime or inode changed while it was uploaded is left out (its previous
   entry, if any, stays) and tried again at the next save;
3. write the new manifest: the commit; a save killed before it leaves no trace a restore
   sees;
4. garbage-collect: the writer's manifests older than the newest `KEEP` and the objects
   none of those reference (only objects of saves numbered below the new one: a racing
   save's are never touched). A refused delete is reported and left for the next save.

`restore`: for every writer, its newest manifest that can be read; the files of all
writers merged (the same REL from several writers: the newest mtime wins); each one
fetched to a temporary name, given the entry's mtime and renamed into place. An object
deleted meanwhile (a newer save of its writer committed and collected it) restarts the
restore from the manifests, up to `RESTORE_TRIES` times. A prefix without any manifest
(saved by a launcher before manifests existed) is restored object by object, as then.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = ".launcher/"
MANIFESTS = ROOT + "manifests/"
OBJECTS = ROOT + "objects/"
KEEP = 2  # committed saves kept per writer: a restore reading the older one still finds it
RESTORE_TRIES = 5
TEMP_PATTERNS = ("*.tmp", ".*.tmp", "*.partial")
OWN_TEMP = ".bucket-sync-"  # a restore's temporary files (another node's, in a shared dir)
STATE_VERSION = 2
_SEQ_NAME = re.compile(r"(\d{10})\.json\Z")
_SAVE_DIR = re.compile(r"(\d{10})-[0-9a-f]+\Z")


class CheckpointError(Exception):
    """A save or restore failed; the message is one line for the job's log."""


def is_temporary(name: str) -> bool:
    """A file name a save skips: the documented temp patterns, or a restore's own."""
    return name.startswith(OWN_TEMP) or any(fnmatch.fnmatch(name, p) for p in TEMP_PATTERNS)


def writer_name(env: dict[str, str] | None = None) -> str:
    """`rank-N` from `LAUNCHER_NODE_RANK`, else `node`."""
    rank = (env if env is not None else os.environ).get("LAUNCHER_NODE_RANK", "").strip()
    return f"rank-{rank}" if rank.isdigit() else "node"


def not_found(exc: BaseException) -> bool:
    """Whether a backend error means "no such object" (each client says it its way)."""
    if getattr(exc, "status", None) == 404 or getattr(exc, "code", None) in ("NoSuchKey", "404"):
        return True
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code", "")) in ("404", "NoSuchKey",
                                                                      "NotFound")
    return isinstance(exc, FileNotFoundError)


# --------------------------------------------------------------------------- manifests


def parse_manifest_key(key: str, base: str) -> tuple[str, int] | None:
    """(writer, seq) of a manifest key under `base`, or None for any other key."""
    rest = key[len(base) + len(MANIFESTS):] if key.startswith(base + MANIFESTS) else ""
    writer, _, name = rest.partition("/")
    m = _SEQ_NAME.match(name)
    return (writer, int(m.group(1))) if writer and m else None


def manifest_key(base: str, writer: str, seq: int) -> str:
    return f"{base}{MANIFESTS}{writer}/{seq:010d}.json"


def manifests_by_writer(keys: Any, base: str) -> dict[str, list[int]]:
    """writer -> its committed save numbers, newest first, from a listing's keys."""
    out: dict[str, list[int]] = {}
    for key in keys:
        parsed = parse_manifest_key(key, base)
        if parsed is not None:
            out.setdefault(parsed[0], []).append(parsed[1])
    return {w: sorted(seqs, reverse=True) for w, seqs in out.items()}


def merge(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """REL -> entry of the restore that reads `manifests` (one per writer): the newest
    mtime wins where writers overlap (then the later save, then the writer's name)."""
    best: dict[str, tuple[tuple[int, float, str], dict[str, Any]]] = {}
    for doc in manifests:
        for rel, entry in (doc.get("files") or {}).items():
            rank = (int(entry.get("mtime_ns") or 0), float(doc.get("saved_at") or 0),
                    str(doc.get("writer") or ""))
            if rel not in best or rank > best[rel][0]:
                best[rel] = (rank, entry)
    return {rel: entry for rel, (_, entry) in best.items()}


def _read_json(client: Any, bucket: str, key: str, scratch: str) -> dict[str, Any]:
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=scratch)
    os.close(fd)
    try:
        client.download_file(bucket, key, tmp)
        with open(tmp) as f:
            doc = json.load(f)
    except ValueError:
        raise CheckpointError(f"manifest {key} is not valid JSON") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        raise CheckpointError(f"manifest {key} has no file list")
    return doc


def _write_json(client: Any, bucket: str, key: str, doc: dict[str, Any], scratch: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=scratch)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True)
        client.upload_file(tmp, bucket, key)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


# --------------------------------------------------------------------------- node state
# What this node knows to be in step with the store: REL -> [size, mtime_ns] of the files
# it restored or saved. A file restored from another writer and untouched since is not
# uploaded again by this one.


class NodeState:
    """The state file of one (directory, store) pair on this node, and its lock."""

    def __init__(self, local_dir: str, uri: str, home: str | None = None) -> None:
        import hashlib

        digest = hashlib.sha256(f"v{STATE_VERSION}\0{os.path.abspath(local_dir)}\0{uri}"
                                .encode()).hexdigest()[:16]
        self.dir = os.path.join(home or os.path.expanduser("~"), ".launcher-storage", "state")
        self.path = os.path.join(self.dir, digest + ".json")
        self.files: dict[str, list[int]] = {}

    def load(self) -> NodeState:
        try:
            with open(self.path) as f:
                doc = json.load(f)
            files = doc.get("files") if isinstance(doc, dict) else None
            self.files = files if isinstance(files, dict) else {}
        except (OSError, ValueError):
            self.files = {}
        return self

    def store(self) -> None:
        try:
            os.makedirs(self.dir, exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.writing"
            with open(tmp, "w") as f:
                json.dump({"version": STATE_VERSION, "files": self.files}, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # only costs a re-upload next time

    @contextlib.contextmanager
    def locked(self) -> Any:
        """Exclusive for the duration (a periodic save, the save on a notice and the save
        at exit of one rank may overlap)."""
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path + ".lock", "a") as f:
            try:
                import fcntl

                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            except (ImportError, OSError):
                pass  # no flock here: saves are then only as serial as their callers
            yield


def _stamp(path: str) -> tuple[int, int, int] | None:
    """(size, mtime_ns, inode), or None when the file is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


# --------------------------------------------------------------------------- save


class SaveResult:
    """What a save did: uploads, files left out because they changed, GC trouble."""

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0
        self.changed: list[str] = []
        self.seq: int | None = None
        self.gc_error = ""


def _walk(src: str) -> list[tuple[str, str]]:
    """(REL with '/', path) of every regular file under `src` a save considers."""
    out = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if is_temporary(name):
                continue
            path = os.path.join(root, name)
            out.append((os.path.relpath(path, src).replace(os.sep, "/"), path))
    return out


def _latest(client: Any, bucket: str, base: str, writer: str,
            scratch: str) -> tuple[list[int], dict[str, Any]]:
    """(the writer's save numbers, newest first; its newest readable manifest), or
    ([], empty) for none."""
    for _ in range(3):
        seqs = manifests_by_writer(client.list(bucket, f"{base}{MANIFESTS}{writer}/"),
                                   base).get(writer, [])
        if not seqs:
            return [], {"files": {}}
        try:
            return seqs, _read_json(client, bucket, manifest_key(base, writer, seqs[0]),
                                    scratch)
        except Exception as exc:
            if not not_found(exc):
                raise
    raise CheckpointError(f"the manifests of {writer} kept changing while being read")


def save(client: Any, bucket: str, base: str, src: str, state: NodeState,
         writer: str) -> SaveResult:
    """Save `src` to `bucket`/`base` (a "directory" prefix, "" or ending in "/") as
    `writer`: see the module docstring. Raises CheckpointError or the client's errors."""
    result = SaveResult()
    os.makedirs(state.dir, exist_ok=True)
    with state.locked():
        state.load()
        seqs, prev = _latest(client, bucket, base, writer, state.dir)
        seq = (seqs[0] if seqs else 0) + 1
        save_dir = f"{base}{OBJECTS}{writer}/{seq:010d}-{secrets.token_hex(4)}/"
        files = {rel: dict(e) for rel, e in prev.get("files", {}).items()}
        for rel, path in _walk(src):
            before = _stamp(path)
            if before is None:
                continue  # removed while we walked
            size, mtime_ns, _ = before
            entry = files.get(rel)
            if entry is not None and [entry.get("size"), entry.get("mtime_ns")] == [size,
                                                                                  mtime_ns]:
                state.files[rel] = [size, mtime_ns]
                continue  # unchanged since this writer saved it
            if state.files.get(rel) == [size, mtime_ns]:
                continue  # restored here, untouched: another writer's save holds it
            try:
                client.upload_file(path, bucket, save_dir + rel)
            except FileNotFoundError:
                continue  # a temporary file renamed away while we uploaded it
            if _stamp(path) != before:
                result.changed.append(rel)  # written during the upload: next save
                continue
            files[rel] = {"key": save_dir[len(base):] + rel, "size": size, "mtime_ns": mtime_ns}
            state.files[rel] = [size, mtime_ns]
            result.count += 1
            result.bytes += size
        if result.count:
            doc = {"version": 1, "writer": writer, "seq": seq, "saved_at": time.time(),
                   "files": files}
            _write_json(client, bucket, manifest_key(base, writer, seq), doc, state.dir)
            result.seq = seq
            result.gc_error = _collect(client, bucket, base, writer, seq, seqs, [doc, prev])
        state.store()
    return result


def _collect(client: Any, bucket: str, base: str, writer: str, seq: int, older: list[int],
             kept: list[dict[str, Any]]) -> str:
    """Delete `writer`'s manifests (of `older`, its numbers before save `seq`) older than
    the `KEEP` newest and its objects (of saves numbered below `seq`) that `kept` (those
    manifests) do not reference. Returns "" or the first delete error, in one line."""
    referenced = {base + str(e.get("key")) for doc in kept[:KEEP]
                  for e in (doc.get("files") or {}).values()}
    oldest_kept = seq - KEEP + 1
    doomed = [manifest_key(base, writer, s) for s in older if s < oldest_kept]
    prefix = f"{base}{OBJECTS}{writer}/"
    for key in client.list(bucket, prefix):
        m = _SAVE_DIR.match(key[len(prefix):].split("/", 1)[0])
        if m and int(m.group(1)) < seq and key not in referenced:
            doomed.append(key)
    for key in doomed:
        try:
            client.delete(bucket, key)
        except Exception as exc:
            if not not_found(exc):
                return (f"old saves' objects were not deleted ({type(exc).__name__}: {exc}); "
                        "the next save tries again")
    return ""


# --------------------------------------------------------------------------- restore


class RestoreResult:
    """What a restore did; `saves` names the save read per writer (empty: legacy)."""

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0
        self.saves: list[str] = []


def _safe_parts(rel: str) -> list[str] | None:
    parts = rel.split("/")
    return None if any(p in ("", ".", "..") for p in parts) else parts


def _fetch(client: Any, bucket: str, key: str, dest: str, entry: dict[str, Any]) -> bool:
    """Download one object atomically with the entry's mtime; False when `dest` is
    already the same (size and mtime)."""
    size, mtime_ns = int(entry.get("size") or 0), int(entry.get("mtime_ns") or 0)
    try:
        st = os.stat(dest)
        if st.st_size == size and st.st_mtime_ns == mtime_ns:
            return False
    except OSError:
        pass
    parent = os.path.dirname(dest) or "."
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=OWN_TEMP, dir=parent)
    os.close(fd)
    try:
        client.download_file(bucket, key, tmp)
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def restore(client: Any, bucket: str, base: str, dest: str, state: NodeState,
            legacy: Callable[[], tuple[int, int]]) -> RestoreResult:
    """Restore the latest committed save of every writer under `base` into `dest` (see
    the module docstring); `legacy()` restores a prefix that has no manifest. Raises
    CheckpointError or the client's errors."""
    os.makedirs(dest, exist_ok=True)
    os.makedirs(state.dir, exist_ok=True)
    state.load()
    for _ in range(RESTORE_TRIES):
        writers = manifests_by_writer(client.list(bucket, base + MANIFESTS), base)
        result = RestoreResult()
        if not writers:
            result.count, result.bytes = legacy()
            return result  # the legacy files are not "in step": the next save adopts them
        docs = []
        for writer, seqs in sorted(writers.items()):
            for seq in seqs:
                try:
                    docs.append(_read_json(client, bucket, manifest_key(base, writer, seq),
                                           state.dir))
                    result.saves.append(f"{writer} save {seq}")
                    break
                except Exception as exc:
                    if not not_found(exc):
                        raise
        try:
            for rel, entry in sorted(merge(docs).items()):
                parts = _safe_parts(rel)
                if parts is None:
                    continue  # never write outside DEST
                path = os.path.join(dest, *parts)
                if _fetch(client, bucket, base + str(entry["key"]), path, entry):
                    result.count += 1
                    result.bytes += int(entry.get("size") or 0)
                state.files[rel] = [int(entry.get("size") or 0), int(entry.get("mtime_ns") or 0)]
        except Exception as exc:
            if not_found(exc):
                continue  # collected by a newer save meanwhile: read the manifests again
            raise
        state.store()
        return result
    raise CheckpointError(f"the saves under {base or '/'} kept changing while being restored "
                          f"({RESTORE_TRIES} tries)")
