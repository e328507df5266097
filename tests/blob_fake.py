"""An Azure Blob Storage fake: a stdlib HTTP server on 127.0.0.1 (fixture `blob`) or on
the netns lab's gateway (fixture `blob_on_lab`, for sshd nodes), path-style as Azurite
(`http://HOST:PORT/ACCOUNT/CONTAINER/BLOB`).

It speaks the REST API's wire shapes for what launcher uses
(https://learn.microsoft.com/rest/api/storageservices/blob-service-rest-api): Create
Container (`PUT ?restype=container`, 201 / 409 `ContainerAlreadyExists`), List Blobs
(`GET ?restype=container&comp=list&prefix=&marker=`, the `EnumerationResults` XML with
`Blob/Name` and `Properties/Last-Modified` (RFC 1123) and `Content-Length`, paged by
`NextMarker`, `page_size` per page), Get Blob, Put Blob (`x-ms-blob-type: BlockBlob`),
Put Block / Put Block List, Delete Blob (202; SAS permission `d`), and
`<Error><Code/><Message/></Error>` bodies with the `x-ms-error-code` header. Every
request must carry `x-ms-version` and a SAS whose signature verifies against the account
key (service SAS `sr=c` with the permission the operation needs, or an account SAS),
else 403 `AuthenticationFailed` / `AuthorizationPermissionMismatch`, as Azure answers.
"""

from __future__ import annotations

import base64
import calendar
import email.utils
import hashlib
import hmac
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape

import pytest

ACCOUNT = "devacct"
KEY = base64.b64encode(b"fake-azure-storage-account-key!!").decode()
BEARER = "entra-token-for-storage"  # what the fixture's fake credential hands out
DELEGATION_KEY = base64.b64encode(b"user-delegation-key-of-the-fake!").decode()
OID, TID = "11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"


@dataclass
class BlobFake:
    """`blobs[container][name] = (bytes, last_modified)`; `blocks`: uncommitted."""

    account: str = ACCOUNT
    key: str = KEY
    page_size: int = 2
    blobs: dict[str, dict[str, tuple[bytes, float]]] = field(default_factory=dict)
    blocks: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    @property
    def endpoint(self) -> str:
        return f"{self.url}/{self.account}"

    def create(self, container: str) -> None:
        with self.lock:
            self.blobs.setdefault(container, {})

    def put(self, container: str, name: str, data: bytes) -> None:
        with self.lock:
            self.blobs[container][name] = (data, time.time())

    def keys(self, container: str, prefix: str = "") -> list[str]:
        with self.lock:
            return sorted(k for k in self.blobs.get(container, {}) if k.startswith(prefix))

    def read(self, container: str, name: str) -> str:
        with self.lock:
            return self.blobs[container][name][0].decode()

    def sign(self, text: str, key: str | None = None) -> str:
        return base64.b64encode(hmac.new(base64.b64decode(key or self.key), text.encode(),
                                         hashlib.sha256).digest()).decode()

    def sas_error(self, q: dict[str, str], container: str, need: str) -> str | None:
        """None when the SAS in `q` allows `need` on `container`, else the error code."""
        g = q.get
        if not g("sig") or not g("sv"):
            return "NoAuthenticationInformation"
        key = self.key
        if g("sr") == "c" and g("skoid"):  # a user delegation SAS
            if (g("skoid"), g("sktid"), g("sks")) != (OID, TID, "b"):
                return "AuthenticationFailed"
            key = DELEGATION_KEY
            text = "\n".join([g("sp", ""), g("st", ""), g("se", ""),
                              f"/blob/{self.account}/{container}", g("skoid", ""),
                              g("sktid", ""), g("skt", ""), g("ske", ""), g("sks", ""),
                              g("skv", ""), g("saoid", ""), g("suoid", ""), g("scid", ""),
                              g("sip", ""), g("spr", ""), g("sv", ""), "c", "", g("ses", ""),
                              g("rscc", ""), g("rscd", ""), g("rsce", ""), g("rscl", ""),
                              g("rsct", "")])
        elif g("sr") == "c":
            text = "\n".join([g("sp", ""), g("st", ""), g("se", ""),
                              f"/blob/{self.account}/{container}", g("si", ""), g("sip", ""),
                              g("spr", ""), g("sv", ""), "c", "", g("ses", ""), g("rscc", ""),
                              g("rscd", ""), g("rsce", ""), g("rscl", ""), g("rsct", "")])
        elif g("ss"):
            text = "\n".join([self.account, g("sp", ""), g("ss", ""), g("srt", ""),
                              g("st", ""), g("se", ""), g("sip", ""), g("spr", ""),
                              g("sv", ""), g("ses", "")]) + "\n"
        else:
            return "AuthenticationFailed"
        if not hmac.compare_digest(self.sign(text, key), g("sig", "")):
            return "AuthenticationFailed"
        expiry = calendar.timegm(time.strptime(g("se", ""), "%Y-%m-%dT%H:%M:%SZ"))
        if expiry < time.time():
            return "AuthenticationFailed"
        return None if need in g("sp", "") else "AuthorizationPermissionMismatch"


