"""Buckets on the nodes: S3 file mounts (COPY) and the checkpoint store's node side.

Client-side orchestration; the bytes move node <-> S3 (launcher/runtime/bucket_sync.py,
shipped to `~/.launcher-storage/` on every node). boto3 is only imported (through
launcher.clouds.aws.storage) when a task really uses S3.

- `plan_bucket_copies(task)`: the S3 copies a launch makes, validated without I/O.
  Raises FileMountError, naming the field, for what cannot run yet: MOUNT /
  MOUNT_CACHED modes (no FUSE client on the nodes), stores other than s3, and
  non-s3 bucket URIs. Dry runs and cost queries never call it: they plan all of them.
- `prepare_buckets(copies)`: client side, before the nodes copy: buckets named by
  storage mounts are created when missing, local `source` dirs uploaded to them.
- `install_on_nodes(runners, cloud)`: bucket_sync.py, its stdlib S3 client
  (s3_stdlib.py, used when the node has no boto3) + config.json (the standard
  endpoint variables the client has set) on every node, and the client's AWS
  credentials as `~/.aws/credentials` (0600) unless the nodes use an instance role
  (`aws.iam_instance_profile` in the config, on AWS); an SSH-pool host that has that
  file already keeps its own.
- `copy_to_nodes(runners, copies)`: every node downloads every copy, in parallel.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.runtime.runner import CommandRunner
    from launcher.task import Task

STORAGE_DIR = "~/.launcher-storage"
SCRIPT = f"{STORAGE_DIR}/bucket_sync.py"
NODE_SCRIPT = '"$HOME"/.launcher-storage/bucket_sync.py'  # the same, as a shell word
S3_CLIENT = f"{STORAGE_DIR}/s3_stdlib.py"  # bucket_sync's S3 client when boto3 is missing
COPY_TIMEOUT_S = 6 * 3600.0
CREDENTIALS = "~/.aws/credentials"

MOUNT_REFUSAL = (
    "mode {mode} would mount the bucket with a FUSE client (mountpoint-s3, goofys) that "
    "launcher does not install on nodes yet, so the launch is refused rather than run "
    "with an empty directory. Use `mode: COPY` (the bucket is copied onto every node "
    "before setup; files written there are not uploaded back — write outputs with "
    "`aws s3 cp`/boto3, or use `checkpoint: {{store: s3://...}}` for state that must "
    "survive the nodes). `launcher cost` and `launch --dryrun` accept {mode}."
)


class StorageError(LauncherError):
    """A bucket could not be prepared or copied onto the nodes."""

    exit_code = 2


@dataclass(frozen=True)
class BucketCopy:
    """One S3 prefix copied onto every node at `remote` before setup.

    `create_bucket`: a bucket to create if missing first; `upload_from`: a local
    directory uploaded to it before the nodes copy; `field`: the task field, for errors."""

    remote: str
    uri: str
    field: str
    create_bucket: str | None = None
    upload_from: str | None = None


def _refuse(task: Task, field_path: str, message: str) -> LauncherError:
    from launcher.runtime.execution import FileMountError

    return FileMountError(str(task.error(field_path, message)))


def plan_bucket_copies(task: Task) -> list[BucketCopy]:
    """The S3 copies of `task`'s file mounts, in task order. Pure (no I/O).

    Raises FileMountError naming the field for a mount a launch cannot do yet."""
    from launcher.task_storage import store_of_uri

    out: list[BucketCopy] = []
    for remote, source in task.file_mounts.items():
        if "://" not in source:
            continue
        where = f"file_mounts.{remote}"
        if not source.startswith("s3://"):
            store = store_of_uri(source) or source.split("://", 1)[0]
            raise _refuse(task, where, f"copying {store} buckets ({source}) to nodes is not "
                          "supported yet: only s3:// works at launch until that cloud exists "
                          "(`launcher cost` and `launch --dryrun` accept it).")
        if not source[5:].split("/", 1)[0]:
            raise _refuse(task, where, f"'{source}' names no bucket.")
        out.append(BucketCopy(remote=remote, uri=source, field=where))
    for remote, mount in task.storage_mounts.items():
        where = f"file_mounts.{remote}"
        if mount.placeholder is not None:  # `exec` has no check_values(): refuse here too
            raise _refuse(task, f"{where}.name", f"{mount.placeholder}: give the storage "
                          "mount a real bucket name before launching.")
        if mount.store != "s3":
            raise _refuse(task, f"{where}.store", f"store '{mount.store}' is planned by "
                          "`launcher cost` and `launch --dryrun`, but launching with it is not "
                          "supported until that cloud exists; use `store: s3`.")
        if mount.mode != "COPY":
            raise _refuse(task, f"{where}.mode", MOUNT_REFUSAL.format(mode=mount.mode))
        out.append(BucketCopy(
            remote=remote, uri=mount.bucket_uri, field=where,
            create_bucket=mount.name, upload_from=mount.source if mount.source_is_local else None,
        ))
    return out


def require_credentials(task: Task, copies: Sequence[BucketCopy]) -> None:
    """Refuse (FileMountError naming the first bucket mount) a task that copies from S3
    when this machine has no AWS credentials for the nodes to use, BEFORE anything is
    provisioned. No network, no boto3. Nodes on AWS with `aws.iam_instance_profile`
    use their role, so that is enough when nothing has to be uploaded from here."""
    if not copies:
        return
    from launcher.clouds.aws.session import local_credentials_source

    if local_credentials_source() is not None:
        return
    if uses_instance_role("aws") and not any(c.upload_from for c in copies):
        return
    raise _refuse(task, copies[0].field, "copying from S3 needs AWS credentials on this "
                  "machine (the nodes get a copy of them), and none are configured: set "
                  "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or run "
                  "`aws configure`; for nodes on AWS, `aws.iam_instance_profile` in "
                  "config.yaml lets them use a role instead.")


def prepare_buckets(copies: Sequence[BucketCopy],
                    on_event: Callable[[str], None] | None = None) -> None:
    """Create the buckets storage mounts name (when missing) and upload their local
    sources. Blocking, on the client. Raises StorageError naming the field."""
    from launcher.clouds.aws import storage

    for c in copies:
        if c.create_bucket is None:
            continue
        try:
            if storage.ensure_bucket(c.create_bucket) and on_event:
                on_event(f"Created bucket s3://{c.create_bucket} ({c.field})")
            if c.upload_from is not None:
                n, size = storage.upload_dir(c.upload_from, c.create_bucket)
                if on_event:
                    on_event(f"Uploaded {n} file(s), {size} bytes, from {c.upload_from} "
                             f"to s3://{c.create_bucket}")
        except LauncherError as exc:
            raise StorageError(f"{c.field}: {exc}") from None


def ensure_store_bucket(store_uri: str) -> None:
    """Create the checkpoint store's bucket when missing. Raises StorageError."""
    from launcher.clouds.aws import storage

    bucket = store_uri[5:].split("/", 1)[0]
    try:
        storage.ensure_bucket(bucket)
    except LauncherError as exc:
        raise StorageError(f"checkpoint store {store_uri}: {exc}") from None


