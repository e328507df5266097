"""A minimal Google Cloud Storage client on the standard library alone. STDLIB ONLY;
imports nothing from launcher.

Shipped next to bucket_sync.py (`~/.launcher-storage/gcs_stdlib.py`) so node-side
`gs://` transfers need neither google-cloud-storage nor gsutil/gcloud on the image.
Must run on the python3 of common images (3.8+ syntax under `from __future__`).

It speaks the GCS JSON API, exactly what bucket_sync needs (the backend interface of
bucket_sync: `list`, `download_file`, `upload_file`, `name`):

- `GCSClient.list(bucket, prefix)`: `GET storage/v1/b/BUCKET/o?prefix=&pageToken=`,
  paged by `nextPageToken`; -> {name: (size, updated as epoch seconds)}.
- `GCSClient.download_file(bucket, name, path)`: `GET .../o/NAME?alt=media` streamed
  into `path` (the caller renames it into place); a short body is an error (retried).
- `GCSClient.upload_file(path, bucket, name)`: one `uploadType=media` POST up to
  `resumable_threshold` bytes (env `LAUNCHER_GCS_RESUMABLE_THRESHOLD`, default 64 MiB),
  else a resumable upload (session URI from `uploadType=resumable`, then PUTs of
  `CHUNK_SIZE` bytes with `Content-Range`, 308 = continue).
- `GCSClient.delete(bucket, name)`: `DELETE .../o/NAME` (404 = already gone).
- Endpoint: `https://storage.googleapis.com`, or the standard `STORAGE_EMULATOR_HOST`
  (what google-cloud-storage honours; `host:port` or a URL) for emulators and tests.
- Bearer token, first found wins: env `LAUNCHER_GCS_TOKEN` (an OAuth2 access token);
  the token file the client shipped (`gcs_token.json` next to this script,
  `{"access_token": ..., "expires_at": epoch, "issued_at": epoch}`, re-read by every
  process: the managed-jobs controller rewrites it before it expires) while it has more
  than a minute (a quarter of a shorter lifetime) left;
  the GCE metadata server (`GCE_METADATA_HOST`, default metadata.google.internal; the
  node's service account), fetched again when it nears its expiry or on a 401.
  With none, requests go unauthenticated (fine against an emulator; GCS answers 401).
- Retries (http_stdlib.py: up to `MAX_ATTEMPTS`, exponential backoff with jitter) on
  408/429/5xx and connection errors; a 401 fetches the token again once.
- Errors: `GCSError` with GCS's `error.message` and the HTTP status, in one line.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import IO, Any

# The shared transport (http_stdlib.py): the package sibling, or on a node the top-level
# module bucket_sync loaded from the file next to this one.
try:
    from . import http_stdlib as http
except ImportError:
    import http_stdlib as http  # type: ignore[no-redef]

MIB = 1024 * 1024
DEFAULT_RESUMABLE_THRESHOLD = 64 * MIB
CHUNK_SIZE = 8 * MIB  # a multiple of 256 KiB, as resumable uploads require
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
TOKEN_VAR = "LAUNCHER_GCS_TOKEN"
TOKEN_FILE = "gcs_token.json"
METADATA_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
METADATA_TIMEOUT_S = 2.0


class GCSError(http.HTTPStoreError):
    """A GCS request failed. `status` is the HTTP status (0: connection error)."""


def endpoint() -> str:
    """The API root: `STORAGE_EMULATOR_HOST` (scheme added when missing) or Google's."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if not host:
        return DEFAULT_ENDPOINT
    return (host if "://" in host else "http://" + host).rstrip("/")


