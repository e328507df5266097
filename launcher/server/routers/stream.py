"""A blocking API call that reports lines through a callback (`jobs_logs`, `logs`)
as an NDJSON stream: {"line": ...} per line, then {"result": ...} or {"error": ...}.

A client that goes away frees everything the stream held, promptly: the response is
an async generator (no worker thread parked on the queue), which checks
`request.is_disconnected()` at least every `_CHECK_S` while no line comes, and on
leaving sets the call's `stop` event; the calls given here return within their poll
interval of it (and the next line they report raises `ClientGone`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from launcher.server.requests import error_json

_END = object()
_CHECK_S = 1.0  # the longest a vanished client goes unnoticed while no line comes
_PUT_S = 0.5  # how often a producer blocked on a full queue checks for a vanished client


class ClientGone(Exception):
    pass


def ndjson(request: Request,
           call: Callable[[Callable[[str], None], threading.Event], Any]) -> StreamingResponse:
    """Run `call(on_line, stop)` on a thread; stream its lines, then its result
    (JSON-able). `stop` is set when the client has gone: the call should return soon."""
    q: queue.Queue[Any] = queue.Queue(maxsize=10_000)
    stop = threading.Event()
    # The route may run on a worker thread: the loop and its event are known once the
    # body runs (it drains the queue before its first wait, so no early line is missed).
    waker: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def put(item: Any) -> None:
        while True:
            if stop.is_set():
                raise ClientGone()
            try:
                q.put(item, timeout=_PUT_S)
                break
            except queue.Full:
                continue
        if waker:
            loop, ready = waker[0]
            with contextlib.suppress(RuntimeError):  # the loop is closing: nobody to wake
                loop.call_soon_threadsafe(ready.set)

    def on_line(line: str) -> None:
        put({"line": line})

    def work() -> None:
        with contextlib.suppress(ClientGone):
            try:
                put({"result": call(on_line, stop)})
            except ClientGone:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported to the client
                put({"error": error_json(exc)})
            finally:
                put(_END)

    threading.Thread(target=work, daemon=True, name="ndjson").start()

    async def body() -> AsyncIterator[bytes]:
        ready = asyncio.Event()
        waker.append((asyncio.get_running_loop(), ready))
        try:
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    ready.clear()
                    if not q.empty():
                        continue
                    try:
                        await asyncio.wait_for(ready.wait(), _CHECK_S)
                    except TimeoutError:
                        if await request.is_disconnected():
                            return
                    continue
                if item is _END:
                    return
                yield (json.dumps(item, default=str) + "\n").encode()
        finally:
            stop.set()

    return StreamingResponse(body(), media_type="application/x-ndjson")
