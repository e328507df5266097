"""S3 from the client's side: buckets for storage mounts and checkpoints, local uploads,
and the credentials handed to nodes. boto3 is imported here, lazily (only when a task
uses S3); bulk downloads happen on the nodes (launcher/runtime/bucket_sync.py).

Every function honours the standard AWS variables (`AWS_PROFILE`, `AWS_REGION`,
`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`) through boto3 itself, and raises
`BucketError` (a LauncherError with one readable line) for an expected failure.
"""

from __future__ import annotations

import os
from typing import Any

from launcher.errors import LauncherError

ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


class BucketError(LauncherError):
    """A bucket could not be created, read or written from this machine."""

    exit_code = 2


def _client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(connect_timeout=5, read_timeout=60,
                                             retries={"max_attempts": 8, "mode": "standard"}))


def _describe(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        return f"{err.get('Code', type(exc).__name__)}: {err.get('Message', '')}".rstrip(": ")
    return f"{type(exc).__name__}: {exc}"


def ensure_bucket(name: str, region: str | None = None) -> bool:
    """Create bucket `name` unless it exists and is ours to use. True if created.

    `region` (default: the session's region, else us-east-1) is where a new bucket
    goes. Raises BucketError when the name is taken by another account (403) or S3
    cannot be reached."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = _client()
    try:
        client.head_bucket(Bucket=name)
        return False
    except ClientError as exc:
        code = str((exc.response.get("Error") or {}).get("Code", ""))
        if code in ("403", "AccessDenied", "Forbidden"):
            raise BucketError(f"bucket {name!r} exists but this AWS identity may not use it "
                              "(bucket names are global: pick another name).") from None
        if code not in ("404", "NoSuchBucket", "NotFound"):
            raise BucketError(f"bucket {name!r}: {_describe(exc)}") from None
    except BotoCoreError as exc:
        raise BucketError(f"cannot reach S3 to check bucket {name!r}: {exc}") from None
    region = region or client.meta.region_name or "us-east-1"
    kwargs: dict[str, Any] = {"Bucket": name}
    if region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**kwargs)
    except ClientError as exc:
        code = str((exc.response.get("Error") or {}).get("Code", ""))
        if code == "BucketAlreadyOwnedByYou":
            return False
        raise BucketError(f"cannot create bucket {name!r} in {region}: {_describe(exc)}") from None
    except BotoCoreError as exc:
        raise BucketError(f"cannot create bucket {name!r}: {exc}") from None
    return True


def check_access(name: str) -> None:
    """Prove with one read (ListObjectsV2, one key) that this identity may use bucket
    `name`; a bucket that does not exist yet passes (it is created at launch). Raises
    BucketError naming S3's reason (bad keys, expired token, access denied...)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        _client().list_objects_v2(Bucket=name, MaxKeys=1)
    except ClientError as exc:
        code = str((exc.response.get("Error") or {}).get("Code", ""))
        if code not in ("NoSuchBucket", "404", "NotFound"):
            raise BucketError(f"bucket {name!r}: {_describe(exc)}") from None
    except BotoCoreError as exc:
        raise BucketError(f"cannot reach S3 for bucket {name!r}: {exc}") from None


def upload_dir(local_dir: str, bucket: str, prefix: str = "") -> tuple[int, int]:
    """Upload every file under `local_dir` to `s3://bucket/prefix/...` whose key is
    missing or whose size differs (a re-launch uploads only what changed). Returns
    (files uploaded, bytes). Never deletes objects. Raises BucketError."""
    from botocore.exceptions import BotoCoreError, ClientError

    base = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    client = _client()
    try:
        remote: dict[str, int] = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base):
            for obj in page.get("Contents", []):
                remote[obj["Key"]] = int(obj["Size"])
        count = total = 0
        for root, dirs, files in os.walk(local_dir):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                key = base + os.path.relpath(path, local_dir).replace(os.sep, "/")
                size = os.path.getsize(path)
                if remote.get(key) == size:
                    continue
                client.upload_file(path, bucket, key)
                count += 1
                total += size
        return count, total
    except (ClientError, BotoCoreError, OSError) as exc:
        raise BucketError(f"uploading {local_dir} to s3://{bucket}/{base}: "
                          f"{_describe(exc)}") from None


def node_credentials() -> dict[str, str] | None:
    """The client's current AWS credentials (access key, secret, session token) as the
    `[default]` section of a credentials file would hold them, or None when boto3
    finds none. Resolves SSO/assume-role profiles to their temporary keys."""
    import boto3

    creds = boto3.Session().get_credentials()
    if creds is None:
        return None
    frozen = creds.get_frozen_credentials()
    out = {"aws_access_key_id": frozen.access_key, "aws_secret_access_key": frozen.secret_key}
    if frozen.token:
        out["aws_session_token"] = frozen.token
    return out


def endpoint_settings() -> dict[str, str]:
    """The standard endpoint variables this client has set (forwarded to the nodes)."""
    return {k: os.environ[k] for k in ENDPOINT_VARS if os.environ.get(k)}
