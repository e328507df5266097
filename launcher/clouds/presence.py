"""Are a cloud's credentials configured on this machine, and its SDK installed?

`credentials_present(cloud)` answers from environment variables and files only, the
way each cloud's own `check()` starts: it imports no provisioner module (no
`launcher.clouds.<cloud>.cloud`), no SDK and touches no network. Each probe is a small
function in a light module of the cloud's package (`aws.session.presence`,
`gcp.session.presence`, `azure.session.presence`, `nebius.session.presence`,
`runpod.credentials.presence`, `lambda_.credentials.presence`,
`vast.credentials.presence`); `ssh` reads
its pools from config.yaml, `local` is always there. When credentials are found, the
cloud's SDK must be importable too (launcher.clouds.sdk.missing_sdk, no import):
otherwise the answer is "not enabled", naming the extra to install.

Dry runs and cost queries rank with this answer (credentials found count as enabled,
unverified); `launcher check` and real launches go on to the cloud's `check()`, which
proves them (launcher.clouds.registry.credential_status).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from launcher.clouds.status import CredentialStatus

__all__ = ["LOCAL_STATUS", "credentials_present", "ssh_pools_status"]

LOCAL_STATUS = CredentialStatus(True, "nodes are processes on this machine")


def ssh_pools_status() -> CredentialStatus:
    """Enabled when at least one pool of config.yaml's `ssh_node_pools` is usable (its
    identity file, if named, exists). Never raises."""
    from launcher.config.settings import config_path, load_config
    from launcher.errors import LauncherError

    try:
        pools = load_config().ssh_node_pools
    except LauncherError as exc:
        return CredentialStatus(False, str(exc))
    except Exception as exc:
        return CredentialStatus(False, f"{type(exc).__name__}: {exc}")
    if not pools:
        return CredentialStatus(False, f"no ssh_node_pools in {config_path()}")
    usable = [p for p in pools.values()
              if p.identity_file is None or os.path.isfile(p.identity_file)]
    broken = [f"pool {p.name}: identity_file {p.identity_file} does not exist"
              for p in pools.values() if p not in usable]
    if not usable:
        return CredentialStatus(False, "; ".join(broken))
    desc = ", ".join(f"{p.name} ({len(p.hosts)} hosts)" for p in usable)
    return CredentialStatus(True, f"pools: {desc}" + (f" ({'; '.join(broken)})" if broken else ""))


def _aws() -> CredentialStatus:
    from launcher.clouds.aws.session import presence

    return presence()


def _gcp() -> CredentialStatus:
    from launcher.clouds.gcp.session import presence
    from launcher.config.settings import load_config

    return presence(load_config().gcp)


def _azure() -> CredentialStatus:
    from launcher.clouds.azure.session import presence
    from launcher.config.settings import load_config

    return presence(load_config().azure)


def _nebius() -> CredentialStatus:
    from launcher.clouds.nebius.session import presence
    from launcher.config.settings import load_config

    return presence(load_config().nebius)


def _runpod() -> CredentialStatus:
    from launcher.clouds.runpod.credentials import presence

    return presence()


def _lambda() -> CredentialStatus:
    from launcher.clouds.lambda_.credentials import presence

    return presence()


def _vast() -> CredentialStatus:
    from launcher.clouds.vast.credentials import presence

    return presence()


def slurm_status() -> CredentialStatus:
    """Enabled when config.yaml's `slurm.clusters` names at least one cluster (whether
    its login answers is `SlurmCloud.check`'s business). Never raises."""
    from launcher.config.settings import config_path, load_config
    from launcher.errors import LauncherError

    try:
        clusters = load_config().slurm.clusters
    except LauncherError as exc:
        return CredentialStatus(False, str(exc))
    if not clusters:
        return CredentialStatus(False, f"no slurm.clusters in {config_path()}")
    return CredentialStatus(True, f"Slurm clusters configured: {', '.join(sorted(clusters))}")


def kubernetes_status() -> CredentialStatus:
    """Enabled when a kubeconfig exists (`$KUBECONFIG`, else ~/.kube/config) or launcher
    runs in a pod (`KUBERNETES_SERVICE_HOST`); which contexts may create pods is
    `KubernetesCloud.check`'s business. Never raises."""
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    if os.path.exists(path):
        return CredentialStatus(True, f"kubeconfig {path}")
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return CredentialStatus(True, "in-cluster service account")
    return CredentialStatus(False, f"no kubeconfig ({path}) and not running in a pod")


_PROBES: dict[str, Callable[[], CredentialStatus]] = {
    "local": lambda: LOCAL_STATUS,
    "ssh": ssh_pools_status,
    "slurm": slurm_status,
    "kubernetes": kubernetes_status,
    "aws": _aws,
    "gcp": _gcp,
    "azure": _azure,
    "nebius": _nebius,
    "runpod": _runpod,
    "lambda": _lambda,
    "vast": _vast,
}


def credentials_present(cloud: str) -> CredentialStatus | None:
    """Whether `cloud` has credentials configured here and its SDK installed (see the
    module docstring); None for a cloud without a probe. Raises only what reading the
    config raises (ConfigError for a malformed config.yaml)."""
    probe = _PROBES.get(cloud)
    if probe is None:
        return None
    status = probe()
    if status.enabled:
        from launcher.clouds.sdk import missing_sdk

        missing = missing_sdk(cloud)
        if missing is not None:
            return CredentialStatus(False, f"{status.reason}, but {missing}")
    return status