def _parse_time(text: str) -> float:
    """RFC 3339 (`2024-01-02T03:04:05.678Z`) -> epoch seconds."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class Token:
    """The bearer token, in the module docstring's order; `get()` may hit the network."""

    def __init__(self, token_file: str | None = None) -> None:
        self.token_file = token_file or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), TOKEN_FILE)
        self.value: str | None = None
        self.expires_at = 0.0
        self.source = ""

    def get(self, force: bool = False) -> str | None:
        """A token with more than a minute left, or None (unauthenticated)."""
        if not force and self.value and self.expires_at - time.time() > 60:
            return self.value
        env = os.environ.get(TOKEN_VAR, "").strip()
        if env:
            self.value, self.expires_at, self.source = env, time.time() + 3000, "env"
            return env
        try:
            with open(self.token_file) as f:
                doc = json.load(f)
            value, exp = str(doc.get("access_token") or ""), float(doc.get("expires_at") or 0)
            if value and exp - time.time() > _margin(doc, exp) and not (
                    force and self.source == "file"):
                self.value, self.expires_at, self.source = value, exp, "file"
                return value
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        return self._metadata()

    def _metadata(self) -> str | None:
        host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
        req = urllib.request.Request(f"http://{host}{METADATA_TOKEN_PATH}",
                                     headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(req, timeout=METADATA_TIMEOUT_S) as resp:
                doc = json.loads(resp.read().decode())
        except (OSError, ValueError):
            self.value, self.source = None, ""
            return None
        self.value = str(doc.get("access_token") or "") or None
        self.expires_at = time.time() + float(doc.get("expires_in") or 0)
        self.source = "metadata"
        return self.value


def _margin(doc: dict[str, Any], expires_at: float) -> float:
    """How long before its expiry a shipped token stops being used: a minute, or a
    quarter of its lifetime for a shorter-lived one (`issued_at` in the file)."""
    try:
        lifetime = expires_at - float(doc["issued_at"])
    except (KeyError, TypeError, ValueError):
        return 60.0
    return max(0.0, min(60.0, lifetime / 4))


class GCSClient:
    """bucket_sync's backend for gs:// URIs. Not thread-safe (one per process)."""

    name = "stdlib GCS client"

    def __init__(self, base: str | None = None, token: Token | None = None) -> None:
        self.base = base or endpoint()
        self.token = token or Token()
        threshold = os.environ.get("LAUNCHER_GCS_RESUMABLE_THRESHOLD", "")
        self.resumable_threshold = int(threshold) if threshold.isdigit() else \
            DEFAULT_RESUMABLE_THRESHOLD
        self.chunk_size = CHUNK_SIZE

    # ------------------------------------------------------------------ transport

    def _open(self, method: str, url: str, body: bytes | IO[bytes] | None = None,
              headers: dict[str, str] | None = None, ok: tuple[int, ...] = (200,),
              rewind: int | None = None) -> Any:
        """One request with retries; returns the open response (caller closes).
        `rewind`: the file offset to seek `body` back to before a retry. A 401 fetches
        the token again once."""

        def with_token() -> dict[str, str]:
            hdrs = dict(headers or {})
            tok = self.token.get()
            if tok:
                hdrs["Authorization"] = f"Bearer {tok}"
            return hdrs

        return http.open_with_retries(
            method, url, body, with_token, ok, rewind, error=GCSError,
            message_of=_error_message, on_unauthorized=lambda: self.token.get(force=True))

    def _object_url(self, bucket: str, name: str) -> str:
        return (f"{self.base}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/"
                f"{urllib.parse.quote(name, safe='')}")

    # ------------------------------------------------------------------ operations

    def list(self, bucket: str, prefix: str) -> dict[str, tuple[int, float]]:
        """Every object under `prefix`: name -> (size, updated epoch seconds)."""
        out: dict[str, tuple[int, float]] = {}
        page = ""
        while True:
            query = {"prefix": prefix, "fields": "items(name,size,updated),nextPageToken"}
            if page:
                query["pageToken"] = page
            url = (f"{self.base}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?"
                   + urllib.parse.urlencode(query))
            with self._open("GET", url) as resp:
                doc = json.loads(resp.read().decode())
            for item in doc.get("items") or []:
                out[str(item["name"])] = (int(item.get("size") or 0),
                                          _parse_time(str(item.get("updated") or "")))
            page = str(doc.get("nextPageToken") or "")
            if not page:
                return out

    def download_file(self, bucket: str, name: str, path: str) -> None:
        """Stream object `name` into `path` (overwritten). Raises GCSError."""
        http.download_to(
            lambda: self._open("GET", self._object_url(bucket, name) + "?alt=media"), path,
            GCSError, name)

    def upload_file(self, path: str, bucket: str, name: str) -> None:
        """Upload `path` as object `name` (replacing it). Raises GCSError, OSError."""
        size = os.path.getsize(path)
        if size > self.resumable_threshold:
            self._resumable(path, bucket, name, size)
            return
        url = (f"{self.base}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?"
               + urllib.parse.urlencode({"uploadType": "media", "name": name}))
        with open(path, "rb") as f:
            hdrs = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
            self._open("POST", url, f, hdrs, rewind=0).close()

    def delete(self, bucket: str, name: str) -> None:
        """Delete object `name`; one already gone is fine. Raises GCSError."""
        try:
            self._open("DELETE", self._object_url(bucket, name), ok=(200, 204)).close()
        except GCSError as exc:
            if exc.status != 404:
                raise

    def _resumable(self, path: str, bucket: str, name: str, size: int) -> None:
        url = (f"{self.base}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?"
               + urllib.parse.urlencode({"uploadType": "resumable", "name": name}))
        hdrs = {"Content-Type": "application/json; charset=UTF-8",
                "X-Upload-Content-Length": str(size)}
        with self._open("POST", url, json.dumps({"name": name}).encode(), hdrs) as resp:
            session = resp.headers.get("Location")
        if not session:
            raise GCSError(0, f"{name}: no resumable session URI in the answer")
        with open(path, "rb") as f:
            offset = 0
            while offset < size:
                chunk = f.read(self.chunk_size)
                end = offset + len(chunk) - 1
                hdrs = {"Content-Length": str(len(chunk)),
                        "Content-Range": f"bytes {offset}-{end}/{size}"}
                with self._open("PUT", session, chunk, hdrs, ok=(200, 201, 308)) as resp:
                    status = resp.status if hasattr(resp, "status") else resp.code
                    rng = resp.headers.get("Range")
                if status in (200, 201):
                    return
                done = int(rng.rsplit("-", 1)[1]) + 1 if rng else 0  # what GCS persisted
                if done != end + 1:
                    f.seek(done)
                offset = done


def _error_message(exc: urllib.error.HTTPError) -> str:
    """GCS's `{"error": {"message": ...}}`, else the body's start, else the reason."""
    try:
        raw = exc.read().decode(errors="replace")
    except OSError:
        raw = ""
    try:
        doc = json.loads(raw)
        msg = doc.get("error", {}).get("message")
        if msg:
            return str(msg)
    except (ValueError, AttributeError):
        pass
    return raw.strip()[:300] or str(exc.reason)
