"""The dashboard's session: the user's API token in a cookie, and the CSRF check.

The cookie (`launcher_session`) holds the same bearer token the CLI sends; it is
HttpOnly (page scripts cannot read it) and SameSite=Strict (another site's page
cannot make the browser send it). Every state-changing action is a POST whose form
carries `csrf`, an HMAC of the token that only a page rendered for this session has;
a POST without the right one (or whose Origin is another site) is refused with 403.
A missing or no-longer-valid token sends the browser to the login page; failed logins
count against the same per-IP limit as failed bearer tokens.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from launcher.api.server_store import ServerStore, User
from launcher.server.auth import FailedAuthLimiter

COOKIE = "launcher_session"
PREFIX = "/dashboard"


class LoginRequired(Exception):
    """Raised by `dashboard_user`; the app answers with a redirect to the login page."""


# `launcher dashboard`: the home's owner, an admin, as the embedded CLI is
LOCAL_USER = User("local", "admin", 0.0, None)

def csrf_token(token: str) -> str:
    """The form token for a session: not the session token, and not derivable without it."""
    return hmac.new(token.encode(), b"launcher-dashboard-csrf", hashlib.sha256).hexdigest()


def _ip(request: Request) -> str:
    return request.client.host if request.client else "?"


def authenticate(request: Request, token: str) -> User | None:
    """The user `token` belongs to, or None (counted as a failed authentication).
    Raises 429 while this address is over the failed-authentication limit."""
    limiter: FailedAuthLimiter = request.app.state.limiter
    if limiter.blocked(_ip(request)):
        raise HTTPException(429, "Too many failed logins from this address; wait a minute.")
    user = None
    local = getattr(request.app.state, "local_session", None)  # `launcher dashboard`
    if local and hmac.compare_digest(token.strip().encode(), local.encode()):
        return LOCAL_USER
    if token.strip():
        with ServerStore() as store:
            user = store.authenticate(token.strip())
    if user is None:
        limiter.failed(_ip(request))
    return user


def dashboard_user(request: Request) -> User:
    """The session's user; LoginRequired when there is no valid session cookie."""
    token = request.cookies.get(COOKIE, "")
    if not token:
        raise LoginRequired()
    user = authenticate(request, token)
    if user is None:
        raise LoginRequired()
    return user


def session_csrf(request: Request) -> str:
    return csrf_token(request.cookies.get(COOKIE, ""))


def check_post(request: Request, form_csrf: str) -> None:
    """403 unless the form's CSRF token matches the session's and the request (if it
    says where it comes from) comes from this site."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        here = request.headers.get("host", "")
        if urlsplit(origin).netloc != here:
            raise HTTPException(403, "Cross-site request refused.")
    token = request.cookies.get(COOKIE, "")
    if not token or not hmac.compare_digest(csrf_token(token), form_csrf or ""):
        raise HTTPException(403, "The form's CSRF token is missing or wrong; reload the page.")
