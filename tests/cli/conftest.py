"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.clouds.local import LocalCloud


@pytest.fixture(autouse=True)
def _terminate_local_clusters(launcher_home: Path) -> Iterator[None]:
    """Whatever a CLI test left on the local cloud is terminated after it."""
    yield
    root = launcher_home / "local"
    if root.exists():
        for cdir in root.iterdir():
            LocalCloud().terminate(cdir.name)
