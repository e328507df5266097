"""Azure Blob from the client's side: containers for storage mounts and checkpoints,
local uploads, and the SAS tokens handed to nodes. No SDK: a SAS is an HMAC-SHA256 over
documented fields, signed here with the storage account key; the transfers reuse the
node-side stdlib client (launcher/runtime/blob_stdlib.py).

Credentials (the az CLI's standard variables; a key never leaves this machine):
- `AZURE_STORAGE_CONNECTION_STRING` (`AccountName=...;AccountKey=...`, optionally
  `BlobEndpoint=...` — the endpoint override, e.g. Azurite or a private endpoint), or
- `AZURE_STORAGE_ACCOUNT` + `AZURE_STORAGE_KEY`; or, with no key for the account,
- Microsoft Entra ID through `DefaultAzureCredential` (azure-identity, imported only
  then): the nodes' SAS is then a *user delegation* SAS signed with a user delegation
  key (Get User Delegation Key; the identity needs "Storage Blob Data Contributor"), and
  containers are created with the bearer token.
`AZURE_STORAGE_ACCOUNT` (else the connection string's account) is also the account of a
storage mount with `store: azure` and a `name`.

What the nodes get (`node_entries`): per container a service SAS (`sr=c`,
permissions `racwl`: read, add, create, write, list; `racwdl`, with delete, only for a
checkpoint store's container, whose superseded saves the nodes collect), valid
`SAS_HOURS` (7 days) from the moment of the launch; a fresh one is minted on every
launch and every recovery of a managed job. Creating a container uses an account SAS
(`ss=b`, `srt=sco`) on this machine only.

Every function raises `BucketError` (a LauncherError, one readable line).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
import urllib.parse
from typing import Any

from launcher.errors import LauncherError

SAS_VERSION = "2021-08-06"
SAS_HOURS = 7 * 24  # also the longest a user delegation key may live
NODE_PERMISSIONS = "racwl"
CHECKPOINT_PERMISSIONS = "racwdl"  # + delete: the nodes collect superseded saves
STORAGE_SCOPE = "https://storage.azure.com/.default"


class BucketError(LauncherError):
    """A container could not be created, read or written from this machine."""

    exit_code = 2


def _connection() -> dict[str, str]:
    text = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
    out: dict[str, str] = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def default_account() -> str | None:
    """`AZURE_STORAGE_ACCOUNT`, else the connection string's `AccountName`."""
    return os.environ.get("AZURE_STORAGE_ACCOUNT") or _connection().get("AccountName") or None


def account_key(account: str) -> str | None:
    """The key of `account` from the standard variables, or None."""
    conn = _connection()
    if conn.get("AccountName") == account and conn.get("AccountKey"):
        return conn["AccountKey"]
    if os.environ.get("AZURE_STORAGE_ACCOUNT") == account:
        return os.environ.get("AZURE_STORAGE_KEY") or None
    return None


def blob_endpoint(account: str) -> str:
    """The connection string's `BlobEndpoint` for `account`, else Azure's public one."""
    conn = _connection()
    if conn.get("AccountName") == account and conn.get("BlobEndpoint"):
        return conn["BlobEndpoint"].rstrip("/")
    return f"https://{account}.blob.core.windows.net"


def endpoint_settings() -> dict[str, str]:
    """Nothing for config.json: each container's endpoint travels with its SAS."""
    return {}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _sign(key: str, text: str) -> str:
    try:
        raw = base64.b64decode(key)
    except ValueError:
        raise BucketError("the Azure storage account key is not base64") from None
    return base64.b64encode(hmac.new(raw, text.encode(), hashlib.sha256).digest()).decode()


def _key_or_fail(account: str) -> str:
    key = account_key(account)
    if key is None:
        raise BucketError(f"no key for storage account {account!r}: set "
                          "AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and "
                          "AZURE_STORAGE_KEY")
    return key


