"""What the node-side stdlib bucket clients share (blob_stdlib.py, gcs_stdlib.py): one
HTTP request with retries, and a streamed download that checks its length. STDLIB ONLY;
imports nothing from launcher.

Shipped next to bucket_sync.py and those clients (`~/.launcher-storage/http_stdlib.py`);
must run on the python3 of common images (3.8+ syntax under `from __future__`). A client
imports it as its package sibling, or on a node as the top-level `http_stdlib` that
bucket_sync loaded first (`bucket_sync._stdlib_module`).

- `HTTPStoreError(status, message)`: a failed request (`status` 0: a connection error);
  each client's own error type (BlobError, GCSError) derives from it.
- `open_with_retries(...)`: up to `MAX_ATTEMPTS` tries with exponential backoff and
  jitter on 408/429/5xx and connection errors; a status in `ok` is an answer, even when
  urllib raised it (GCS's 308 for a resumable chunk); one `on_unauthorized()` and a
  retry on the first 401 when given (a bearer token that expired).
- `download_to(open_get, path, error, name)`: stream an answer into `path`; a body
  shorter than its Content-Length is fetched again (3 tries).
"""

from __future__ import annotations

import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import IO, Any

MAX_ATTEMPTS = 6
RETRY_STATUSES = (408, 429, 500, 502, 503, 504)
TIMEOUT_S = 120.0
READ = 1024 * 1024


class HTTPStoreError(Exception):
    """A bucket request failed. `status`: the HTTP status (0: connection error)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


def open_with_retries(method: str, url: str, body: bytes | IO[bytes] | None,
                      headers: Callable[[], dict[str, str]], ok: tuple[int, ...],
                      rewind: int | None, *, error: type[HTTPStoreError],
                      message_of: Callable[[urllib.error.HTTPError], str],
                      on_unauthorized: Callable[[], object] | None = None) -> Any:
    """The open response (the caller closes it) of one request, retried as the module
    docstring says. `headers()` is called per try (a token may change); `rewind`: the
    file offset to seek `body` back to before each try; `message_of` reads the store's
    error body. Raises `error`."""
    delay = 0.5
    refreshed = False
    for attempt in range(1, MAX_ATTEMPTS + 1):
        hdrs = headers()
        if rewind is not None and body is not None and not isinstance(body, bytes):
            body.seek(rewind)
        req = urllib.request.Request(url, data=body, method=method, headers=hdrs)
        try:
            resp = urllib.request.urlopen(req, timeout=TIMEOUT_S)
            if resp.status in ok:
                return resp
            resp.close()
            raise error(resp.status, "unexpected status")
        except urllib.error.HTTPError as exc:
            if exc.code in ok:  # e.g. 308 for a resumable chunk
                return exc
            message = message_of(exc)
            exc.close()
            if exc.code == 401 and on_unauthorized is not None and not refreshed:
                refreshed = True
                on_unauthorized()
                continue
            if exc.code not in RETRY_STATUSES or attempt == MAX_ATTEMPTS:
                raise error(exc.code, message) from None
        except (OSError, ConnectionError) as exc:
            if attempt == MAX_ATTEMPTS:
                raise error(0, f"{type(exc).__name__}: {exc}") from None
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 20.0)
    raise error(0, "retries exhausted")


def download_to(open_get: Callable[[], Any], path: str, error: type[HTTPStoreError],
                name: str) -> None:
    """Stream the answer of `open_get()` into `path` (overwritten); a short body is
    fetched again, and after 3 short bodies raises `error` naming `name`."""
    for attempt in range(1, 4):
        with open_get() as resp:
            want = resp.headers.get("Content-Length")
            got = 0
            with open(path, "wb") as f:
                while True:
                    chunk = resp.read(READ)
                    if not chunk:
                        break
                    f.write(chunk)
                    got += len(chunk)
        if want is None or int(want) == got:
            return
        if attempt == 3:
            raise error(0, f"{name}: short body ({got} of {want} bytes)")
