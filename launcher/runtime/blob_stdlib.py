"""A minimal Azure Blob Storage client on the standard library alone. STDLIB ONLY;
imports nothing from launcher.

Shipped next to bucket_sync.py (`~/.launcher-storage/blob_stdlib.py`) so node-side
`az://` transfers need neither azure-storage-blob nor the `az` CLI on the image. Must run
on the python3 of common images (3.8+ syntax under `from __future__`).

bucket_sync's backend interface, with `bucket` = "ACCOUNT/CONTAINER":

- `BlobClient.list(bucket, prefix)`: List Blobs
  (`GET CONTAINER?restype=container&comp=list&prefix=&marker=`), paged by `NextMarker`;
  -> {name: (Content-Length, Last-Modified epoch seconds)}.
- `BlobClient.download_file(bucket, name, path)`: Get Blob streamed into `path`.
- `BlobClient.upload_file(path, bucket, name)`: Put Blob (`x-ms-blob-type: BlockBlob`) up
  to `block_threshold` bytes (env `LAUNCHER_AZURE_BLOCK_THRESHOLD`, default 64 MiB), else
  Put Block (`comp=block&blockid=`) per `block_size` bytes then Put Block List.
- `BlobClient.delete(bucket, name)`: Delete Blob (404 = already gone; needs the SAS's
  `d` permission).
- Every request carries `x-ms-version` (`API_VERSION`).
- Auth: a SAS token appended to every URL: env `AZURE_STORAGE_SAS_TOKEN` (the az CLI's
  variable) when set, else the container's entry of `azure_sas.json` next to this script
  (`{"ACCOUNT/CONTAINER": {"sas": ..., "endpoint": ..., "expires_at": ...}}`, written by
  the client, mode 0600). With neither, requests go anonymous (a public container).
- Endpoint: the entry's `endpoint` (an emulator, a test fake, a private endpoint), else
  `https://ACCOUNT.blob.core.windows.net`.
- Retries (http_stdlib.py: up to `MAX_ATTEMPTS`, exponential backoff with jitter) on
  408/429/5xx and connection errors. Errors: `BlobError` with the XML `<Code>: <Message>`
  in one line.
"""

from __future__ import annotations

import base64
import email.utils
import json
import os
import urllib.error
import urllib.parse
import xml.etree.ElementTree as ET
from typing import IO, Any

# The shared transport (http_stdlib.py): the package sibling, or on a node the top-level
# module bucket_sync loaded from the file next to this one.
try:
    from . import http_stdlib as http
except ImportError:
    import http_stdlib as http  # type: ignore[no-redef]

MIB = 1024 * 1024
API_VERSION = "2021-08-06"
DEFAULT_BLOCK_THRESHOLD = 64 * MIB
BLOCK_SIZE = 8 * MIB
SAS_FILE = "azure_sas.json"
SAS_VAR = "AZURE_STORAGE_SAS_TOKEN"


class BlobError(http.HTTPStoreError):
    """A Blob request failed. `status`: the HTTP status (0: connection error)."""


