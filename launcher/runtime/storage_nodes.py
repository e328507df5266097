"""Buckets on the nodes: S3 / GCS / Azure Blob file mounts (COPY) and the checkpoint
store's node side.

Client-side orchestration; the bytes move node <-> bucket (launcher/runtime/bucket_sync.py,
shipped to `~/.launcher-storage/` on every node). boto3 is only imported (through
launcher.clouds.aws.storage) when a task really uses S3, requests/google-auth
(launcher.clouds.gcp.storage) only when it uses gs://; Azure needs no SDK
(launcher.clouds.azure.storage signs SAS tokens with the account key).

- `plan_bucket_copies(task)`: the s3://, gs:// and Azure (az://, https://ACCOUNT.blob.
  core.windows.net) copies a launch makes, validated without I/O. Raises
  FileMountError, naming the field, for what cannot run yet: MOUNT / MOUNT_CACHED modes
  (no FUSE client on the nodes), other stores (r2, ibm, oci) and their URIs. Dry runs and cost queries never call it: they plan all of them.
- `prepare_buckets(copies)`: client side, before the nodes copy: buckets named by
  storage mounts are created when missing, local `source` dirs uploaded to them.
- `install_on_nodes(runners, cloud, stores)`: bucket_sync.py, its stdlib clients
  (s3_stdlib.py, used when the node has no boto3; gcs_stdlib.py, blob_stdlib.py and
  their shared http_stdlib.py), the checkpoint protocol (checkpoint_sync.py) +
  config.json (the standard endpoint variables the client has set) on every node; for S3
  the client's AWS
  credentials as `~/.aws/credentials` (0600) unless the nodes use an instance role
  (`aws.iam_instance_profile` in the config, on AWS; an SSH-pool host that has that
  file already keeps its own); for GCS a short-lived access token minted here
  (`~/.launcher-storage/gcs_token.json`, 0600; ~1 h, renewed on every launch/recovery);
  for Azure a container SAS per container used (`azure_sas.json`, 0600; 7 days, renewed
  on every launch/recovery; the account key stays here).
- `copy_to_nodes(runners, copies)`: every node downloads every copy, in parallel.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from launcher.errors import FileMountError, LauncherError
from launcher.runtime.fanout import parallel

if TYPE_CHECKING:
    from launcher.runtime.runner import CommandRunner
    from launcher.task.model import Task

STORAGE_DIR = "~/.launcher-storage"
SCRIPT = f"{STORAGE_DIR}/bucket_sync.py"
NODE_SCRIPT = '"$HOME"/.launcher-storage/bucket_sync.py'  # the same, as a shell word
S3_CLIENT = f"{STORAGE_DIR}/s3_stdlib.py"  # bucket_sync's S3 client when boto3 is missing
GCS_CLIENT = f"{STORAGE_DIR}/gcs_stdlib.py"  # bucket_sync's GCS client
GCS_TOKEN = f"{STORAGE_DIR}/gcs_token.json"
# The stores a launch syncs: store name -> URI scheme (others are refused at launch).
SCHEMES = {"s3": "s3://", "gcs": "gs://", "azure": "az://"}
AZURE_SAS = f"{STORAGE_DIR}/azure_sas.json"
BLOB_HOST = ".blob.core.windows.net"
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

    @property
    def store(self) -> str:
        """`s3` or `gcs`, from the URI's scheme."""
        return store_of(self.uri) or "s3"


def store_of(uri: str | None) -> str | None:
    """The synced store (`s3`, `gcs`, `azure`) a URI belongs to, or None."""
    if uri and str(uri).startswith("https://") and \
            str(uri)[8:].split("/", 1)[0].endswith(BLOB_HOST):
        return "azure"
    for store, scheme in SCHEMES.items():
        if uri and str(uri).startswith(scheme):
            return store
    return None


def bucket_of(uri: str) -> str:
    """The bucket a URI names: `s3://b/x` -> "b"; Azure (`az://acct/cont/x`,
    `https://acct.blob.core.windows.net/cont/x`) -> "acct/cont"; "" when it names none."""
    if store_of(uri) == "azure":
        rest = uri[5:] if uri.startswith("az://") else \
            uri[8:].replace(BLOB_HOST, "", 1)
        account, _, rest = rest.partition("/")
        container = rest.split("/", 1)[0]
        return f"{account}/{container}" if account and container else ""
    return uri.split("://", 1)[-1].split("/", 1)[0]