def uses_instance_role(cloud: str | None) -> bool:
    """Nodes on AWS with `aws.iam_instance_profile` configured use their role."""
    if cloud != "aws":
        return False
    try:
        from launcher.config import load_config

        aws = getattr(load_config(), "aws", None)
        return bool(getattr(aws, "iam_instance_profile", None))
    except Exception:  # a broken config is reported by the launch itself
        return False


def node_files(cloud: str | None) -> dict[str, tuple[str, int]]:
    """node path -> (content, mode) of what every node of an S3-using task gets."""
    from launcher.clouds.aws import storage

    here = resources.files("launcher.runtime")
    files = {
        SCRIPT: (here.joinpath("bucket_sync.py").read_text("utf-8"), 0o700),
        S3_CLIENT: (here.joinpath("s3_stdlib.py").read_text("utf-8"), 0o600),
        f"{STORAGE_DIR}/config.json": (json.dumps(storage.endpoint_settings()) + "\n", 0o600),
    }
    if not uses_instance_role(cloud):
        creds = storage.node_credentials()
        if creds is not None:
            body = "[default]\n" + "".join(f"{k} = {v}\n" for k, v in creds.items())
            files[CREDENTIALS] = (body, 0o600)
    return files


def install_on_nodes(runners: Sequence[CommandRunner], cloud: str | None) -> None:
    """Put bucket_sync.py, s3_stdlib.py, its config and (unless an instance role) the credentials on
    every node. Blocking, parallel. Runner errors propagate."""
    from launcher.runtime.execution import parallel

    files = node_files(cloud)

    def put(runner: CommandRunner) -> None:
        for path, (text, mode) in files.items():
            if path == CREDENTIALS and cloud == "ssh" and runner.run(
                    "test -e ~/.aws/credentials", timeout=30).returncode == 0:
                continue  # an SSH pool host is your machine: its own credentials stay
            runner.put_text(text, path, mode=mode)

    parallel(put, list(runners))


def copy_to_nodes(runners: Sequence[CommandRunner], copies: Sequence[BucketCopy],
                  on_event: Callable[[str], None] | None = None) -> None:
    """Every node downloads every copy to its `remote` path (node-side, from S3).
    Blocking, parallel across nodes. Raises StorageError naming the node and field."""
    from launcher.runtime.execution import parallel
    from launcher.runtime.runner import shell_path

    if not copies:
        return
    if on_event:
        on_event(f"Copying {len(copies)} bucket mount(s) onto {len(runners)} node(s)")

    def copy(runner: CommandRunner) -> None:
        for c in copies:
            cmd = (f"python3 {NODE_SCRIPT} download {shlex.quote(c.uri)} "
                   f"{shell_path(_node_target(c.remote))}")
            res = runner.run(cmd, timeout=COPY_TIMEOUT_S)
            if res.returncode != 0:
                raise StorageError(f"{c.field}: copying {c.uri} onto node {runner.node.rank} "
                                   f"failed: {res.tail(3) or 'exit ' + str(res.returncode)}")

    parallel(copy, list(runners))


def _node_target(remote: str) -> str:
    return remote if remote.startswith(("/", "~")) else f"~/{remote}"


def checkpoint_store_active(store: str | None) -> bool:
    """True for a checkpoint store the nodes sync themselves (s3://)."""
    return bool(store) and str(store).startswith("s3://")


def sync_storage(runners: Sequence[CommandRunner], task: Task, *, cloud: str | None = None,
                 checkpoint_store: str | None = None,
                 on_event: Callable[[str], None] | None = None) -> None:
    """The whole S3 part of a cluster's file sync: buckets prepared, the node files
    installed (only when the task uses S3), every S3 mount copied onto every node.
    Raises FileMountError / StorageError / runner errors."""
    copies = plan_bucket_copies(task)
    if not copies and not checkpoint_store_active(checkpoint_store):
        return
    prepare_buckets(copies, on_event)
    if checkpoint_store_active(checkpoint_store):
        ensure_store_bucket(str(checkpoint_store))
    install_on_nodes(runners, cloud)
    copy_to_nodes(runners, copies, on_event)

