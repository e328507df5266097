"""The Python API of launcher. The CLI only renders what these return.

Submodules are imported lazily by attribute access so that `import launcher.api`
stays cheap: `launcher.api.gpus(...)` loads the planning module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # planning (issue 2)
    "gpus": "launcher.api.planning",
    "gpu_summary": "launcher.api.planning",
    "cost": "launcher.api.planning",
    "plan": "launcher.api.planning",
    "catalog_status": "launcher.api.planning",
    "enabled_clouds": "launcher.api.planning",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'launcher.api' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(_EXPORTS)
