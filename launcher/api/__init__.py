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
    # catalog refresh and cost report (issue 9)
    "catalog_refresh": "launcher.api.catalog_refresh",
    "catalog_forget": "launcher.api.catalog_refresh",
    "cost_report": "launcher.api.cost_report",
    # managed jobs (issue 4)
    "jobs_launch": "launcher.api.jobs",
    "jobs_queue": "launcher.api.jobs",
    "jobs_queue_page": "launcher.api.jobs",
    "jobs_status": "launcher.api.jobs",
    "jobs_detail": "launcher.api.jobs",
    "jobs_cancel": "launcher.api.jobs",
    "jobs_logs": "launcher.api.jobs",
    "jobs_wait": "launcher.api.jobs",
    "jobs_controller_status": "launcher.api.jobs",
    "jobs_controller_start": "launcher.api.jobs",
    "jobs_controller_stop": "launcher.api.jobs",
    # clusters (issue 3)
    "launch": "launcher.api.launch",
    "exec_": "launcher.api.exec_job",
    "LaunchResult": "launcher.api.cluster_common",
    "status": "launcher.api.clusters",
    "queue": "launcher.api.clusters",
    "logs": "launcher.api.clusters",
    "cancel": "launcher.api.clusters",
    "stop": "launcher.api.clusters",
    "start": "launcher.api.clusters",
    "down": "launcher.api.clusters",
    "autostop": "launcher.api.clusters",
    "local_preempt": "launcher.api.clusters",
    # shared per-region / per-account resources (issue 16)
    "cleanup_leftovers": "launcher.api.cleanup",
    # the state DB (issue 8)
    "check_state": "launcher.api.state_check",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'launcher.api' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(_EXPORTS)
