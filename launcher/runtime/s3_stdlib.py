"""A minimal S3 client on the standard library alone. STDLIB ONLY; imports nothing from launcher.

Shipped next to bucket_sync.py (`~/.launcher-storage/s3_stdlib.py`) so node-side S3
transfers work on an image with neither boto3 nor the `aws` CLI (Canonical Ubuntu).
Must run on the python3 of common images (3.8+ syntax under `from __future__`).

It implements exactly what bucket_sync needs, with boto3's semantics:

- `S3Client.list(bucket, prefix)`: ListObjectsV2, paged (ContinuationToken), keys
  url-encoded on the wire (`encoding-type=url`) and decoded here.
- `S3Client.download_file(bucket, key, path)`: GetObject streamed into `path`
  (the caller renames it into place); a short body is retried.
- `S3Client.upload_file(path, bucket, key)`: one PutObject up to `multipart_threshold`
  bytes (env `LAUNCHER_S3_MULTIPART_THRESHOLD`, default 64 MiB), else a multipart upload
  (CreateMultipartUpload / UploadPart / CompleteMultipartUpload, aborted on failure).
- `S3Client.delete(bucket, key)`: DeleteObject (old checkpoint saves' objects).
- Signature Version 4 header auth: `x-amz-content-sha256` is the real payload hash,
  except for file bodies over https (`UNSIGNED-PAYLOAD`, where TLS protects them);
  `x-amz-security-token` with temporary credentials.
- Addressing: virtual-hosted (`bucket.s3.REGION.amazonaws.com`) on AWS; path-style
  (`ENDPOINT/bucket/key`) when `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` is set, or for
  bucket names with dots.
- Region: `AWS_REGION` / `AWS_DEFAULT_REGION` (else us-east-1); a response naming
  another region in `x-amz-bucket-region` (301/400/403) makes the client re-sign for
  that region and retry once; the region is then remembered per bucket.
- Retries (up to `MAX_ATTEMPTS`, exponential backoff with jitter) on 500/502/503/504,
  SlowDown/RequestTimeout/InternalError and connection errors.
- Credentials in boto3's order: env (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
  `AWS_SESSION_TOKEN`); the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`,
  default `~/.aws/credentials`, profile `AWS_PROFILE` or `default`); the instance role
  through IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, default http://169.254.169.254;
  `AWS_EC2_METADATA_DISABLED=true` skips it), refreshed before it expires.
- Errors: `S3Error` with the XML `<Code>` and `<Message>` in one line.
"""

from __future__ import annotations

import configparser
import contextlib
import datetime
import hashlib
import hmac
import http.client
import json
import os
import random
import ssl
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import IO

MIB = 1024 * 1024
DEFAULT_MULTIPART_THRESHOLD = 64 * MIB
MIN_PART_SIZE = 5 * MIB  # S3's minimum for every part but the last
MAX_PARTS = 10000
MAX_ATTEMPTS = 6
RETRY_STATUSES = (500, 502, 503, 504)
RETRY_CODES = ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable")
UNSIGNED = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
IMDS_DEFAULT = "http://169.254.169.254"
IMDS_TIMEOUT_S = 1.0
CHUNK = 1024 * 1024
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(Exception):
    """An S3 request failed. `code` is S3's error code (or the HTTP status as text),
    `status` the HTTP status (0 for a connection error); str() is one line."""

    def __init__(self, code: str, message: str, status: int = 0) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.status = status


class Credentials:
    """Access key, secret, optional session token, optional expiry (epoch seconds)."""

    def __init__(self, access_key: str, secret_key: str, token: str | None = None,
                 expires: float | None = None, source: str = "") -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.token = token or None
        self.expires = expires
        self.source = source

    def expiring(self, margin: float = 300.0) -> bool:
        return self.expires is not None and self.expires - time.time() < margin


# --------------------------------------------------------------------------- credentials


