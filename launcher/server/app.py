"""The FastAPI application: limits, error shapes, routers, the in-process controller.

Errors: a `LauncherError` raised by an API call becomes
`{"error": {"type", "message", "exit_code"}}` (400; 404 for not-found ones), which
the client turns back into the same message and exit code the embedded CLI gives.
Every response carries `X-Launcher-Version` (the client checks it for skew).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from launcher import __version__
from launcher.errors import LauncherError
from launcher.jobs.log_mirror import LogPusher
from launcher.server.auth import FailedAuthLimiter
from launcher.server.controller import EmbeddedController
from launcher.server.requests import RequestRunner, error_json
from launcher.server.settings import Limits
from launcher.server.uploads_gc import UploadsCollector
from launcher.state import logstore

log = logging.getLogger("launcher.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets 413 (by its
    Content-Length, or once that many bytes have streamed in). Paths in `larger`
    (exact) get their own limit (uploads)."""

    def __init__(self, app: Any, limit: int, larger: dict[str, int] | None = None) -> None:
        self.app, self.default, self.larger = app, limit, larger or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope.get("path", ""), self.default)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, limit)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > limit:
                raise _TooLarge()
            return msg

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._refuse(send, limit)

    async def _refuse(self, send: Send, limit: int) -> None:
        body = (b'{"error": {"type": "RequestTooLarge", "exit_code": 1, "message": '
                b'"The request body is larger than the server accepts ('
                + str(limit).encode() + b' bytes)."}}')
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"x-launcher-version", __version__.encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


def create_app(*, run_controller: bool = True, limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits.from_env()
    controller = EmbeddedController()
    runner = RequestRunner()
    collector = UploadsCollector()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import asyncio

        await asyncio.to_thread(runner.recover)
        pusher = None
        if run_controller:
            if logstore.shared():  # job logs any replica serves (launcher/jobs/log_mirror.py)
                pusher = LogPusher()
                pusher.start()
            got = await asyncio.to_thread(controller.start)
            log.info("controller %s", "running" if got else "waiting for the lock")
        collector.start()
        yield
        collector.stop()
        await asyncio.to_thread(controller.stop)
        if pusher is not None:
            await asyncio.to_thread(pusher.stop)

    app = FastAPI(title="launcher", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.limiter = FailedAuthLimiter(limits)
    app.state.controller = controller
    app.state.runner = runner
    app.state.limits = limits

    @app.exception_handler(LauncherError)
    async def launcher_error(_: Request, exc: LauncherError) -> JSONResponse:
        status = 404 if exc.exit_code == 4 or type(exc).__name__.endswith("NotFoundError") else 400
        return JSONResponse({"error": error_json(exc)}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        kind = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 429: "TooManyRequests"}
        return JSONResponse({"error": {"type": kind.get(exc.status_code, "HTTPError"),
                                       "message": str(exc.detail), "exit_code": 1}},
                            status_code=exc.status_code)

    @app.middleware("http")
    async def version_header(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["X-Launcher-Version"] = __version__
        return response

    from launcher.server.routers import clusters, jobs, launch, misc, uploads

    app.include_router(misc.router)
    app.include_router(launch.router)  # before clusters: POST /clusters/launch
    app.include_router(clusters.router)
    app.include_router(jobs.router)
    app.include_router(uploads.router)
    from launcher.server.dashboard import install as install_dashboard

    install_dashboard(app)
    # a blob tar carries at most one root's files (each root <= max_upload_bytes) plus
    # tar headers; the route checks every member's size itself
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes,
                       larger={uploads.BLOBS_PATH: 2 * limits.max_upload_bytes + (1 << 24)})
    return app
