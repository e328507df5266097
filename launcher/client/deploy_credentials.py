"""Which local credential files `launcher api deploy --with-credentials C1,C2` copies to
the server's VM, and where they go there (the path the cloud's SDK reads by default).

Only the named clouds' files are copied (0600), and the deploy lists each one. A cloud
named whose files are all missing is refused before anything is provisioned. On AWS
with `aws.iam_instance_profile` configured, the VM gets that role and `aws` copies
nothing (the role is the VM's own identity).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UsageError


@dataclass(frozen=True)
class CredentialFile:
    cloud: str
    local: Path
    remote: str  # relative to the VM user's home


def _env_or(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or default).expanduser()


def _candidates(cloud: str) -> list[tuple[Path, str]]:
    """(local path, remote path) pairs `cloud` may have; missing ones are skipped."""
    if cloud == "aws":
        return [(_env_or("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), ".aws/credentials"),
                (_env_or("AWS_CONFIG_FILE", "~/.aws/config"), ".aws/config")]
    if cloud == "gcp":
        gcloud = _env_or("CLOUDSDK_CONFIG", "~/.config/gcloud")
        key = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        target = ".config/gcloud/application_default_credentials.json"
        return [(Path(key).expanduser(), target)] if key else \
            [(gcloud / "application_default_credentials.json", target)]
    if cloud == "azure":
        azure = _env_or("AZURE_CONFIG_DIR", "~/.azure")
        return [(azure / n, f".azure/{n}") for n in
                ("azureProfile.json", "msal_token_cache.json", "service_principal_entries.json",
                 "clouds.config")]
    if cloud == "lambda":
        return [(Path("~/.lambda_cloud/lambda_keys").expanduser(), ".lambda_cloud/lambda_keys")]
    if cloud == "runpod":
        return [(Path("~/.runpod/config.toml").expanduser(), ".runpod/config.toml")]
    if cloud == "vast":
        return [(Path("~/.config/vastai/vast_api_key").expanduser(), ".config/vastai/vast_api_key"),
                (Path("~/.vast_api_key").expanduser(), ".vast_api_key")]
    if cloud == "nebius":
        return [(Path("~/.nebius/config.yaml").expanduser(), ".nebius/config.yaml")]
    raise UsageError(f"--with-credentials: unknown cloud {cloud!r}; choose from "
                     f"{', '.join(CLOUDS)}.")


CLOUDS = ("aws", "gcp", "azure", "lambda", "runpod", "vast", "nebius")


def parse_clouds(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    for n in names:
        if n not in CLOUDS:
            raise UsageError(f"--with-credentials: unknown cloud {n!r}; choose from "
                             f"{', '.join(CLOUDS)}.")
    return names


def instance_profile(vm_cloud: str | None) -> str | None:
    """The AWS instance profile the VM gets (config `aws.iam_instance_profile`), if any."""
    if vm_cloud not in (None, "aws"):
        return None
    from launcher.config.settings import load_config

    aws = getattr(load_config(), "aws", None)
    return getattr(aws, "iam_instance_profile", None) or None


def credential_files(clouds: tuple[str, ...], vm_cloud: str | None) -> list[CredentialFile]:
    """The files to copy. Raises UsageError naming a cloud none of whose files exist."""
    out: list[CredentialFile] = []
    for cloud in clouds:
        if cloud == "aws" and vm_cloud == "aws" and instance_profile(vm_cloud):
            continue  # the VM's own role (the deploy says so)
        found = [(p, r) for p, r in _candidates(cloud) if p.is_file()]
        if not found:
            looked = ", ".join(str(p) for p, _ in _candidates(cloud))
            raise UsageError(f"--with-credentials {cloud}: no credential file found (looked at "
                             f"{looked}). Configure {cloud} on this machine first, or leave it "
                             "out.")
        out += [CredentialFile(cloud, p, r) for p, r in found]
    return out