def _credential() -> Any:
    """DefaultAzureCredential (lazy import). Tests replace this function."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise BucketError("no key for the storage account and no azure-identity to ask "
                          "Entra ID (pip install 'launcher[azure]')") from None
    return DefaultAzureCredential()


def _bearer() -> str:
    try:
        return str(_credential().get_token(STORAGE_SCOPE).token)
    except BucketError:
        raise
    except Exception as exc:  # azure.core ClientAuthenticationError and friends
        raise BucketError(f"no Azure credentials for Blob storage: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                          ) from None


def has_credentials(account: str) -> bool:
    """A key for `account`, or somewhere DefaultAzureCredential may find an identity.
    No network, no SDK."""
    if account_key(account) is not None:
        return True
    from launcher.clouds.azure.session import local_credentials_source

    return local_credentials_source() is not None


def user_delegation_key(account: str, hours: float = SAS_HOURS) -> dict[str, str]:
    """Get User Delegation Key (Entra ID bearer token): its Signed* fields and Value."""
    import xml.etree.ElementTree as ET

    import requests

    now = time.time()
    body = (f'<?xml version="1.0" encoding="utf-8"?><KeyInfo><Start>{_iso(now - 300)}</Start>'
            f"<Expiry>{_iso(now + hours * 3600)}</Expiry></KeyInfo>")
    try:
        r = requests.post(f"{blob_endpoint(account)}/?restype=service&comp=userdelegationkey",
                          data=body.encode(), timeout=60, headers={
                              "Authorization": f"Bearer {_bearer()}",
                              "x-ms-version": SAS_VERSION, "Content-Type": "application/xml"})
    except requests.RequestException as exc:
        raise BucketError(f"cannot reach Azure Blob for account {account!r}: {exc}") from None
    if r.status_code != 200:
        raise BucketError(f"cannot get a user delegation key for {account!r}: HTTP "
                          f"{r.status_code} {r.headers.get('x-ms-error-code', '')}".rstrip())
    root = ET.fromstring(r.content)
    return {child.tag: child.text or "" for child in root}


def container_sas(account: str, container: str, hours: float = SAS_HOURS,
                  permissions: str = NODE_PERMISSIONS) -> tuple[str, float]:
    """(SAS query string for the container, expiry epoch): a service SAS signed with the
    account key, else a user delegation SAS (Entra ID). Raises BucketError."""
    if account_key(account) is None:
        return _delegation_sas(account, container, hours, permissions)
    now = time.time()
    st, se = _iso(now - 300), _iso(now + hours * 3600)
    fields = [permissions, st, se, f"/blob/{account}/{container}", "", "", "https,http",
              SAS_VERSION, "c", "", "", "", "", "", "", ""]
    sig = _sign(_key_or_fail(account), "\n".join(fields))
    query = {"sv": SAS_VERSION, "spr": "https,http", "st": st, "se": se, "sr": "c",
             "sp": permissions, "sig": sig}
    return urllib.parse.urlencode(query), now + hours * 3600


def _delegation_sas(account: str, container: str, hours: float, permissions: str
                    ) -> tuple[str, float]:
    key = user_delegation_key(account, hours)
    now = time.time()
    st, se = _iso(now - 300), _iso(now + hours * 3600)
    skeys = ("SignedOid", "SignedTid", "SignedStart", "SignedExpiry", "SignedService",
             "SignedVersion")
    fields = [permissions, st, se, f"/blob/{account}/{container}",
              *(key.get(k, "") for k in skeys), "", "", "", "", "https,http", SAS_VERSION,
              "c", "", "", "", "", "", "", ""]
    sig = _sign(key.get("Value", ""), "\n".join(fields))
    query = {"sv": SAS_VERSION, "spr": "https,http", "st": st, "se": se, "sr": "c",
             "sp": permissions, "skoid": key.get("SignedOid", ""),
             "sktid": key.get("SignedTid", ""), "skt": key.get("SignedStart", ""),
             "ske": key.get("SignedExpiry", ""), "sks": key.get("SignedService", ""),
             "skv": key.get("SignedVersion", ""), "sig": sig}
    return urllib.parse.urlencode(query), now + hours * 3600


def account_sas(account: str, hours: float = 1.0, permissions: str = "rwlac") -> str:
    """An account SAS (blob service; service, container and object level) for this
    machine's own requests (creating a container). Raises BucketError."""
    now = time.time()
    st, se = _iso(now - 300), _iso(now + hours * 3600)
    text = "\n".join([account, permissions, "b", "sco", st, se, "", "https,http",
                      SAS_VERSION, ""]) + "\n"
    sig = _sign(_key_or_fail(account), text)
    return urllib.parse.urlencode({"sv": SAS_VERSION, "ss": "b", "srt": "sco",
                                   "sp": permissions, "st": st, "se": se,
                                   "spr": "https,http", "sig": sig})


