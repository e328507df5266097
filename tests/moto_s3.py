"""moto's S3 as a real HTTP server on 127.0.0.1 (in-process `ThreadedMotoServer`).

The product reaches it through the standard `AWS_ENDPOINT_URL` variable only, as it
would reach a real S3-compatible endpoint; the client's fake credentials
(`AWS_ACCESS_KEY_ID=testing`) are what launcher writes to the nodes. Local-cloud nodes
are processes on this machine, so their node-side bucket_sync.py reaches it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class S3Server:
    url: str
    server: Any

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                        Prefix=prefix)
        return sorted(o["Key"] for p in pages for o in p.get("Contents", []))

    def read(self, bucket: str, key: str) -> str:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A fresh moto S3 server; the standard AWS variables point at it (loopback only)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    import urllib.request

    # moto's backends are process-wide: start every test from an empty S3
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"),
                           timeout=10).close()
    for name, value in {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    try:
        yield S3Server(url, server)
    finally:
        server.stop()
