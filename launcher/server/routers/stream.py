"""A blocking API call that reports lines through a callback (`jobs_logs`, `logs`)
as an NDJSON stream: {"line": ...} per line, then {"result": ...} or {"error": ...}.

A client that goes away stops the call: the next line it would get raises
`ClientGone` inside the API call, which unwinds it."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse

from launcher.server.requests import error_json

_END = object()


class ClientGone(Exception):
    pass


def ndjson(call: Callable[[Callable[[str], None]], Any]) -> StreamingResponse:
    """Run `call(on_line)` on a thread; stream its lines, then its result (JSON-able)."""
    q: queue.Queue[Any] = queue.Queue(maxsize=10_000)
    gone = threading.Event()

    def on_line(line: str) -> None:
        if gone.is_set():
            raise ClientGone()
        q.put({"line": line})

    def work() -> None:
        try:
            q.put({"result": call(on_line)})
        except ClientGone:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the client
            q.put({"error": error_json(exc)})
        finally:
            q.put(_END)

    threading.Thread(target=work, daemon=True, name="ndjson").start()

    def body() -> Iterator[bytes]:
        try:
            while True:
                item = q.get()
                if item is _END:
                    return
                yield (json.dumps(item, default=str) + "\n").encode()
        finally:
            gone.set()

    return StreamingResponse(body(), media_type="application/x-ndjson")
