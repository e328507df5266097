"""The endpoint and token this home is logged in with: `$LAUNCHER_HOME/api_login.json`,
written 0600 (the token is a password). Cheap to import.

A login to a server with a self-signed certificate also holds the certificate and its
SHA-256 fingerprint (`tls_cert_pem`, `tls_fingerprint`: the client trusts exactly that
certificate). A deployed server (`launcher api deploy`) adds `deployment` (its cluster,
cloud and service) and, reached through SSH, `tunnel` (launcher.client.tunnel)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.errors import LauncherError, UsageError


@dataclass(frozen=True)
class Login:
    endpoint: str
    token: str
    tls_fingerprint: str | None = None  # SHA-256 of the pinned certificate (hex)
    tls_cert_pem: str | None = None  # the pinned (self-signed) certificate
    tunnel: dict[str, Any] | None = None  # launcher.client.tunnel.TunnelSpec, as a dict
    deployment: dict[str, Any] | None = None  # what `launcher api deploy` made


def login_path() -> Path:
    from launcher.config.settings import launcher_home

    return launcher_home() / "api_login.json"


def load_login() -> Login | None:
    try:
        data = json.loads(login_path().read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LauncherError(f"The login file {login_path()} cannot be read ({exc}); "
                            "`launcher api logout` removes it.") from None
    if not isinstance(data, dict) or not isinstance(data.get("endpoint"), str) \
            or not isinstance(data.get("token"), str):
        raise LauncherError(f"The login file {login_path()} is malformed; `launcher api "
                            "logout` removes it, then log in again.")
    extra = {k: data.get(k) for k in ("tls_fingerprint", "tls_cert_pem", "tunnel", "deployment")}
    return Login(data["endpoint"], data["token"], **extra)


def normalize_endpoint(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"-e {url!r}: give the server's URL, e.g. http://127.0.0.1:46590.")
    return url


def save_login(login: Login) -> Path:
    from launcher.state import files as state_files

    path = login_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {k: v for k, v in asdict(login).items() if v is not None}
    state_files.write_private(path, json.dumps(body).encode())
    return path


def forget_login() -> bool:
    try:
        login_path().unlink()
    except FileNotFoundError:
        return False
    return True