def _storage_module(store: str) -> Any:
    """The client-side bucket module of `store` (lazy: imports its SDK only now)."""
    if store == "azure":
        from launcher.clouds.azure import storage as blob

        return blob
    if store == "gcs":
        from launcher.clouds.gcp import storage as gcs

        return gcs
    from launcher.clouds.aws import storage as aws

    return aws


def _refuse(task: Task, field_path: str, message: str) -> LauncherError:
    return FileMountError(str(task.error(field_path, message)))


def plan_bucket_copies(task: Task) -> list[BucketCopy]:
    """The S3 copies of `task`'s file mounts, in task order. Pure (no I/O).

    Raises FileMountError naming the field for a mount a launch cannot do yet."""
    from launcher.task.storage import LIST_SOURCE_NOT_LAUNCHABLE, store_of_uri

    out: list[BucketCopy] = []
    for remote, source in task.file_mounts.items():
        if "://" not in source:
            continue
        where = f"file_mounts.{remote}"
        if store_of(source) is None:
            store = store_of_uri(source) or source.split("://", 1)[0]
            raise _refuse(task, where, f"copying {store} buckets ({source}) to nodes is not "
                          "supported yet: only s3://, gs:// and Azure Blob (az://, https://"
                          "ACCOUNT.blob.core.windows.net) work at launch (`launcher cost` "
                          "and `launch --dryrun` accept it).")
        if not bucket_of(source):
            raise _refuse(task, where, f"'{source}' names no bucket.")
        out.append(BucketCopy(remote=remote, uri=source, field=where))
    for remote, mount in task.storage_mounts.items():
        where = f"file_mounts.{remote}"
        if mount.placeholder is not None:  # `exec` has no check_values(): refuse here too
            raise _refuse(task, f"{where}.name", f"{mount.placeholder}: give the storage "
                          "mount a real bucket name before launching.")
        if mount.source_list:  # `exec` has no check_values(): refuse here too
            raise _refuse(task, f"{where}.source", LIST_SOURCE_NOT_LAUNCHABLE)
        if mount.store not in SCHEMES:
            raise _refuse(task, f"{where}.store", f"store '{mount.store}' is planned by "
                          "`launcher cost` and `launch --dryrun`, but launching with it is not "
                          "supported yet; use `store: s3`, `gcs` or `azure`.")
        if mount.mode != "COPY":
            raise _refuse(task, f"{where}.mode", MOUNT_REFUSAL.format(mode=mount.mode))
        uri, create = mount.bucket_uri, mount.name
        if mount.store == "azure":
            from launcher.clouds.azure.storage import default_account

            if mount.source is not None and not mount.source_is_local:
                create = bucket_of(uri) if mount.name else None
            else:
                account = default_account()
                if account is None:
                    raise _refuse(task, f"{where}.name", "a storage mount with `store: azure` "
                                  "needs a storage account: set AZURE_STORAGE_ACCOUNT (or "
                                  "AZURE_STORAGE_CONNECTION_STRING), or give an az:// source.")
                uri, create = f"az://{account}/{mount.name}", f"{account}/{mount.name}"
        out.append(BucketCopy(
            remote=remote, uri=uri, field=where,
            create_bucket=create, upload_from=mount.source if mount.source_is_local else None,
        ))
    return out


