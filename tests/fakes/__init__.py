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


FAKES_DIR = Path(__file__).resolve().parent


def gpu_image(config_dir: Path, **config: object) -> dict[str, str]:
    """The environment of a GPU node "image" for sshd test nodes and cloud bodies: the
    fake nvidia-smi/dcgmi first on PATH (describing `config`, written under
    `config_dir`; no keys: 8 x H100), a clean kernel log, one InfiniBand device up."""
    cfg = write_config(config_dir / "fake-gpus.json", **config)
    return {
        "PATH": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin",
        "LAUNCHER_FAKE_GPU_CONFIG": str(cfg),
        "LAUNCHER_HEALTH_KMSG_PATH": str(FAKES_DIR / "kern-clean.log"),
        "LAUNCHER_HEALTH_IB_PATH": str(FAKES_DIR / "sys" / "class" / "infiniband"),
    }
