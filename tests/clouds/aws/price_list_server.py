"""A local stand-in for the EC2 bulk price list: a stdlib HTTP server on 127.0.0.1 that
serves the recorded offer files under the real path layout
(`/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv|json`).

The product reaches it through its documented setting (`catalog.aws.price_list_url`
in config.yaml), exactly as it would reach AWS's own endpoint."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded")
PREFIX = "/offers/v1.0/aws/AmazonEC2/current/"


@dataclass
class PriceListServer:
    base_url: str
    requests: list[str] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)  # regions answered with HTTP 500


@contextmanager
def serve_price_list() -> Iterator[PriceListServer]:
    state = PriceListServer(base_url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (stdlib name)
            state.requests.append(self.path)
            rest = self.path[len(PREFIX):] if self.path.startswith(PREFIX) else ""
            region, _, name = rest.partition("/")
            path = os.path.join(RECORDED, f"{region}-{name}")
            if region in state.failing:
                self.send_error(500, "Internal Server Error")
                return
            if not region or name not in ("index.csv", "index.json") or not os.path.isfile(path):
                self.send_error(404, "Not Found")
                return
            with open(path, "rb") as f:
                body = f.read()
            self.send_response(200)
            ctype = "text/csv" if name.endswith(".csv") else "application/json"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}{PREFIX.rstrip('/')}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
