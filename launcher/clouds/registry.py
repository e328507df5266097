"""Cloud name -> implementation, loaded lazily so no SDK is imported until used.

`IMPLEMENTED` lists clouds we can actually provision on. Catalog clouds without an
implementation still appear in cost queries and dry runs, marked not enabled.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from launcher.clouds.status import CredentialStatus
from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.clouds.base import Cloud

# name -> "module:Class"
IMPLEMENTED: dict[str, str] = {
    "local": "launcher.clouds.local:LocalCloud",
    "ssh": "launcher.clouds.ssh:SSHCloud",
    "aws": "launcher.clouds.aws.cloud:AWSCloud",
    "gcp": "launcher.clouds.gcp.cloud:GCPCloud",
    "azure": "launcher.clouds.azure.cloud:AzureCloud",
    "nebius": "launcher.clouds.nebius.cloud:NebiusCloud",
    "runpod": "launcher.clouds.runpod.cloud:RunPodCloud",
    "lambda": "launcher.clouds.lambda_.cloud:LambdaCloud",
    "vast": "launcher.clouds.vast.cloud:VastCloud",
    "slurm": "launcher.clouds.slurm.cloud:SlurmCloud",
    "kubernetes": "launcher.clouds.kubernetes.cloud:KubernetesCloud",
}


@cache
def get_cloud(name: str) -> Cloud:
    """The cloud object for `name`. Raises KeyError for a cloud with no implementation."""
    target = IMPLEMENTED[name]
    module_name, cls_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    cloud: Cloud = cls()
    return cloud


def credential_status(name: str, *, verify: bool = True) -> CredentialStatus:
    """Whether launches on `name` can work now. Never raises.

    First the presence probe (launcher.clouds.presence: credentials in env/files and the
    SDK installed; no provisioner import, no network): no credentials, or no SDK (the
    reason names the `pip install 'launcher[...]'` extra), answers at once. With
    `verify=False` (dry runs, cost queries) a positive probe is the answer: configured,
    not proven. With `verify=True` the cloud's own `check()` proves the credentials
    (a token or identity call, cached per process by the cloud)."""
    if name not in IMPLEMENTED:
        return CredentialStatus(False, f"no '{name}' provisioner in this version (cost queries only)")
    from launcher.clouds.sdk import as_missing_sdk

    try:
        from launcher.clouds.presence import credentials_present

        found = credentials_present(name)
        if found is not None and (not found.enabled or not verify):
            return found
        return get_cloud(name).check()
    except LauncherError as exc:  # a malformed config.yaml: its own message
        return CredentialStatus(False, str(exc))
    except Exception as exc:  # a broken cloud module must not break `launcher gpus`
        missing = as_missing_sdk(exc, name)
        return CredentialStatus(False, str(missing) if missing else f"{type(exc).__name__}: {exc}")


def enabled_clouds() -> dict[str, CredentialStatus]:
    """Status of every implemented cloud, by name."""
    return {name: credential_status(name) for name in IMPLEMENTED}
