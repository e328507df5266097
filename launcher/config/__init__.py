"""The user's settings (`$LAUNCHER_HOME/config.yaml`) and each cloud's section.

    azure       The `azure:` section of `$LAUNCHER_HOME/config.yaml` (how the `azure` cloud provisions)
    gpu_clouds  The `lambda:` and `vast:` sections of `$LAUNCHER_HOME/config.yaml` (REST GPU clouds)
    kubernetes  The `kubernetes:` section of `$LAUNCHER_HOME/config.yaml` (the `kubernetes` cloud, docs/kubernetes.md)
    nebius      The `nebius:` section of `$LAUNCHER_HOME/config.yaml` (how the `nebius` cloud provisions)
    runpod      The `runpod:` section of `$LAUNCHER_HOME/config.yaml` (how the `runpod` cloud provisions)
    settings    The user's settings: `$LAUNCHER_HOME/config.yaml` (default `~/.launcher/config.yaml`)
    slurm       The `slurm:` section of `$LAUNCHER_HOME/config.yaml` (the `slurm` cloud, docs/slurm.md)

Every public name of launcher.config.settings is importable from here too
(`from launcher.config import ...`), loaded on first use: importing one module of the
package does not load the others. Code inside launcher imports the module that
defines a name. A public name added to the main module is added to `__all__` and
the TYPE_CHECKING imports here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.config.settings import AWSSettings as AWSSettings
    from launcher.config.settings import CatalogSource as CatalogSource
    from launcher.config.settings import GCPSettings as GCPSettings
    from launcher.config.settings import JobsSettings as JobsSettings
    from launcher.config.settings import LauncherConfig as LauncherConfig
    from launcher.config.settings import SSHHost as SSHHost
    from launcher.config.settings import SSHNodePool as SSHNodePool
    from launcher.config.settings import config_path as config_path
    from launcher.config.settings import launcher_home as launcher_home
    from launcher.config.settings import load_config as load_config
    from launcher.config.settings import parse_config as parse_config

__all__ = [
    "AWSSettings",
    "CatalogSource",
    "GCPSettings",
    "JobsSettings",
    "LauncherConfig",
    "SSHHost",
    "SSHNodePool",
    "config_path",
    "launcher_home",
    "load_config",
    "parse_config",
]

# The package's modules: never looked up in settings (the import system loads them).
_MODULES = frozenset({
    "azure",
    "gpu_clouds",
    "kubernetes",
    "nebius",
    "runpod",
    "settings",
    "slurm",
})


def __getattr__(name: str) -> Any:
    """A name of launcher.config.settings, imported on first use."""
    if name.startswith("__") or name in _MODULES:
        raise AttributeError(name)
    module = importlib.import_module("launcher.config.settings")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
