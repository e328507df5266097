"""A Google Cloud Storage JSON API fake: a stdlib HTTP server on 127.0.0.1 (fixture
`gcs`) or on the netns lab's gateway (fixture `gcs_on_lab`, for sshd nodes).

It speaks the wire shapes of the real API for what launcher uses (see
https://cloud.google.com/storage/docs/json_api/v1): buckets get/insert
(`storage/v1/b`), objects list (`storage#objects`, `items`, string `size`, RFC 3339
`updated`, paged by `nextPageToken` — `page_size` items per page, small on purpose),
objects get (`?alt=media` for the bytes) and delete (204), simple uploads (`uploadType=media`) and
resumable uploads (session URI in `Location`, chunked PUTs with `Content-Range`,
`308` + `Range: bytes=0-N` until the last one), and error bodies
`{"error": {"code", "message", "errors": [{"reason", ...}]}}`.

The product reaches it only through the standard `STORAGE_EMULATOR_HOST` variable; a
request without `Authorization: Bearer <token>` (the fixture's token, or one the fake
minted that has not expired) is answered 401. `POST /token` is an OAuth token endpoint
(for ADC files whose `token_uri` points here): every call mints a new token that lives
`token_lifetime` seconds; `minted` keeps them, `auth` which token each request carried.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

TOKEN = "ya29.fake-gcs-token"


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


@dataclass
class GCSFake:
    """The fake's state. `objects[bucket][name] = (bytes, updated)`."""

    token: str = TOKEN
    page_size: int = 2
    buckets: dict[str, str] = field(default_factory=dict)  # name -> project
    objects: dict[str, dict[str, tuple[bytes, float]]] = field(default_factory=dict)
    sessions: dict[str, tuple[str, str, bytearray, int]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    token_lifetime: float = 3600.0
    minted: dict[str, tuple[float, float]] = field(default_factory=dict)  # -> (issued, expires)
    auth: list[tuple[float, str, str, int]] = field(default_factory=list)  # at, token, req, status

    def mint(self) -> tuple[str, float]:
        """A new access token and its lifetime (what `POST /token` answers)."""
        with self.lock:
            token = f"ya29.minted-{len(self.minted) + 1}"
            now = time.time()
            self.minted[token] = (now, now + self.token_lifetime)
            return token, self.token_lifetime

    def accepts(self, token: str) -> bool:
        with self.lock:
            return token == self.token or self.minted.get(token, (0.0, 0.0))[1] > time.time()

    def create_bucket(self, name: str, project: str = "proj") -> None:
        with self.lock:
            self.buckets[name] = project
            self.objects.setdefault(name, {})

    def put(self, bucket: str, name: str, data: bytes) -> None:
        with self.lock:
            self.objects[bucket][name] = (data, time.time())

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        with self.lock:
            return sorted(k for k in self.objects.get(bucket, {}) if k.startswith(prefix))

    def read(self, bucket: str, name: str) -> str:
        with self.lock:
            return self.objects[bucket][name][0].decode()

    def resource(self, bucket: str, name: str) -> dict[str, Any]:
        data, updated = self.objects[bucket][name]
        gen = str(int(updated * 1_000_000))
        return {"kind": "storage#object", "id": f"{bucket}/{name}/{gen}", "name": name,
                "bucket": bucket, "generation": gen, "metageneration": "1",
                "contentType": "application/octet-stream", "storageClass": "STANDARD",
                "size": str(len(data)), "timeCreated": _rfc3339(updated),
                "updated": _rfc3339(updated), "etag": "CAE="}


class _Handler(BaseHTTPRequestHandler):
    fake: GCSFake
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes | dict[str, Any] = b"",
              headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(status)
        if isinstance(body, dict):
            self.send_header("Content-Type", "application/json; charset=UTF-8")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, reason: str, message: str) -> None:
        self._send(status, {"error": {"code": status, "message": message, "errors": [
            {"message": message, "domain": "global", "reason": reason}]}})

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _route(self, method: str) -> None:
        f = self.fake
        body = self._body()
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")]
        f.requests.append(f"{method} {url.path}")
        if method == "POST" and url.path == "/token":
            token, lifetime = f.mint()
            self._send(200, {"access_token": token, "expires_in": int(lifetime),
                             "token_type": "Bearer"})
            return
        header = self.headers.get("Authorization") or ""
        token = header[len("Bearer "):] if header.startswith("Bearer ") else ""
        ok = f.accepts(token)
        with f.lock:
            f.auth.append((time.time(), token, f"{method} {url.path}", 200 if ok else 401))
        if not ok:
            self._error(401, "authError" if token else "required",
                        "Invalid Credentials" if token else
                        "Anonymous caller does not have storage access.")
            return
        with f.lock:
            if parts[1:4] == ["upload", "storage", "v1"]:
                self._upload(method, parts, q, body)
            elif parts[1:3] == ["storage", "v1"] and parts[3] == "b":
                self._api(method, parts[4:], q, body)
            else:
                self._error(404, "notFound", "Not Found")

    def _api(self, method: str, rest: list[str], q: dict[str, str], body: bytes) -> None:
        f = self.fake
        if not rest or rest == [""]:
            if method != "POST":
                self._error(400, "invalid", "bad request")
                return
            name = json.loads(body)["name"]
            if name in f.buckets:
                self._error(409, "conflict", "Your previous request to create the named "
                            "bucket succeeded and you already own it.")
                return
            f.buckets[name] = q.get("project", "")
            f.objects[name] = {}
            self._send(200, {"kind": "storage#bucket", "id": name, "name": name})
            return
        bucket = rest[0]
        if bucket not in f.buckets:
            self._error(404, "notFound", "The specified bucket does not exist.")
            return
        if len(rest) == 1:
            self._send(200, {"kind": "storage#bucket", "id": bucket, "name": bucket})
            return
        if len(rest) == 2 and rest[1] == "o":
            names = sorted(k for k in f.objects[bucket] if k.startswith(q.get("prefix", "")))
            start = int(q.get("pageToken") or 0)
            page = names[start:start + f.page_size]
            doc: dict[str, Any] = {"kind": "storage#objects"}
            if page:
                doc["items"] = [f.resource(bucket, n) for n in page]
            if start + f.page_size < len(names):
                doc["nextPageToken"] = str(start + f.page_size)
            self._send(200, doc)
            return
        name = "/".join(rest[2:])
        if name not in f.objects[bucket]:
            self._error(404, "notFound", f"No such object: {bucket}/{name}")
            return
        if method == "DELETE":
            del f.objects[bucket][name]
            self._send(204)
        elif q.get("alt") == "media":
            self._send(200, f.objects[bucket][name][0],
                       {"Content-Type": "application/octet-stream"})
        else:
            self._send(200, f.resource(bucket, name))

    def _upload(self, method: str, parts: list[str], q: dict[str, str], body: bytes) -> None:
        f = self.fake
        bucket = parts[5] if len(parts) > 5 else ""
        if bucket not in f.buckets:
            self._error(404, "notFound", "The specified bucket does not exist.")
            return
        kind = q.get("uploadType")
        if method == "POST" and kind == "media":
            f.objects[bucket][q["name"]] = (body, time.time())
            self._send(200, f.resource(bucket, q["name"]))
        elif method == "POST" and kind == "resumable":
            sid = f"s{len(f.sessions) + 1}"
            total = int(self.headers.get("X-Upload-Content-Length") or -1)
            f.sessions[sid] = (bucket, q["name"], bytearray(), total)
            where = f"{f.url}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={sid}"
            self._send(200, b"", {"Location": where})
        elif method == "PUT" and kind == "resumable" and q.get("upload_id") in f.sessions:
            b, name, buf, total = f.sessions[q["upload_id"]]
            rng = self.headers.get("Content-Range", "")  # bytes A-B/TOTAL
            first = int(rng.split(" ")[1].split("-")[0])
            if first != len(buf):
                self._error(400, "invalid", "Content-Range does not continue the upload")
                return
            buf += body
            if len(buf) >= total:
                f.objects[b][name] = (bytes(buf), time.time())
                del f.sessions[q["upload_id"]]
                self._send(200, f.resource(b, name))
            else:
                self._send(308, b"", {"Range": f"bytes=0-{len(buf) - 1}"})
        else:
            self._error(400, "invalid", f"unsupported upload {method} {kind}")

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")