def load_sas_file(path: str | None = None) -> dict[str, Any]:
    """The client-written `azure_sas.json` ({} when absent or unreadable)."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), SAS_FILE)
    try:
        with open(path) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


class BlobClient:
    """bucket_sync's backend for az:// and https://*.blob.core.windows.net URIs."""

    name = "stdlib Azure Blob client"

    def __init__(self, entries: dict[str, Any] | None = None) -> None:
        self.entries = load_sas_file() if entries is None else entries
        threshold = os.environ.get("LAUNCHER_AZURE_BLOCK_THRESHOLD", "")
        self.block_threshold = int(threshold) if threshold.isdigit() else \
            DEFAULT_BLOCK_THRESHOLD
        self.block_size = BLOCK_SIZE

    def _base(self, bucket: str) -> tuple[str, str]:
        """(container URL, SAS query without '?') for "ACCOUNT/CONTAINER"."""
        account, _, container = bucket.partition("/")
        entry = self.entries.get(bucket) or {}
        endpoint = str(entry.get("endpoint") or f"https://{account}.blob.core.windows.net")
        sas = os.environ.get(SAS_VAR, "").strip() or str(entry.get("sas") or "")
        return f"{endpoint.rstrip('/')}/{urllib.parse.quote(container)}", sas.lstrip("?")

    def _url(self, bucket: str, name: str | None, query: dict[str, str]) -> str:
        base, sas = self._base(bucket)
        url = base if name is None else f"{base}/{urllib.parse.quote(name, safe='/')}"
        parts = [urllib.parse.urlencode(query)] if query else []
        if sas:
            parts.append(sas)
        return url + ("?" + "&".join(parts) if parts else "")

    def _open(self, method: str, url: str, body: bytes | IO[bytes] | None = None,
              headers: dict[str, str] | None = None, ok: tuple[int, ...] = (200, 201),
              rewind: int | None = None) -> Any:
        return http.open_with_retries(
            method, url, body, lambda: {"x-ms-version": API_VERSION, **(headers or {})}, ok,
            rewind, error=BlobError, message_of=_error_message)

    def list(self, bucket: str, prefix: str, limit: int | None = None
             ) -> dict[str, tuple[int, float]]:
        """Every blob under `prefix` (only the first page of at most `limit` when given):
        name -> (size, Last-Modified epoch seconds)."""
        out: dict[str, tuple[int, float]] = {}
        marker = ""
        while True:
            query = {"restype": "container", "comp": "list", "prefix": prefix}
            if limit is not None:
                query["maxresults"] = str(limit)
            if marker:
                query["marker"] = marker
            with self._open("GET", self._url(bucket, None, query)) as resp:
                root = ET.fromstring(resp.read())
            for blob in root.iter("Blob"):
                name = blob.findtext("Name") or ""
                props = blob.find("Properties")
                size = int((props.findtext("Content-Length") if props is not None else 0) or 0)
                modified = props.findtext("Last-Modified") if props is not None else None
                out[name] = (size, _parse_http_date(modified or ""))
            marker = root.findtext("NextMarker") or ""
            if not marker or limit is not None:
                return out

    def download_file(self, bucket: str, name: str, path: str) -> None:
        """Stream blob `name` into `path` (overwritten). Raises BlobError."""
        http.download_to(lambda: self._open("GET", self._url(bucket, name, {})), path,
                         BlobError, name)

    def upload_file(self, path: str, bucket: str, name: str) -> None:
        """Upload `path` as block blob `name` (replacing it). Raises BlobError, OSError."""
        size = os.path.getsize(path)
        if size > self.block_threshold:
            self._blocks(path, bucket, name)
            return
        with open(path, "rb") as f:
            hdrs = {"x-ms-blob-type": "BlockBlob", "Content-Length": str(size),
                    "Content-Type": "application/octet-stream"}
            self._open("PUT", self._url(bucket, name, {}), f, hdrs, rewind=0).close()

    def delete(self, bucket: str, name: str) -> None:
        """Delete Blob; one already gone is fine. Raises BlobError (403 without the
        SAS's `d` permission)."""
        try:
            self._open("DELETE", self._url(bucket, name, {}), ok=(200, 202)).close()
        except BlobError as exc:
            if exc.status != 404:
                raise

    def _blocks(self, path: str, bucket: str, name: str) -> None:
        ids: list[str] = []
        with open(path, "rb") as f:
            while True:
                chunk = f.read(self.block_size)
                if not chunk:
                    break
                block_id = base64.b64encode(f"{len(ids):08d}".encode()).decode()
                ids.append(block_id)
                url = self._url(bucket, name, {"comp": "block", "blockid": block_id})
                self._open("PUT", url, chunk, {"Content-Length": str(len(chunk))}).close()
        body = ("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>"
                + "".join(f"<Latest>{i}</Latest>" for i in ids) + "</BlockList>").encode()
        self._open("PUT", self._url(bucket, name, {"comp": "blocklist"}), body,
                   {"Content-Length": str(len(body)), "Content-Type": "application/xml"}
                   ).close()


def _parse_http_date(text: str) -> float:
    """RFC 1123 (`Wed, 25 Nov 2026 14:01:13 GMT`) -> epoch seconds (0.0 if unreadable)."""
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return 0.0


def _error_message(exc: urllib.error.HTTPError) -> str:
    """`Code: Message` from Azure's XML error body, else the header code, else the reason."""
    try:
        raw = exc.read()
    except OSError:
        raw = b""
    try:
        root = ET.fromstring(raw)
        code, msg = root.findtext("Code") or "", (root.findtext("Message") or "").split("\n")[0]
        if code:
            return f"{code}: {msg}".rstrip(": ")
    except ET.ParseError:
        pass
    header = exc.headers.get("x-ms-error-code") if exc.headers else None
    return header or raw.decode(errors="replace").strip()[:300] or str(exc.reason)
