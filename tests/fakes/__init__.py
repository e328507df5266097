"""Fake GPU tools for tests (tests/fakes/bin): see bin/fakegpu.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

BIN_DIR = Path(__file__).resolve().parent / "bin"
CONFIG_ENV = "LAUNCHER_FAKE_GPU_CONFIG"


def fake_path(path: str | None = None) -> str:
    """PATH with the fakes first (then `path`, default this process's PATH)."""
    return f"{BIN_DIR}{os.pathsep}{path if path is not None else os.environ.get('PATH', '')}"


def write_config(path: Path, **config: object) -> Path:
    """Write a fake-GPU config (keys documented in bin/fakegpu.py); returns `path`."""
    path.write_text(json.dumps(config))
    return path