class _Handler(BaseHTTPRequestHandler):
    fake: BlobFake
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None
              ) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("x-ms-version", "2021-08-06")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        body = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>'
                f"{escape(message)}\nRequestId:00000000-0000-0000-0000-000000000000\n"
                f"Time:{time.strftime('%Y-%m-%dT%H:%M:%S.0000000Z', time.gmtime())}"
                "</Message></Error>").encode()
        self._send(status, body, {"x-ms-error-code": code, "Content-Type": "application/xml"})

    def _route(self) -> None:
        f, method = self.fake, self.command
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        parts = url.path.split("/", 3)  # "", account, container, blob
        f.requests.append(f"{method} {url.path} {q.get('comp', '')}")
        bearer = self.headers.get("Authorization") == f"Bearer {BEARER}"
        if len(parts) >= 2 and parts[1] == f.account and (len(parts) == 2 or not parts[2]) \
                and q.get("comp") == "userdelegationkey" and method == "POST":
            if not bearer:
                self._error(403, "AuthenticationFailed", "Server failed to authenticate.")
                return
            root = ET.fromstring(body)
            doc = ('<?xml version="1.0" encoding="utf-8"?><UserDelegationKey>'
                   f"<SignedOid>{OID}</SignedOid><SignedTid>{TID}</SignedTid>"
                   f"<SignedStart>{root.findtext('Start')}</SignedStart>"
                   f"<SignedExpiry>{root.findtext('Expiry')}</SignedExpiry>"
                   "<SignedService>b</SignedService><SignedVersion>2021-08-06</SignedVersion>"
                   f"<Value>{DELEGATION_KEY}</Value></UserDelegationKey>")
            self._send(200, doc.encode(), {"Content-Type": "application/xml"})
            return
        if len(parts) < 3 or parts[1] != f.account or not parts[2]:
            self._error(400, "InvalidUri", "The requested URI does not represent any resource.")
            return
        if not self.headers.get("x-ms-version"):
            self._error(400, "MissingRequiredHeader", "x-ms-version is required.")
            return
        container = urllib.parse.unquote(parts[2])
        name = urllib.parse.unquote(parts[3]) if len(parts) > 3 else ""
        need = {"GET": "l" if not name else "r", "PUT": "c" if not name else "w",
                "DELETE": "d"}.get(method, "r")
        denied = None if bearer and not name and method == "PUT" else \
            f.sas_error(q, container, need)
        if denied is not None:
            self._error(403, denied, "Server failed to authenticate the request." if
                        denied != "AuthorizationPermissionMismatch" else
                        "This request is not authorized to perform this operation using "
                        "this permission.")
            return
        with f.lock:
            if not name:
                self._container(method, container, q)
            elif container not in f.blobs:
                self._error(404, "ContainerNotFound", "The specified container does not exist.")
            elif method == "GET":
                if name not in f.blobs[container]:
                    self._error(404, "BlobNotFound", "The specified blob does not exist.")
                    return
                data, modified = f.blobs[container][name]
                self._send(200, data, {"Content-Type": "application/octet-stream",
                                       "Last-Modified": email.utils.formatdate(modified,
                                                                               usegmt=True),
                                       "x-ms-blob-type": "BlockBlob"})
            elif method == "PUT":
                self._put(container, name, q, body)
            elif method == "DELETE":
                if f.blobs[container].pop(name, None) is None:
                    self._error(404, "BlobNotFound", "The specified blob does not exist.")
                else:
                    self._send(202)
            else:
                self._error(405, "UnsupportedHttpVerb", "The resource doesn't support it.")

    def _container(self, method: str, container: str, q: dict[str, str]) -> None:
        f = self.fake
        if q.get("restype") != "container":
            self._error(400, "InvalidQueryParameterValue", "restype")
        elif method == "PUT":
            if container in f.blobs:
                self._error(409, "ContainerAlreadyExists", "The specified container already "
                            "exists.")
            else:
                f.blobs[container] = {}
                self._send(201)
        elif container not in f.blobs:
            self._error(404, "ContainerNotFound", "The specified container does not exist.")
        elif method == "GET" and q.get("comp") == "list":
            prefix = q.get("prefix", "")
            names = sorted(k for k in f.blobs[container] if k.startswith(prefix))
            start = int(q.get("marker") or 0)
            page = names[start:start + f.page_size]
            items = "".join(
                f"<Blob><Name>{escape(nm)}</Name><Properties>"
                f"<Last-Modified>{email.utils.formatdate(f.blobs[container][nm][1], usegmt=True)}"
                f"</Last-Modified><Etag>0x8D{len(nm):X}</Etag><Content-Length>"
                f"{len(f.blobs[container][nm][0])}</Content-Length><Content-Type>"
                "application/octet-stream</Content-Type><BlobType>BlockBlob</BlobType>"
                "</Properties><OrMetadata /></Blob>" for nm in page)
            more = start + f.page_size < len(names)
            doc = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint='
                   f'"{f.endpoint}/" ContainerName="{escape(container)}"><Prefix>{escape(prefix)}'
                   f"</Prefix><Blobs>{items}</Blobs><NextMarker>"
                   f"{start + f.page_size if more else ''}</NextMarker></EnumerationResults>")
            self._send(200, doc.encode(), {"Content-Type": "application/xml"})
        else:
            self._error(400, "InvalidQueryParameterValue", "comp")

    def _put(self, container: str, name: str, q: dict[str, str], body: bytes) -> None:
        f = self.fake
        comp = q.get("comp", "")
        if comp == "block":
            f.blocks.setdefault((container, name), {})[q["blockid"]] = body
            self._send(201)
        elif comp == "blocklist":
            ids = [e.text or "" for e in ET.fromstring(body) if e.tag in ("Latest",
                                                                            "Uncommitted")]
            staged = f.blocks.pop((container, name), {})
            if any(i not in staged for i in ids):
                self._error(400, "InvalidBlockList", "The specified block list is invalid.")
                return
            f.blobs[container][name] = (b"".join(staged[i] for i in ids), time.time())
            self._send(201)
        elif comp:
            self._error(400, "InvalidQueryParameterValue", "comp")
        elif self.headers.get("x-ms-blob-type") != "BlockBlob":
            self._error(400, "MissingRequiredHeader", "x-ms-blob-type is required.")
        else:
            f.blobs[container][name] = (body, time.time())
            self._send(201)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _route  # noqa: N815


def _serve(host: str, monkeypatch: pytest.MonkeyPatch) -> tuple[BlobFake, ThreadingHTTPServer]:
    fake = BlobFake()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    fake.url = f"http://{host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"DefaultEndpointsProtocol=http;AccountName={fake.account};"
                       f"AccountKey={fake.key};BlobEndpoint={fake.endpoint};")
    for var in ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return fake, server


@pytest.fixture
def blob(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlobFake]:
    """A fresh fake Blob service on 127.0.0.1; the standard connection string names its
    account, key and endpoint (`BlobEndpoint`), as it would for Azurite."""
    fake, server = _serve("127.0.0.1", monkeypatch)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def blob_on_lab(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                ) -> Iterator[BlobFake]:
    """`blob`, but on the netns lab's gateway (`lab.gateway`: reachable from the host
    and from inside every node namespace), for cloud nodes that save checkpoints to it;
    the connection string's `BlobEndpoint` names that address."""
    lab = request.getfixturevalue("netns_lab")
    fake, server = _serve(lab.gateway, monkeypatch)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