def require_credentials(task: Task, copies: Sequence[BucketCopy]) -> None:
    """Refuse (FileMountError naming the first bucket mount) a task that copies from S3
    when this machine has no AWS credentials for the nodes to use, BEFORE anything is
    provisioned. No network, no boto3. Nodes on AWS with `aws.iam_instance_profile`
    use their role, so that is enough when nothing has to be uploaded from here."""
    gcs = [c for c in copies if c.store == "gcs"]
    if gcs:
        from launcher.clouds.gcp.storage import has_local_credentials

        if not has_local_credentials():
            raise _refuse(task, gcs[0].field, "copying from GCS needs Google credentials on "
                          "this machine (the nodes get a short-lived token minted from them), "
                          "and none are found: run `gcloud auth application-default login` "
                          "or set GOOGLE_APPLICATION_CREDENTIALS.")
    for c in copies:
        if c.store == "azure":
            from launcher.clouds.azure.storage import has_credentials

            account = bucket_of(c.uri).split("/", 1)[0]
            if not has_credentials(account):
                raise _refuse(task, c.field, f"copying from Azure Blob needs credentials for "
                              f"storage account {account!r} on this machine (the nodes get a "
                              "container SAS signed with them): set AZURE_STORAGE_CONNECTION_"
                              "STRING, or AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, or "
                              "sign in with `az login` (a user delegation SAS).")
    copies = [c for c in copies if c.store == "s3"]
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


class StoreCredentialsError(StorageError):
    """This machine has no usable credentials for a checkpoint store (found before any
    machine is provisioned; retrying cannot help until the user adds them)."""


def require_store_credentials(store_uri: str, where: str) -> None:
    """Refuse (StoreCredentialsError naming `where`, the field that set the store) a
    checkpoint store this machine has no credentials for. No network, no SDK import.
    The client always needs them: it creates the bucket and mints what the nodes get
    (S3 nodes with an instance role still need the bucket created from here)."""
    kind = store_of(store_uri)
    if kind == "gcs":
        from launcher.clouds.gcp.storage import has_local_credentials

        if not has_local_credentials():
            raise StoreCredentialsError(
                f"{where}: the checkpoint store {store_uri} needs Google credentials on this "
                "machine (it creates the bucket and mints the nodes' short-lived token), and "
                "none are found: run `gcloud auth application-default login` or set "
                "GOOGLE_APPLICATION_CREDENTIALS.")
    elif kind == "azure":
        from launcher.clouds.azure.storage import has_credentials

        account = bucket_of(store_uri).split("/", 1)[0]
        if not has_credentials(account):
            raise StoreCredentialsError(
                f"{where}: the checkpoint store {store_uri} needs credentials for storage "
                f"account {account!r} on this machine (the nodes get a container SAS signed "
                "with them): set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and "
                "AZURE_STORAGE_KEY, or sign in with `az login`.")
    elif kind == "s3":
        from launcher.clouds.aws.session import local_credentials_source

        if local_credentials_source() is None:
            raise StoreCredentialsError(
                f"{where}: the checkpoint store {store_uri} needs AWS credentials on this "
                "machine (it creates the bucket and gives the nodes a copy), and none are "
                "configured: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE, "
                "or run `aws configure`.")


def check_store_access(store_uri: str, where: str) -> None:
    """`require_store_credentials`, then one read request proving the credentials work
    for the store's bucket (a bucket that does not exist yet passes: it is created at
    launch). Raises StoreCredentialsError naming `where`."""
    require_store_credentials(store_uri, where)
    kind = store_of(store_uri) or "s3"
    try:
        _storage_module(kind).check_access(bucket_of(store_uri))
    except ImportError as exc:
        extra = {"s3": "aws", "gcs": "gcp", "azure": "azure"}[kind]
        raise StoreCredentialsError(f"{where}: the checkpoint store {store_uri} needs "
                                    f"{exc.name or 'an SDK'} on this machine: pip install "
                                    f"'launcher[{extra}]'.") from None
    except LauncherError as exc:
        raise StoreCredentialsError(f"{where}: the checkpoint store {store_uri} cannot be "
                                    f"used with this machine's credentials: {exc}") from None


def prepare_buckets(copies: Sequence[BucketCopy],
                    on_event: Callable[[str], None] | None = None) -> None:
    """Create the buckets storage mounts name (when missing) and upload their local
    sources. Blocking, on the client. Raises StorageError naming the field."""
    for c in copies:
        if c.create_bucket is None:
            continue
        storage = _storage_module(c.store)
        scheme = SCHEMES[c.store]
        try:
            if storage.ensure_bucket(c.create_bucket) and on_event:
                on_event(f"Created bucket {scheme}{c.create_bucket} ({c.field})")
            if c.upload_from is not None:
                n, size = storage.upload_dir(c.upload_from, c.create_bucket)
                if on_event:
                    on_event(f"Uploaded {n} file(s), {size} bytes, from {c.upload_from} "
                             f"to {scheme}{c.create_bucket}")
        except LauncherError as exc:
            raise StorageError(f"{c.field}: {exc}") from None


