"""Bearer tokens -> the acting user, and the failed-authentication rate limit.

Every route but `/health` depends on `current_user` (or `admin_user`). A missing,
wrong, removed or rotated token is a 401 with one line saying so; a client IP with
more than `Limits.auth_failures` failures within `auth_window_s` gets 429 until the
window has passed (checked before the token, so guessing costs the guesser).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from fastapi import Depends, HTTPException, Request

from launcher.api.server_store import User
from launcher.server.settings import Limits
from launcher.server.store_pool import server_store


class FailedAuthLimiter:
    """Failed authentications per client IP over a sliding window."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._fails: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, ip: str, now: float) -> deque[float]:
        q = self._fails.setdefault(ip, deque())
        while q and now - q[0] > self.limits.auth_window_s:
            q.popleft()
        return q

    def blocked(self, ip: str) -> bool:
        with self._lock:
            return len(self._recent(ip, time.monotonic())) >= self.limits.auth_failures

    def failed(self, ip: str) -> None:
        with self._lock:
            self._recent(ip, time.monotonic()).append(time.monotonic())


def current_user(request: Request) -> User:
    limiter: FailedAuthLimiter = request.app.state.limiter
    ip = request.client.host if request.client else "?"
    if limiter.blocked(ip):
        raise HTTPException(429, "Too many failed authentications from this address; "
                                 "wait a minute and check your token (`launcher api login`).")
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        limiter.failed(ip)
        raise HTTPException(401, "No token: log in with `launcher api login -e URL --token T`.")
    with server_store() as store:
        user = store.authenticate(token.strip())
    if user is None:
        limiter.failed(ip)
        raise HTTPException(401, "The token was not accepted (wrong, rotated or its user "
                                 "removed): ask an admin for a new one (`launcher users rotate "
                                 "NAME`) and `launcher api login` again.")
    return user


def admin_user(user: User = Depends(current_user)) -> User:
    if not user.is_admin:
        raise HTTPException(403, f"User {user.name!r} is not an admin; this needs the admin role.")
    return user