def _split(bucket: str) -> tuple[str, str]:
    account, _, container = bucket.partition("/")
    if not account or not container:
        raise BucketError(f"{bucket!r}: expected ACCOUNT/CONTAINER")
    return account, container


def ensure_bucket(bucket: str) -> bool:
    """Create container "ACCOUNT/CONTAINER" when missing. True if created."""
    import requests

    account, container = _split(bucket)
    url = f"{blob_endpoint(account)}/{urllib.parse.quote(container)}?restype=container"
    headers = {"x-ms-version": SAS_VERSION, "Content-Length": "0"}
    if account_key(account) is not None:
        url += "&" + account_sas(account)
    else:
        headers["Authorization"] = f"Bearer {_bearer()}"
    try:
        r = requests.put(url, headers=headers, timeout=60)
    except requests.RequestException as exc:
        raise BucketError(f"cannot reach Azure Blob for {bucket!r}: {exc}") from None
    if r.status_code == 201:
        return True
    code = r.headers.get("x-ms-error-code", "")
    if r.status_code == 409 and code == "ContainerAlreadyExists":
        return False
    raise BucketError(f"cannot create container {bucket!r}: HTTP {r.status_code} "
                      f"{code}".rstrip())


def node_entries(buckets: set[str], deletable: frozenset[str] | set[str] = frozenset()
                 ) -> dict[str, dict[str, object]]:
    """`azure_sas.json` for the nodes: "ACCOUNT/CONTAINER" -> {sas, endpoint,
    expires_at}; the containers in `deletable` (checkpoint stores) get the delete
    permission too. Raises BucketError when an account has no key here."""
    out: dict[str, dict[str, object]] = {}
    for bucket in sorted(buckets):
        account, container = _split(bucket)
        sas, expires = container_sas(account, container, permissions=CHECKPOINT_PERMISSIONS
                                     if bucket in deletable else NODE_PERMISSIONS)
        out[bucket] = {"sas": sas, "endpoint": blob_endpoint(account), "expires_at": expires}
    return out


def check_access(bucket: str) -> None:
    """Prove that a SAS can be minted here for "ACCOUNT/CONTAINER" and that Azure accepts
    it (one List Blobs); a container that does not exist yet passes (it is created at
    launch). Raises BucketError."""
    from launcher.runtime.blob_stdlib import BlobClient, BlobError

    _split(bucket)
    try:
        BlobClient(node_entries({bucket})).list(bucket, "", limit=1)
    except BlobError as exc:
        if exc.status != 404:
            raise BucketError(f"container {bucket!r}: {exc}") from None


def upload_dir(local_dir: str, bucket: str, prefix: str = "") -> tuple[int, int]:
    """Upload every file under `local_dir` whose blob is missing or whose size differs
    (the node-side stdlib client, with a SAS minted here). Returns (files, bytes)."""
    from launcher.runtime.blob_stdlib import BlobClient, BlobError

    client = BlobClient(node_entries({bucket}))
    base = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    try:
        remote = {k: v[0] for k, v in client.list(bucket, base).items()}
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
    except (BlobError, OSError) as exc:
        raise BucketError(f"uploading {local_dir} to az://{bucket}/{base}: {exc}") from None
