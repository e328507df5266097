"""Node-side S3 / GCS transfers for file mounts and checkpoints. STDLIB ONLY (+ boto3 if
present).

Shipped by the client to `~/.launcher-storage/bucket_sync.py` on every node of a
cluster whose task uses S3, and run there with `python3`: the bulk data moves
between the node and S3 directly, never through the client.

    python3 bucket_sync.py download s3://bucket/prefix DEST   # a COPY file mount
    python3 bucket_sync.py restore  s3://bucket/prefix DIR    # checkpoint: bucket -> node
    python3 bucket_sync.py save     DIR s3://bucket/prefix    # checkpoint: node -> bucket

Contract:
- `download` copies every object under the prefix to the same relative path under
  DEST (a prefix that is exactly one object's key is copied to DEST itself). Files are
  written to a temporary name and renamed, so a reader never sees half a file.
  Unchanged files (same size and modification time as the object) are skipped.
- `save` and `restore` follow the checkpoint protocol of checkpoint_sync.py (shipped
  next to this script): a save uploads the new and changed files of DIR (never
  temporary files `*.tmp`, `.*.tmp`, `*.partial`, nor files that change while they are
  uploaded) and commits them with a manifest written last; a restore fetches exactly the
  files of the latest committed save of every node (rank) that saved. Objects are never
  deleted, except those of a node's saves that a newer save of that node superseded.
- Exit code 0 on success, 1 on a transfer failure (one line on stderr says why),
  2 on bad usage. One summary line on stdout (none for a `save` that changed nothing).

Backend (`backend()`): boto3 when it imports (credentials from its standard chain),
else the stdlib S3 client shipped next to this script (s3_stdlib.py: SigV4, the same
credential order — env, `~/.aws/credentials`, instance role via IMDSv2), so the node
image needs neither boto3 nor the `aws` CLI. Both go through the same code here (same
skipping, atomic renames, manifest, summary). The `aws` CLI (`aws s3 sync`/`cp`) is
only used when asked for with `LAUNCHER_S3_BACKEND=cli`, and only for `download` (its
change detection and output differ; checkpoints need the manifest protocol, so `save` and
`restore` then use boto3 or the stdlib client); `LAUNCHER_S3_BACKEND=stdlib`/`boto3`
forces the others. The endpoint
comes from the standard `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3` variables, which the
client writes into `config.json` next to this script when it has them set (the
variables on the node win).

az:// (and https://ACCOUNT.blob.core.windows.net/...) URIs use blob_stdlib.py (SAS from
the client-written `azure_sas.json` or `AZURE_STORAGE_SAS_TOKEN`); gs:// URIs (same
commands, same contract) always use gcs_stdlib.py, shipped next to
this script (the GCS JSON API; token: env `LAUNCHER_GCS_TOKEN`, the client-minted
`gcs_token.json`, else the GCE metadata server; endpoint: `STORAGE_EMULATOR_HOST`,
also forwarded through `config.json`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

CONFIG_NAME = "config.json"
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "STORAGE_EMULATOR_HOST")
SCHEMES = ("s3://", "gs://", "az://")
BLOB_HOST = ".blob.core.windows.net"


class SyncError(Exception):
    """A transfer failed; the message is shown to the user."""


def load_config(path: str | None = None) -> dict:
    """The client-written settings next to this script ({} when absent), and the
    endpoint variables exported from them unless the node already has them."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), CONFIG_NAME)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    for name in ENDPOINT_VARS:
        value = doc.get(name)
        if isinstance(value, str) and value and not os.environ.get(name):
            os.environ[name] = value
    return doc


def _blob_https(uri: str) -> bool:
    return uri.startswith("https://") and uri[8:].split("/", 1)[0].endswith(BLOB_HOST)


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` (or gs://) -> ("bucket", "a/b"); Azure's `az://acct/cont/a/b`
    and `https://acct.blob.core.windows.net/cont/a/b` -> ("acct/cont", "a/b").
    Raises SyncError for another scheme."""
    if _blob_https(uri):
        host, _, rest = uri[8:].partition("/")
        uri = f"az://{host[:-len(BLOB_HOST)]}/{rest}"
    if uri.startswith("az://"):
        account, _, rest = uri[5:].partition("/")
        container, _, prefix = rest.partition("/")
        if not account or not container:
            raise SyncError(f"{uri}: expected az://ACCOUNT/CONTAINER[/PREFIX]")
        return f"{account}/{container}", prefix
    if not uri.startswith(SCHEMES):
        raise SyncError(f"{uri}: only {', '.join(SCHEMES)} URIs are supported on the nodes")
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise SyncError(f"{uri}: no bucket name")
    return bucket, prefix


def _node_path(path: str) -> str:
    """`~/x` and relative paths are under the node's home."""
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.join(os.path.expanduser("~"), path)


def _dir_prefix(prefix: str) -> str:
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


