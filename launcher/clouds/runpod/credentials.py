"""RunPod's API key: `RUNPOD_API_KEY`, else `~/.runpod/config.toml` (what `runpod config`
writes: `[default]` with `api_key = "..."`). Reading it touches no network."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.clouds.status import CredentialStatus


def config_file() -> Path:
    return Path(os.path.expanduser("~")) / ".runpod" / "config.toml"


def api_key() -> tuple[str | None, str]:
    """(key or None, where it came from / why there is none)."""
    key = os.environ.get("RUNPOD_API_KEY", "").strip()
    if key:
        return key, "RUNPOD_API_KEY"
    path = config_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"no RUNPOD_API_KEY and no {path} (run `runpod config` or export the key)"
    except (OSError, ValueError) as exc:
        return None, f"{path} is unreadable: {exc}"
    import tomllib  # only when the file exists

    try:
        data = tomllib.loads(text)
    except ValueError as exc:
        return None, f"{path} is unreadable: {exc}"
    profile = data.get("default") if isinstance(data.get("default"), dict) else data
    found = str((profile or {}).get("api_key") or "").strip()
    if not found:
        return None, f"{path} has no api_key in [default]"
    return found, str(path)


def presence() -> CredentialStatus:
    """Whether a key is configured here, not whether it works. No network."""
    key, why = api_key()
    return CredentialStatus(False, why) if key is None else CredentialStatus(True, f"API key from {why}")