def _serve(host: str, monkeypatch: pytest.MonkeyPatch, project: str | None = "proj"
           ) -> tuple[GCSFake, ThreadingHTTPServer]:
    fake = GCSFake()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    fake.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake.url)
    monkeypatch.setenv("LAUNCHER_GCS_TOKEN", fake.token)
    if project is not None:
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", project)
    return fake, server


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[GCSFake]:
    """A fresh fake GCS on 127.0.0.1; `STORAGE_EMULATOR_HOST` points at it and the
    client "mints" its token from `LAUNCHER_GCS_TOKEN` (the fake's token)."""
    fake, server = _serve("127.0.0.1", monkeypatch)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def gcs_on_lab(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[GCSFake]:
    """`gcs`, but on the netns lab's gateway (`lab.gateway`: reachable from the host and
    from inside every node namespace), for cloud nodes that save checkpoints to it.
    Only the documented settings point at it (`STORAGE_EMULATOR_HOST`,
    `LAUNCHER_GCS_TOKEN`); `GOOGLE_CLOUD_PROJECT` is left as the caller's fixtures set
    it (the GCP fixtures clear it: the project comes from config.yaml)."""
    lab = request.getfixturevalue("netns_lab")
    fake, server = _serve(lab.gateway, monkeypatch, project=None)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
