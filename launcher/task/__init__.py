"""The task spec as one package: the Task model and everything it is parsed from.

    cloud_names       What to suggest when a cloud name is not one launcher knows
    config_section    A task's `config:` section: SkyPilot's per-task config overrides
    families          Accelerator names SkyPilot's catalog once used for a newer chip generation
    fields            Field paths, line lookup and typed field readers for task validation
    git_workdir       A git `workdir: {url, ref}`: the nodes clone the repository at the ref
    health            `resources.health`: the node health gate before setup (docs/health.md)
    model             The Task: a validated SkyPilot-format task YAML (plus launcher's additions)
    path_fields       workdir, file_mounts, checkpoint: $ENV substitution and local paths
    pipeline          SkyPilot pipelines: a task file of several YAML documents, run stage after stage
    policies          Task-wide policies: checkpoint (ours), job_recovery (SkyPilot + our deadline), autostop
    pool              SkyPilot's `pool:` section (worker pools), validated and planned as a plain task
    resources         Resources: what a task asks to run on
    resources_parser  Parsers for the `resources:` section of a task (SkyPilot format plus our `network`)
    service           SkyPilot's `service:` section (SkyServe), validated and then set aside
    storage           SkyPilot storage mounts in `file_mounts`: `{name, source, store, mode, persistent}`
    volumes           A task's `volumes:` section: SkyPilot volumes (pre-created network volumes)
    yaml_loader       YAML text -> plain data plus a field-path -> line map

Every public name of launcher.task.model is importable from here too
(`from launcher.task import ...`), loaded on first use: importing one module of the
package does not load the others. Code inside launcher imports the module that
defines a name. A public name added to the main module is added to `__all__` and
the TYPE_CHECKING imports here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.task.model import MAX_ENV_BYTES as MAX_ENV_BYTES
    from launcher.task.model import MAX_NUM_NODES as MAX_NUM_NODES
    from launcher.task.model import MAX_SCRIPT_BYTES as MAX_SCRIPT_BYTES
    from launcher.task.model import MAX_TASK_FILE_BYTES as MAX_TASK_FILE_BYTES
    from launcher.task.model import TASK_FIELDS as TASK_FIELDS
    from launcher.task.model import UNSUPPORTED_TASK_FIELDS as UNSUPPORTED_TASK_FIELDS
    from launcher.task.model import AutostopSpec as AutostopSpec
    from launcher.task.model import CheckpointSpec as CheckpointSpec
    from launcher.task.model import JobRecovery as JobRecovery
    from launcher.task.model import Task as Task
    from launcher.task.model import TaskValidationError as TaskValidationError
    from launcher.task.model import canonicalize_accelerators as canonicalize_accelerators
    from launcher.task.model import script_size_problem as script_size_problem

__all__ = [
    "MAX_ENV_BYTES",
    "MAX_NUM_NODES",
    "MAX_SCRIPT_BYTES",
    "MAX_TASK_FILE_BYTES",
    "TASK_FIELDS",
    "UNSUPPORTED_TASK_FIELDS",
    "AutostopSpec",
    "CheckpointSpec",
    "JobRecovery",
    "Task",
    "TaskValidationError",
    "canonicalize_accelerators",
    "script_size_problem",
]

# The package's modules: never looked up in model (the import system loads them).
_MODULES = frozenset({
    "cloud_names",
    "config_section",
    "families",
    "fields",
    "git_workdir",
    "health",
    "model",
    "path_fields",
    "pipeline",
    "policies",
    "pool",
    "resources",
    "resources_parser",
    "service",
    "storage",
    "volumes",
    "yaml_loader",
})


def __getattr__(name: str) -> Any:
    """A name of launcher.task.model, imported on first use."""
    if name.startswith("__") or name in _MODULES:
        raise AttributeError(name)
    module = importlib.import_module("launcher.task.model")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
