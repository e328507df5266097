"""Vast.ai's API key: `VAST_API_KEY`, else the file the `vastai` CLI writes
(`~/.config/vastai/vast_api_key`, or the older `~/.vast_api_key`). Reading it touches no
network and imports nothing of the provisioner: `launcher check`, dry runs and cost
queries ask `presence()`."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.clouds.status import CredentialStatus


def key_files() -> list[Path]:
    return [Path.home() / ".config" / "vastai" / "vast_api_key", Path.home() / ".vast_api_key"]


def api_key() -> tuple[str, str] | None:
    """(key, where it came from), or None when none is configured. No network."""
    env = os.environ.get("VAST_API_KEY")
    if env:
        return env.strip(), "VAST_API_KEY"
    for path in key_files():
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text:
            return text, str(path)
    return None


def presence() -> CredentialStatus:
    """Whether a key is configured here, not whether it works. No network."""
    found = api_key()
    if found is None:
        return CredentialStatus(False, f"no API key: set VAST_API_KEY or write it to "
                                       f"{key_files()[0]}")
    return CredentialStatus(True, f"API key from {found[1]}")
