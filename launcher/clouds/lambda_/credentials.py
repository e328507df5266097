"""Lambda's API key: `LAMBDA_API_KEY`, else `api_key = ...` in `~/.lambda_cloud/lambda_keys`
(what Lambda's own tools write). Reading it touches no network and imports nothing of
the provisioner: `launcher check`, dry runs and cost queries ask `presence()`."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.clouds.status import CredentialStatus


def keys_file() -> Path:
    return Path.home() / ".lambda_cloud" / "lambda_keys"


def api_key() -> tuple[str, str] | None:
    """(key, where it came from), or None when none is configured. No network."""
    env = os.environ.get("LAMBDA_API_KEY")
    if env:
        return env.strip(), "LAMBDA_API_KEY"
    path = keys_file()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "api_key" and value.strip():
            return value.strip(), str(path)
    return None


def presence() -> CredentialStatus:
    """Whether a key is configured here, not whether it works. No network."""
    found = api_key()
    if found is None:
        return CredentialStatus(False, f"no API key: set LAMBDA_API_KEY or write "
                                       f"'api_key = ...' to {keys_file()}")
    return CredentialStatus(True, f"API key from {found[1]}")
