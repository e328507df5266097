"""GCS from the client's side: buckets for storage mounts and checkpoints, local
uploads, and the short-lived access token handed to nodes. requests and google-auth are
imported here, lazily (only when a task uses gs://); bulk downloads happen on the nodes
(launcher/runtime/bucket_sync.py + gcs_stdlib.py).

- Endpoint: `https://storage.googleapis.com`, or the standard `STORAGE_EMULATOR_HOST`
  (what google-cloud-storage honours) — forwarded to the nodes by `endpoint_settings()`.
- Token (`access_token()`): env `LAUNCHER_GCS_TOKEN` when set (e.g. the output of
  `gcloud auth print-access-token`), else Application Default Credentials
  (`google.auth.default()` + `refresh()`, cloud-platform scope), reused in the process
  while more than half its lifetime is left. An OAuth2 access token lives about one
  hour; the nodes get a fresh one on every launch and recovery, and the managed-jobs
  controller renews it on a running job's nodes at half its lifetime.
- Project of a new bucket: `gcp.project` / `GOOGLE_CLOUD_PROJECT` / ADC, as for compute
  (launcher.clouds.gcp.session.local_credentials).
Every function raises `BucketError` (a LauncherError, one readable line) for an
expected failure.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from typing import Any

from launcher.errors import LauncherError

TOKEN_VAR = "LAUNCHER_GCS_TOKEN"
ENDPOINT_VAR = "STORAGE_EMULATOR_HOST"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
TIMEOUT_S = 60.0


class BucketError(LauncherError):
    """A GCS bucket could not be created, read or written from this machine."""

    exit_code = 2


def endpoint() -> str:
    """The JSON API root (`STORAGE_EMULATOR_HOST` with a scheme, or Google's)."""
    host = os.environ.get(ENDPOINT_VAR, "").strip()
    if not host:
        return "https://storage.googleapis.com"
    return (host if "://" in host else "http://" + host).rstrip("/")


def endpoint_settings() -> dict[str, str]:
    """The standard endpoint variable this client has set (forwarded to the nodes)."""
    host = os.environ.get(ENDPOINT_VAR, "").strip()
    return {ENDPOINT_VAR: host} if host else {}


def has_local_credentials() -> bool:
    """Whether a token can probably be minted here. No network, no Google import."""
    if os.environ.get(TOKEN_VAR):
        return True
    from launcher.clouds.gcp.session import local_credentials

    try:
        return local_credentials().source is not None
    except Exception:  # an unreadable ADC file: the launch reports it
        return False


def access_token() -> tuple[str, float]:
    """(access token, expiry epoch seconds) for the nodes. Raises BucketError."""
    token, expires_at, _ = minted_token()
    return token, expires_at


# The tokens minted from ADC in this process, per credentials source: (token, expires_at,
# issued_at). Reused while more than half its lifetime is left, so one launch mints once,
# and whoever renews the nodes' copy (launcher/jobs/node_credentials.py) knows what they
# hold.
_minted: dict[tuple[str, str], tuple[str, float, float]] = {}


def minted_token() -> tuple[str, float, float]:
    """(access token, expires_at, issued_at), epoch seconds: `LAUNCHER_GCS_TOKEN` when
    set (assumed to live 55 minutes from now), else the cached ADC token while more than
    half its lifetime is left, else a fresh one. Raises BucketError."""
    now = time.time()
    env = os.environ.get(TOKEN_VAR, "").strip()
    if env:
        return env, now + 3300.0, now
    source = (os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", ""),
              os.environ.get("CLOUDSDK_CONFIG", ""))
    if source in _minted:
        token, exp, issued = _minted[source]
        if exp - now > (exp - issued) / 2:
            return token, exp, issued
    try:
        import google.auth
        import google.auth.transport.requests
        from google.auth.exceptions import GoogleAuthError
    except ImportError:
        raise BucketError("gs:// needs google-auth on this machine "
                          "(pip install 'launcher[gcp]')") from None
    try:
        creds, _ = google.auth.default(scopes=list(SCOPES))
        creds.refresh(google.auth.transport.requests.Request())
    except GoogleAuthError as exc:
        raise BucketError(f"no Google credentials for GCS: {exc} (run `gcloud auth "
                          "application-default login`)") from None
    expiry = getattr(creds, "expiry", None)
    exp = expiry.timestamp() if expiry is not None else now + 3300.0
    if expiry is not None and expiry.tzinfo is None:  # google-auth: naive UTC
        import calendar

        exp = float(calendar.timegm(expiry.timetuple()))
    _minted[source] = (str(creds.token), exp, now)
    return str(creds.token), exp, now


def _session() -> Any:
    import requests

    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {access_token()[0]}"
    return s


def _message(resp: Any) -> str:
    try:
        return str(resp.json()["error"]["message"])
    except Exception:
        return (resp.text or resp.reason or "").strip()[:300]


def _project() -> str | None:
    project = os.environ.get("GOOGLE_CLOUD_PROJECT")
    if project:
        return project
    try:
        from launcher.clouds.gcp.session import local_credentials

        return local_credentials().project
    except Exception:
        return None


def ensure_bucket(name: str, location: str | None = None) -> bool:
    """Create bucket `name` unless it exists and is ours to use. True if created.
    Raises BucketError when the name is taken by another project (403) or GCS cannot
    be reached."""
    import requests

    s, base = _session(), endpoint()
    try:
        r = s.get(f"{base}/storage/v1/b/{urllib.parse.quote(name, safe='')}", timeout=TIMEOUT_S)
        if r.status_code == 200:
            return False
        if r.status_code == 403:
            raise BucketError(f"bucket {name!r} exists but this Google identity may not use "
                              "it (bucket names are global: pick another name).")
        if r.status_code != 404:
            raise BucketError(f"bucket {name!r}: HTTP {r.status_code}: {_message(r)}")
        project = _project()
        if not project:
            raise BucketError(f"cannot create bucket {name!r}: no GCP project (set "
                              "GOOGLE_CLOUD_PROJECT or gcp.project)")
        body: dict[str, Any] = {"name": name}
        if location:
            body["location"] = location
        r = s.post(f"{base}/storage/v1/b", params={"project": project}, json=body,
                   timeout=TIMEOUT_S)
        if r.status_code == 409:
            return False  # created meanwhile (by us: a 403 above otherwise)
        if r.status_code != 200:
            raise BucketError(f"cannot create bucket {name!r}: HTTP {r.status_code}: "
                              f"{_message(r)}")
        return True
    except requests.RequestException as exc:
        raise BucketError(f"cannot reach GCS for bucket {name!r}: {exc}") from None


def check_access(name: str) -> None:
    """Prove that a token can be minted here and that it may use bucket `name` (one
    `buckets.get`); a bucket that does not exist yet passes (it is created at launch).
    Raises BucketError."""
    import requests

    s = _session()
    try:
        r = s.get(f"{endpoint()}/storage/v1/b/{urllib.parse.quote(name, safe='')}",
                  timeout=TIMEOUT_S)
    except requests.RequestException as exc:
        raise BucketError(f"cannot reach GCS for bucket {name!r}: {exc}") from None
    if r.status_code not in (200, 404):
        raise BucketError(f"bucket {name!r}: HTTP {r.status_code}: {_message(r)}")


def upload_dir(local_dir: str, bucket: str, prefix: str = "") -> tuple[int, int]:
    """Upload every file under `local_dir` to `gs://bucket/prefix/...` whose object is
    missing or whose size differs. Returns (files uploaded, bytes). Never deletes.
    Raises BucketError."""
    import requests

    base = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    s, root_url = _session(), endpoint()
    qb = urllib.parse.quote(bucket, safe="")
    try:
        remote: dict[str, int] = {}
        page = ""
        while True:
            params = {"prefix": base, **({"pageToken": page} if page else {})}
            r = s.get(f"{root_url}/storage/v1/b/{qb}/o", params=params, timeout=TIMEOUT_S)
            if r.status_code != 200:
                raise BucketError(f"listing gs://{bucket}/{base}: HTTP {r.status_code}: "
                                  f"{_message(r)}")
            doc = r.json()
            for item in doc.get("items") or []:
                remote[str(item["name"])] = int(item.get("size") or 0)
            page = str(doc.get("nextPageToken") or "")
            if not page:
                break
        count = total = 0
        for root, dirs, files in os.walk(local_dir):
            dirs.sort()
            for fname in sorted(files):
                path = os.path.join(root, fname)
                key = base + os.path.relpath(path, local_dir).replace(os.sep, "/")
                size = os.path.getsize(path)
                if remote.get(key) == size:
                    continue
                with open(path, "rb") as f:
                    r = s.post(f"{root_url}/upload/storage/v1/b/{qb}/o",
                               params={"uploadType": "media", "name": key}, data=f,
                               headers={"Content-Type": "application/octet-stream"},
                               timeout=TIMEOUT_S)
                if r.status_code != 200:
                    raise BucketError(f"uploading {path} to gs://{bucket}/{key}: "
                                      f"HTTP {r.status_code}: {_message(r)}")
                count += 1
                total += size
        return count, total
    except (requests.RequestException, OSError) as exc:
        raise BucketError(f"uploading {local_dir} to gs://{bucket}/{base}: "
                          f"{type(exc).__name__}: {exc}") from None