# --------------------------------------------------------------------------- backends
# A backend has list(bucket, prefix) -> {key: (size, mtime)}, download_file(bucket, key,
# path), upload_file(path, bucket, key) and delete(bucket, key) (a missing key is fine).

BACKEND_VAR = "LAUNCHER_S3_BACKEND"


class _Boto3:
    """boto3 behind the backend interface."""

    name = "boto3"

    def __init__(self, client: Any) -> None:
        self.client = client

    def list(self, bucket: str, prefix: str) -> dict[str, tuple[int, float]]:
        out: dict[str, tuple[int, float]] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                       Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"]] = (int(obj["Size"]), obj["LastModified"].timestamp())
        return out

    def download_file(self, bucket: str, key: str, path: str) -> None:
        self.client.download_file(bucket, key, path)

    def upload_file(self, path: str, bucket: str, key: str) -> None:
        self.client.upload_file(path, bucket, key)

    def delete(self, bucket: str, key: str) -> None:
        self.client.delete_object(Bucket=bucket, Key=key)


def _boto3_client() -> Any:
    try:
        import boto3  # noqa: PLC0415 - optional on nodes
    except ImportError:
        return None
    from botocore.config import Config  # noqa: PLC0415

    return boto3.client("s3", config=Config(retries={"max_attempts": 8, "mode": "standard"}))


def _stdlib_module(name: str = "s3_stdlib") -> Any:
    """A stdlib client module (s3_stdlib, gcs_stdlib, blob_stdlib, http_stdlib): the
    package sibling, or (on a node, even under `python3 -I`, where the script's
    directory is not on sys.path) the file next to this script."""
    import importlib  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    if __package__:
        try:
            return importlib.import_module(f"{__package__}.{name}")
        except ImportError:
            pass
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not os.path.exists(path):
        raise SyncError(f"{path} is missing (it is shipped with bucket_sync.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def backend_for(uri: str) -> Any:
    """The backend for `uri`'s scheme: the stdlib GCS client for gs://, the stdlib Blob
    client for Azure URIs, else `backend()` (S3)."""
    if uri.startswith("gs://"):
        _stdlib_module("http_stdlib")  # the clients' shared transport, loaded first
        return _stdlib_module("gcs_stdlib").GCSClient()
    if uri.startswith("az://") or _blob_https(uri):
        _stdlib_module("http_stdlib")
        return _stdlib_module("blob_stdlib").BlobClient()
    return backend()


def backend() -> Any:
    """The S3 backend to use, or None for the aws CLI: `LAUNCHER_S3_BACKEND` (boto3,
    stdlib, cli) when set, else boto3 when importable, else the stdlib client."""
    choice = os.environ.get(BACKEND_VAR, "").strip().lower()
    if choice == "cli":
        return None
    if choice != "stdlib":
        client = _boto3_client()
        if client is not None:
            return _Boto3(client)
        if choice == "boto3":
            raise SyncError(f"{BACKEND_VAR}=boto3 but boto3 is not installed on this node")
    return _stdlib_module().S3Client()


def _fetch(client: Any, bucket: str, key: str, dest: str, size: int, mtime: float) -> bool:
    """Download one object atomically; False when `dest` is already the same."""
    try:
        st = os.stat(dest)
        if st.st_size == size and int(st.st_mtime) == int(mtime):
            return False
    except OSError:
        pass
    parent = os.path.dirname(dest) or "."
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".bucket-sync-", dir=parent)
    os.close(fd)
    try:
        client.download_file(bucket, key, tmp)
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def _download(client: Any, uri: str, dest: str, single_ok: bool,
              checkpoint: bool = False) -> tuple[int, int]:
    """Copy the objects under `uri` into `dest`; (files copied, bytes). `checkpoint`: a
    store saved before manifests existed (temporary files and the protocol's own keys
    are skipped)."""
    bucket, prefix = split_uri(uri)
    if single_ok and prefix and not prefix.endswith("/"):
        objects = client.list(bucket, prefix)
        if prefix in objects and not any(k.startswith(prefix + "/") for k in objects):
            size, mtime = objects[prefix]
            return int(_fetch(client, bucket, prefix, dest, size, mtime)), size
    base = _dir_prefix(prefix)
    objects = client.list(bucket, base)
    os.makedirs(dest, exist_ok=True)
    count = total = 0
    for key, (size, mtime) in objects.items():
        rel = key[len(base):]
        if not rel or rel.endswith("/"):
            continue  # "directory" marker objects
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            continue  # never write outside DEST
        if checkpoint and (rel.startswith(_ckpt().ROOT) or _ckpt().is_temporary(parts[-1])):
            continue
        if _fetch(client, bucket, key, os.path.join(dest, *parts), size, mtime):
            count += 1
            total += size
    return count, total


