"""The web dashboard at /dashboard: server-rendered pages over the same routes the CLI
uses (their RBAC and audit records), a login with an API token kept in an HttpOnly
cookie, and a little JavaScript for live tables and log streams (docs/dashboard.md)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse

from launcher.server.dashboard.session import PREFIX, LoginRequired


def install(app: FastAPI) -> None:
    from launcher.server.dashboard.pages import router

    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, _: LoginRequired) -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/login", status_code=303)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/", status_code=303)

    app.include_router(router)