def env_credentials() -> Credentials | None:
    """From AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN), or None."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return Credentials(key, secret, os.environ.get("AWS_SESSION_TOKEN")
                           or os.environ.get("AWS_SECURITY_TOKEN"), source="env")
    return None


def file_credentials(path: str | None = None,
                     profile: str | None = None) -> Credentials | None:
    """The profile's keys in the shared credentials file, or None when absent."""
    path = path or os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials"
    profile = profile or os.environ.get("AWS_PROFILE") or os.environ.get(
        "AWS_DEFAULT_PROFILE") or "default"
    parser = configparser.RawConfigParser()
    try:
        with open(os.path.expanduser(path)) as f:
            parser.read_file(f)
    except (OSError, configparser.Error):
        return None
    if not parser.has_section(profile):
        return None
    sec = parser[profile]
    key, secret = sec.get("aws_access_key_id"), sec.get("aws_secret_access_key")
    if not key or not secret:
        return None
    return Credentials(key.strip(), secret.strip(),
                       (sec.get("aws_session_token") or sec.get("aws_security_token") or "")
                       .strip() or None, source=f"shared credentials file [{profile}]")


def _parse_time(text: str) -> float:
    """ISO 8601 UTC (`2026-01-02T03:04:05Z`, optional fraction) -> epoch seconds."""
    text = text.strip().rstrip("Z").split("+")[0]
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    dt = datetime.datetime.strptime(text, fmt).replace(tzinfo=datetime.UTC)
    return dt.timestamp()


