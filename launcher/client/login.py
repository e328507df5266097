"""The endpoint and token this home is logged in with: `$LAUNCHER_HOME/api_login.json`,
written 0600 (the token is a password). Cheap to import."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import LauncherError, UsageError


@dataclass(frozen=True)
class Login:
    endpoint: str
    token: str


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
    return Login(data["endpoint"], data["token"])


def normalize_endpoint(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"-e {url!r}: give the server's URL, e.g. http://127.0.0.1:46590.")
    return url


def save_login(login: Login) -> Path:
    from launcher.state import files as state_files

    path = login_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_files.write_private(path, json.dumps({"endpoint": login.endpoint,
                                                "token": login.token}).encode())
    return path


def forget_login() -> bool:
    try:
        login_path().unlink()
    except FileNotFoundError:
        return False
    return True
