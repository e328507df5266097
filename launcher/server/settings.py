"""Where the server keeps its files, and its limits. Cheap to import (no FastAPI).

Everything lives under the `LAUNCHER_HOME` the server was started with:

    server/server.pid      the running server's pid, host and port (JSON)
    server/server.log      uvicorn's and the controller's log
    server/secret.key      the Fernet key that encrypts secrets at rest (0600)
    server/requests/<id>.log   the log of one asynchronous request
    server/uploads/<user>/     that user's uploaded files (launcher.server.uploads)
    state.db               users (token hashes only), owners, audit, requests
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 46590


def server_dir(home: Path | None = None) -> Path:
    from launcher.config.settings import launcher_home

    return (home or launcher_home()) / "server"


def pid_path(home: Path | None = None) -> Path:
    return server_dir(home) / "server.pid"


def log_path(home: Path | None = None) -> Path:
    return server_dir(home) / "server.log"


def key_path(home: Path | None = None) -> Path:
    return server_dir(home) / "secret.key"


def requests_dir(home: Path | None = None) -> Path:
    return server_dir(home) / "requests"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


@dataclass(frozen=True)
class Limits:
    """Request limits (environment overrides for tests and operators)."""

    max_body_bytes: int  # LAUNCHER_API_MAX_BODY: larger request bodies get 413
    auth_failures: int  # LAUNCHER_API_AUTH_FAILURES: failed auths per client IP per window
    auth_window_s: int  # LAUNCHER_API_AUTH_WINDOW_S: ... before it gets 429
    max_upload_bytes: int = 1 << 30  # LAUNCHER_API_MAX_UPLOAD: one workdir / file mount

    @staticmethod
    def from_env() -> Limits:
        return Limits(
            max_body_bytes=_env_int("LAUNCHER_API_MAX_BODY", 4 * 1024 * 1024),
            auth_failures=_env_int("LAUNCHER_API_AUTH_FAILURES", 10),
            auth_window_s=_env_int("LAUNCHER_API_AUTH_WINDOW_S", 60),
            max_upload_bytes=_env_int("LAUNCHER_API_MAX_UPLOAD", 1 << 30),
        )
