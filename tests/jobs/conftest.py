from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every jobs test gets its own LAUNCHER_HOME (never the real ~/.launcher)."""
    home = tmp_path / "lhome"
    home.mkdir(mode=0o700)  # as launcher creates it (a looser one is tightened, with a warning)
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    monkeypatch.delenv("LAUNCHER_CONTROLLER_CRASH_AT", raising=False)
    yield home