def _ckpt() -> Any:
    """checkpoint_sync.py: the package sibling, or the file next to this script."""
    return _stdlib_module("checkpoint_sync")


def _checkpoint_client(client: Any) -> Any:
    """The client for `save`/`restore`: the aws CLI cannot run the manifest protocol, so
    `LAUNCHER_S3_BACKEND=cli` means boto3 (when importable) or the stdlib client here."""
    if client is not None:
        return client
    boto = _boto3_client()
    return _Boto3(boto) if boto is not None else _stdlib_module().S3Client()


def _save(client: Any, src: str, uri: str) -> str:
    ck = _ckpt()
    bucket, prefix = split_uri(uri)
    started = time.monotonic()
    try:
        res = ck.save(client, bucket, _dir_prefix(prefix), src, ck.NodeState(src, uri),
                      ck.writer_name())
    except ck.CheckpointError as exc:
        raise SyncError(str(exc)) from None
    parts = []
    if res.count:
        parts.append(f"saved {res.count} file(s), {res.bytes} bytes ({ck.writer_name()} save "
                     f"{res.seq}), from {src} to {uri} in {time.monotonic() - started:.1f}s "
                     f"({client.name})")
    if res.changed:
        shown = ", ".join(res.changed[:5]) + (" ..." if len(res.changed) > 5 else "")
        parts.append(f"{len(res.changed)} file(s) changed while being uploaded and wait for "
                     f"the next save: {shown}")
    if res.gc_error:
        parts.append(res.gc_error)
    return "; ".join(parts)  # "" when nothing changed: a periodic save stays silent


def _restore(client: Any, uri: str, dest: str) -> str:
    ck = _ckpt()
    bucket, prefix = split_uri(uri)
    started = time.monotonic()
    try:
        res = ck.restore(client, bucket, _dir_prefix(prefix), dest, ck.NodeState(dest, uri),
                         lambda: _download(client, uri, dest, False, checkpoint=True))
    except ck.CheckpointError as exc:
        raise SyncError(str(exc)) from None
    which = ", ".join(res.saves) if res.saves else "no manifest: every object"
    return (f"restored {res.count} file(s), {res.bytes} bytes ({which}), from {uri} to {dest} "
            f"in {time.monotonic() - started:.1f}s ({client.name})")


# --------------------------------------------------------------------------- aws CLI


def _cli(args: list[str]) -> None:
    exe = shutil.which("aws")
    if exe is None:
        raise SyncError(f"{BACKEND_VAR}=cli but the aws CLI is not installed on this node")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    argv = [exe, "s3", *args, "--only-show-errors"]
    if endpoint:
        argv += ["--endpoint-url", endpoint]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode == 2 and "Skipping file" in proc.stderr:
        return  # files it may not write (keys with ".."): skipped on purpose, as boto3 does
    if proc.returncode != 0:
        raise SyncError(f"aws s3 {args[0]} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")


def _cli_download(uri: str, dest: str, single_ok: bool) -> None:
    _, prefix = split_uri(uri)
    if single_ok and prefix and not prefix.endswith("/"):
        try:
            _cli(["cp", uri, dest])
            return
        except SyncError:
            pass  # not one object: a prefix
    os.makedirs(dest, exist_ok=True)
    _cli(["sync", uri.rstrip("/") + "/", dest])


# --------------------------------------------------------------------------- commands


def run(command: str, a: str, b: str) -> str:
    """Run one command; returns the summary line. Raises SyncError."""
    load_config()
    client = backend_for(b if command == "save" else a)
    if command in ("save", "restore"):
        client = _checkpoint_client(client)
    try:
        if command == "download":
            dest = _node_path(b)
            if client is None:
                _cli_download(a, dest, single_ok=True)
                return f"download: {a} -> {dest} (aws CLI)"
            started = time.monotonic()
            count, total = _download(client, a, dest, single_ok=True)
            return (f"downloaded {count} file(s), {total} bytes, from {a} to {dest} in "
                    f"{time.monotonic() - started:.1f}s ({client.name})")
        if command == "restore":
            return _restore(client, a, _node_path(b))
        if command == "save":
            src = _node_path(a)
            if not os.path.isdir(src):
                return f"save: {src} does not exist yet; nothing to save"
            return _save(client, src, b)
    except SyncError:
        raise
    except Exception as exc:  # botocore errors, S3Error, OSError: one readable line
        raise SyncError(f"{command} failed: {type(exc).__name__}: {exc}") from None
    finally:
        close = getattr(client, "close", None)
        if close is not None:
            close()
    raise SyncError(f"unknown command {command!r}")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("download", "restore", "save"):
        print("usage: bucket_sync.py download|restore URI DEST | save DIR URI", file=sys.stderr)
        return 2
    try:
        summary = run(*argv)
        if summary:
            print(f"launcher: {summary}", flush=True)
    except SyncError as exc:
        print(f"launcher: bucket sync error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
