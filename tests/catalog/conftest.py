"""Catalog tests run against a private LAUNCHER_HOME, the bundled snapshot and no local GPUs
(unless a test says otherwise), with fresh per-process catalog state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.catalog import local, query


@pytest.fixture(autouse=True)
def _isolated_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "launcher-home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "none")
    monkeypatch.delenv("LAUNCHER_CATALOG_DIR", raising=False)
    query.clear_process_cache()
    local.reset_cache()
    yield home
    query.clear_process_cache()
    local.reset_cache()