def ensure_store_bucket(store_uri: str) -> None:
    """Create the checkpoint store's bucket when missing. Raises StorageError."""
    storage = _storage_module(store_of(store_uri) or "s3")
    bucket = bucket_of(store_uri)
    try:
        storage.ensure_bucket(bucket)
    except LauncherError as exc:
        raise StorageError(f"checkpoint store {store_uri}: {exc}") from None


def uses_instance_role(cloud: str | None) -> bool:
    """Nodes on AWS with `aws.iam_instance_profile` configured use their role."""
    if cloud != "aws":
        return False
    try:
        from launcher.config.settings import load_config

        aws = getattr(load_config(), "aws", None)
        return bool(getattr(aws, "iam_instance_profile", None))
    except Exception:  # a broken config is reported by the launch itself
        return False


def node_files(cloud: str | None, stores: Collection[str] = ("s3",),
               azure_buckets: Collection[str] = (),
               checkpoint_buckets: Collection[str] = ()) -> dict[str, tuple[str, int]]:
    """node path -> (content, mode) of what every node of a bucket-using task gets:
    the scripts, config.json (endpoints), and the credentials of the `stores` used
    (for Azure, a SAS per "ACCOUNT/CONTAINER" of `azure_buckets`; those also in
    `checkpoint_buckets` may delete). Raises LauncherError (BucketError) when a GCS token
    or an Azure SAS cannot be minted."""
    here = resources.files("launcher.runtime")
    settings: dict[str, str] = {}
    for store in sorted(set(stores)):
        settings.update(_storage_module(store).endpoint_settings())
    files = {
        SCRIPT: (here.joinpath("bucket_sync.py").read_text("utf-8"), 0o700),
        S3_CLIENT: (here.joinpath("s3_stdlib.py").read_text("utf-8"), 0o600),
        GCS_CLIENT: (here.joinpath("gcs_stdlib.py").read_text("utf-8"), 0o600),
        f"{STORAGE_DIR}/blob_stdlib.py": (here.joinpath("blob_stdlib.py").read_text("utf-8"),
                                          0o600),
        f"{STORAGE_DIR}/checkpoint_sync.py": (
            here.joinpath("checkpoint_sync.py").read_text("utf-8"), 0o600),
        f"{STORAGE_DIR}/http_stdlib.py": (here.joinpath("http_stdlib.py").read_text("utf-8"),
                                          0o600),
        f"{STORAGE_DIR}/config.json": (json.dumps(settings) + "\n", 0o600),
    }
    files.update(short_lived_files(stores, azure_buckets, checkpoint_buckets)[0])
    if "s3" in stores and not uses_instance_role(cloud):
        from launcher.clouds.aws import storage

        creds = storage.node_credentials()
        if creds is not None:
            body = "[default]\n" + "".join(f"{k} = {v}\n" for k, v in creds.items())
            files[CREDENTIALS] = (body, 0o600)
    return files


def short_lived_files(stores: Collection[str], azure_buckets: Collection[str] = (),
                      checkpoint_buckets: Collection[str] = ()
                      ) -> tuple[dict[str, tuple[str, int]], float | None]:
    """The node files that expire — a GCS access token (`gs://` in `stores`), the
    Azure SAS of `azure_buckets` — freshly minted, and when the first of them expires
    (epoch seconds; None: nothing expires). Raises LauncherError (BucketError)."""
    files: dict[str, tuple[str, int]] = {}
    expiries: list[float] = []
    if "gcs" in stores:
        token, expires_at, issued = _storage_module("gcs").minted_token()
        files[GCS_TOKEN] = (json.dumps({"access_token": token, "expires_at": expires_at,
                                        "issued_at": issued}) + "\n", 0o600)
        expiries.append(expires_at)
    if azure_buckets:
        entries = _storage_module("azure").node_entries(set(azure_buckets),
                                                        set(checkpoint_buckets))
        files[AZURE_SAS] = (json.dumps(entries) + "\n", 0o600)
        expiries += [float(str(e["expires_at"])) for e in entries.values()]
    return files, min(expiries) if expiries else None