def imds_credentials(endpoint: str | None = None,
                     timeout: float = IMDS_TIMEOUT_S) -> Credentials | None:
    """The instance role's temporary keys through IMDSv2, or None when there is no
    metadata service or no role (short timeouts: a non-EC2 host answers nothing)."""
    if os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return None
    base = (endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            or IMDS_DEFAULT).rstrip("/")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(method: str, path: str, headers: dict[str, str]) -> str:
        req = urllib.request.Request(base + path, method=method, headers=headers)
        with opener.open(req, timeout=timeout) as resp:
            return resp.read().decode()

    try:
        token = call("PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        auth = {"X-aws-ec2-metadata-token": token}
        roles = call("GET", "/latest/meta-data/iam/security-credentials/", auth).split()
        if not roles:
            return None
        role = roles[0].strip()
        doc = json.loads(call("GET", "/latest/meta-data/iam/security-credentials/"
                              + urllib.parse.quote(role), auth))
    except (OSError, ValueError, http.client.HTTPException):
        return None
    if not isinstance(doc, dict) or not doc.get("AccessKeyId") or not doc.get("SecretAccessKey"):
        return None
    expires = None
    if doc.get("Expiration"):
        try:
            expires = _parse_time(str(doc["Expiration"]))
        except ValueError:
            expires = None
    return Credentials(str(doc["AccessKeyId"]), str(doc["SecretAccessKey"]),
                       doc.get("Token") or None, expires, source=f"instance role {role}")


def resolve_credentials() -> Credentials:
    """env, then the shared credentials file, then the instance role. Raises S3Error."""
    creds = env_credentials() or file_credentials() or imds_credentials()
    if creds is None:
        raise S3Error("NoCredentials", "no AWS credentials on this node (env, "
                      "~/.aws/credentials or an instance role)")
    return creds


# --------------------------------------------------------------------------- SigV4


def uri_encode(text: str, keep_slash: bool) -> str:
    """SigV4's UriEncode: every byte but A-Z a-z 0-9 - _ . ~ (and '/' in a path) as %XX."""
    return urllib.parse.quote(text, safe="/-_.~" if keep_slash else "-_.~")


def canonical_query(params: dict[str, str]) -> str:
    """Names and values URI-encoded ('/' too), sorted by name then value; `name=` when empty."""
    pairs = sorted((uri_encode(k, False), uri_encode(v, False)) for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sign(method: str, path: str, params: dict[str, str], headers: dict[str, str],
         payload_hash: str, creds: Credentials, region: str, amz_date: str,
         service: str = "s3") -> dict[str, str]:
    """The request headers with SigV4 header auth added (a new dict).

    `path` is the already-encoded request path (S3 keys: `uri_encode(key, True)`, not
    normalized, not encoded twice); `headers` must hold `host`. Signed: host, every
    `x-amz-*`, content-type and content-md5. `amz_date` is `YYYYMMDDTHHMMSSZ` (UTC)."""
    out = {k.lower(): " ".join(str(v).strip().split()) for k, v in headers.items()}
    out["x-amz-date"] = amz_date
    out["x-amz-content-sha256"] = payload_hash
    if creds.token:
        out["x-amz-security-token"] = creds.token
    signed = sorted(k for k in out
                    if k == "host" or k.startswith("x-amz-") or k in ("content-type",
                                                                      "content-md5"))
    canonical = "\n".join([
        method, path or "/", canonical_query(params),
        "".join(f"{k}:{out[k]}\n" for k in signed), ";".join(signed), payload_hash,
    ])
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    signature = hmac.new(_signing_key(creds.secret_key, amz_date[:8], region, service),
                         to_sign.encode(), hashlib.sha256).hexdigest()
    out["authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
                            f"SignedHeaders={';'.join(signed)}, Signature={signature}")
    return out


# --------------------------------------------------------------------------- client


def _error_from(status: int, body: bytes, reason: str = "") -> S3Error:
    code, message = "", ""
    if body:
        try:
            root = ET.fromstring(body)
            code = (root.findtext("Code") or root.findtext(_NS + "Code") or "").strip()
            message = (root.findtext("Message") or root.findtext(_NS + "Message") or "").strip()
        except ET.ParseError:
            message = body[:200].decode("utf-8", "replace").strip()
    if not code:
        code = {404: "NotFound", 403: "AccessDenied", 301: "PermanentRedirect"}.get(
            status, f"HTTP{status}")
    return S3Error(code, " ".join(f"{message} (HTTP {status}{' ' + reason if reason else ''})"
                                  .split()), status)


def _multipart_threshold() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHER_S3_MULTIPART_THRESHOLD", "")))
    except ValueError:
        return DEFAULT_MULTIPART_THRESHOLD


class S3Client:
    """The S3 operations bucket_sync needs. Not thread-safe (one connection, reused).

    `endpoint`: an S3-compatible endpoint URL (path-style); default from the standard
    variables, else AWS. `credentials`: default resolved as boto3 does. `page_size`:
    ListObjectsV2 `max-keys` (S3 caps it at 1000)."""

    name = "stdlib S3 client"

    def __init__(self, endpoint: str | None = None, region: str | None = None,
                 credentials: Credentials | None = None, page_size: int = 1000,
                 multipart_threshold: int | None = None, timeout: float = 60.0) -> None:
        self.endpoint = (endpoint if endpoint is not None else
                         os.environ.get("AWS_ENDPOINT_URL_S3")
                         or os.environ.get("AWS_ENDPOINT_URL") or "").rstrip("/")
        self.region = (region or os.environ.get("AWS_REGION")
                       or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
        self._creds = credentials
        self.page_size = page_size
        self.multipart_threshold = multipart_threshold or _multipart_threshold()
        self.timeout = timeout
        self._bucket_region: dict[str, str] = {}
        self._conn: http.client.HTTPConnection | None = None
        self._conn_key: tuple[str, str, int] = ("", "", 0)

    # ----------------------------------------------------------------- plumbing

    def credentials(self) -> Credentials:
        if self._creds is None or self._creds.expiring():
            self._creds = resolve_credentials()
        return self._creds

    def _where(self, bucket: str, key: str, region: str) -> tuple[str, str, int, str]:
        """(scheme, host, port, encoded path) of an object (or the bucket when key=="")."""
        if self.endpoint:
            u = urllib.parse.urlsplit(self.endpoint)
            scheme = u.scheme or "https"
            port = u.port or (443 if scheme == "https" else 80)
            base = u.path.rstrip("/")
            return scheme, u.hostname or "", port, uri_encode(f"{base}/{bucket}/{key}", True)
        if "." in bucket:  # a dotted name breaks the wildcard certificate
            return "https", f"s3.{region}.amazonaws.com", 443, uri_encode(f"/{bucket}/{key}",
                                                                        True)
        return "https", f"{bucket}.s3.{region}.amazonaws.com", 443, uri_encode(f"/{key}", True)

    def _connection(self, scheme: str, host: str, port: int) -> http.client.HTTPConnection:
        if self._conn is not None and self._conn_key == (scheme, host, port):
            return self._conn
        self.close()
        if scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=self.timeout, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        self._conn, self._conn_key = conn, (scheme, host, port)
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _request(self, method: str, bucket: str, key: str = "",
                 params: dict[str, str] | None = None, body: bytes = b"",
                 file: tuple[IO[bytes], int, int] | None = None,
                 sink: IO[bytes] | None = None,
                 extra: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One S3 call with retries. `file` = (fileobj, offset, length) streams a body
        from a file; `sink` receives a 2xx body (then b"" is returned). Returns
        (status, lower-cased headers, body) of a 2xx; raises S3Error otherwise."""
        params = params or {}
        attempt, redirected = 0, False
        while True:
            attempt += 1
            region = self._bucket_region.get(bucket, self.region)
            scheme, host, port, path = self._where(bucket, key, region)
            if file is not None:
                payload_hash = UNSIGNED if scheme == "https" else _file_sha256(*file)
                length = file[2]
            else:
                payload_hash = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
                length = len(body)
            host_header = host if port in (80, 443) else f"{host}:{port}"
            headers = {"host": host_header, **(extra or {})}
            amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            signed = sign(method, path, params, headers, payload_hash, self.credentials(),
                          region, amz_date)
            if method in ("PUT", "POST"):
                signed["content-length"] = str(length)
            url = path + ("?" + canonical_query(params) if params else "")
            try:
                conn = self._connection(scheme, host, port)
                conn.putrequest(method, url, skip_host=True, skip_accept_encoding=True)
                for k, v in signed.items():
                    conn.putheader(k, v)
                conn.endheaders()
                if file is not None:
                    _send_file(conn, *file)
                elif body:
                    conn.send(body)
                resp = conn.getresponse()
                status = resp.status
                rheaders = {k.lower(): v for k, v in resp.getheaders()}
                if 200 <= status < 300 and sink is not None:
                    got = _copy(resp, sink)
                    want = rheaders.get("content-length")
                    if want is not None and int(want) != got:
                        raise http.client.IncompleteRead(b"", int(want) - got)
                    data = b""
                else:
                    data = resp.read() if method != "HEAD" else b""
                    resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if attempt >= MAX_ATTEMPTS:
                    raise S3Error("ConnectionError", f"{type(exc).__name__}: {exc} "
                                  f"({scheme}://{host}:{port})") from None
                self._backoff(attempt, sink)
                continue
            if 200 <= status < 300:
                return status, rheaders, data
            err = _error_from(status, data, resp.reason)
            other = rheaders.get("x-amz-bucket-region")
            if other and other != region and not redirected and status in (301, 307, 400, 403):
                self._bucket_region[bucket] = other  # the bucket lives elsewhere: re-sign
                redirected = True
                attempt -= 1
                continue
            if (status in RETRY_STATUSES or err.code in RETRY_CODES) and attempt < MAX_ATTEMPTS:
                self._backoff(attempt, sink)
                continue
            if status >= 500 or rheaders.get("connection", "").lower() == "close":
                self.close()
            raise err

    def _backoff(self, attempt: int, sink: IO[bytes] | None) -> None:
        if sink is not None:
            sink.seek(0)
            sink.truncate()
        time.sleep(min(20.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))

    # ----------------------------------------------------------------- operations

    def head_bucket(self, bucket: str) -> str:
        """The bucket's region (learned from `x-amz-bucket-region`). Raises S3Error."""
        _, headers, _ = self._request("HEAD", bucket)
        region = headers.get("x-amz-bucket-region") or self._bucket_region.get(bucket,
                                                                               self.region)
        self._bucket_region[bucket] = region
        return region

    def iter_objects(self, bucket: str, prefix: str) -> Iterator[tuple[str, int, float]]:
        """(key, size, last-modified epoch) of every object under `prefix`, paged."""
        token: str | None = None
        while True:
            params = {"list-type": "2", "prefix": prefix, "encoding-type": "url",
                      "max-keys": str(self.page_size)}
            if token:
                params["continuation-token"] = token
            _, _, data = self._request("GET", bucket, params=params)
            root = ET.fromstring(data)
            encoded = (root.findtext(_NS + "EncodingType") or "").lower() == "url"
            for c in root.iter(_NS + "Contents"):
                key = c.findtext(_NS + "Key") or ""
                if encoded:
                    key = urllib.parse.unquote_plus(key)
                yield (key, int(c.findtext(_NS + "Size") or 0),
                       _parse_time(c.findtext(_NS + "LastModified") or "1970-01-01T00:00:00Z"))
            token = root.findtext(_NS + "NextContinuationToken")
            if (root.findtext(_NS + "IsTruncated") or "").lower() != "true" or not token:
                return

    def list(self, bucket: str, prefix: str) -> dict[str, tuple[int, float]]:
        """key -> (size, last-modified epoch) of every object under `prefix`."""
        return {k: (size, mtime) for k, size, mtime in self.iter_objects(bucket, prefix)}

    def download_file(self, bucket: str, key: str, path: str) -> None:
        """GetObject into `path` (created or truncated). Raises S3Error / OSError."""
        with open(path, "wb") as sink:
            self._request("GET", bucket, key, sink=sink)

    def upload_file(self, path: str, bucket: str, key: str) -> None:
        """PutObject, or a multipart upload above the threshold. Raises S3Error /
        OSError (FileNotFoundError when `path` vanished)."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= self.multipart_threshold:
                self._request("PUT", bucket, key, file=(f, 0, size))
                return
            self._multipart(f, size, bucket, key)

    def delete(self, bucket: str, key: str) -> None:
        """DeleteObject (S3 answers 204 for a missing key too). Raises S3Error."""
        self._request("DELETE", bucket, key)

    def _multipart(self, f: IO[bytes], size: int, bucket: str, key: str) -> None:
        part = max(self.multipart_threshold, MIN_PART_SIZE, -(-size // MAX_PARTS))
        _, _, data = self._request("POST", bucket, key, params={"uploads": ""})
        upload_id = ET.fromstring(data).findtext(_NS + "UploadId") or ""
        if not upload_id:
            raise S3Error("InvalidResponse", "CreateMultipartUpload returned no UploadId")
        try:
            etags: list[str] = []
            for number, offset in enumerate(range(0, size, part), start=1):
                _, headers, _ = self._request(
                    "PUT", bucket, key, params={"partNumber": str(number), "uploadId": upload_id},
                    file=(f, offset, min(part, size - offset)))
                etags.append(headers.get("etag", ""))
            doc = "<CompleteMultipartUpload>" + "".join(
                f"<Part><PartNumber>{n}</PartNumber><ETag>{_xml_escape(e)}</ETag></Part>"
                for n, e in enumerate(etags, start=1)) + "</CompleteMultipartUpload>"
            _, _, data = self._request("POST", bucket, key, params={"uploadId": upload_id},
                                       body=doc.encode(),
                                       extra={"content-type": "application/xml"})
            if data and b"<Error>" in data:  # S3 may report a failure inside a 200
                raise _error_from(200, data)
        except BaseException:
            with contextlib.suppress(S3Error):
                self._request("DELETE", bucket, key, params={"uploadId": upload_id})
            raise


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace(
        '"', "&quot;")


def _file_sha256(f: IO[bytes], offset: int, length: int) -> str:
    h = hashlib.sha256()
    f.seek(offset)
    left = length
    while left > 0:
        chunk = f.read(min(CHUNK, left))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


def _send_file(conn: http.client.HTTPConnection, f: IO[bytes], offset: int, length: int) -> None:
    f.seek(offset)
    left = length
    while left > 0:
        chunk = f.read(min(CHUNK, left))
        if not chunk:
            raise OSError(f"{getattr(f, 'name', 'file')} shrank while it was uploaded")
        conn.send(chunk)
        left -= len(chunk)


def _copy(resp: http.client.HTTPResponse, sink: IO[bytes]) -> int:
    got = 0
    while True:
        chunk = resp.read(CHUNK)
        if not chunk:
            return got
        sink.write(chunk)
        got += len(chunk)