def install_on_nodes(runners: Sequence[CommandRunner], cloud: str | None,
                     stores: Collection[str] = ("s3",),
                     azure_buckets: Collection[str] = (),
                     checkpoint_buckets: Collection[str] = ()) -> None:
    """Put bucket_sync.py, its stdlib clients, its config and the credentials of `stores`
    (S3: unless an instance role) on every node. Blocking, parallel. Runner errors and
    BucketError (no GCS token) propagate."""
    files = node_files(cloud, stores, azure_buckets, checkpoint_buckets)

    def put(runner: CommandRunner) -> None:
        for path, (text, mode) in files.items():
            if path == CREDENTIALS and cloud == "ssh" and runner.run(
                    "test -e ~/.aws/credentials", timeout=30).returncode == 0:
                continue  # an SSH pool host is your machine: its own credentials stay
            runner.put_text(text, path, mode=mode)

    parallel(put, list(runners))


def shipped_lifetime(store: str) -> tuple[float, float] | None:
    """(issued_at, expires_at) of the short-lived credentials of checkpoint store `store`
    the nodes got at their launch in this process (a GCS token: the one this process
    minted last; an Azure SAS: minted just before, for SAS_HOURS); None when the store's
    credentials do not expire. Mints a GCS token when this process has none."""
    kind = store_of(store)
    if kind == "gcs":
        _, expires_at, issued = _storage_module("gcs").minted_token()
        return issued, expires_at
    if kind == "azure":
        now = time.time()
        return now, now + float(_storage_module("azure").SAS_HOURS) * 3600
    return None


def renew_on_nodes(runners: Sequence[CommandRunner], store: str) -> float | None:
    """Mint the short-lived credentials checkpoint store `store` needs (a GCS token, an
    Azure SAS for its container) again and put them on every node, replacing the old
    files (node-side saves read them afresh each time; the launch's file mounts, which
    those files also covered, are done by then). Returns when the new ones expire (None: the
    store's credentials do not expire, nothing was written). Blocking, parallel.
    Raises LauncherError (BucketError) or runner errors."""
    kind = store_of(store)
    if kind not in ("gcs", "azure"):
        return None
    azure = {bucket_of(store)} if kind == "azure" else set()
    files, expires_at = short_lived_files({kind}, azure, azure)

    def put(runner: CommandRunner) -> None:
        for path, (text, mode) in files.items():
            runner.put_text(text, path, mode=mode)

    parallel(put, list(runners))
    return expires_at


def copy_to_nodes(runners: Sequence[CommandRunner], copies: Sequence[BucketCopy],
                  on_event: Callable[[str], None] | None = None) -> None:
    """Every node downloads every copy to its `remote` path (node-side, from S3).
    Blocking, parallel across nodes. Raises StorageError naming the node and field."""
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
    """True for a checkpoint store the nodes sync themselves (s3://, gs://, Azure)."""
    return store_of(store) is not None


def sync_storage(runners: Sequence[CommandRunner], task: Task, *, cloud: str | None = None,
                 checkpoint_store: str | None = None,
                 on_event: Callable[[str], None] | None = None) -> None:
    """The whole bucket part of a cluster's file sync: buckets prepared, the node files
    installed (only when the task uses a bucket), every mount copied onto every node.
    Raises FileMountError / StorageError / runner errors."""
    copies = plan_bucket_copies(task)
    if not copies and not checkpoint_store_active(checkpoint_store):
        return
    prepare_buckets(copies, on_event)
    uris = [c.uri for c in copies]
    if checkpoint_store_active(checkpoint_store):
        ensure_store_bucket(str(checkpoint_store))
        uris.append(str(checkpoint_store))
    stores = {store_of(u) or "s3" for u in uris}
    azure = {bucket_of(u) for u in uris if store_of(u) == "azure"}
    deletable = {bucket_of(str(checkpoint_store))} if store_of(checkpoint_store) == "azure" \
        else set()
    try:
        install_on_nodes(runners, cloud, stores, azure, deletable)
    except LauncherError as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"installing bucket credentials on the nodes: {exc}") from None
    copy_to_nodes(runners, copies, on_event)

