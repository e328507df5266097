"""The `lambda:` and `vast:` sections of `$LAUNCHER_HOME/config.yaml` (REST GPU clouds).

    lambda:                   # every key optional (docs/lambda.md)
      api_endpoint: https://cloud.lambdalabs.com/api/v1
                              # another API base URL (a proxy); LAMBDA_API_ENDPOINT also sets it
      use_internal_ips: false # reach nodes on their private IPs (VPN) instead of public ones
      ssh_user: ubuntu        # the login user of Lambda's images

    vast:                     # every key optional (docs/vast.md)
      api_endpoint: https://console.vast.ai/api/v0
                              # another API base URL; VAST_API_ENDPOINT also sets it
      ssh_user: root          # the login user of the container
      image: vastai/base-image:cuda-12.4.1-auto   # default image when the task names none
      disk_gb: 32             # default disk when the task names none

Stdlib only. Malformed values raise ConfigError naming the field (`lambda.ssh_user`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from launcher.errors import ConfigError

LAMBDA_ENDPOINT = "https://cloud.lambdalabs.com/api/v1"
VAST_ENDPOINT = "https://console.vast.ai/api/v0"
LAMBDA_KEYS = ("api_endpoint", "use_internal_ips", "ssh_user")
VAST_KEYS = ("api_endpoint", "ssh_user", "image", "disk_gb")


@dataclass(frozen=True)
class LambdaSettings:
    """The `lambda:` section (see the module docstring)."""

    api_endpoint: str | None = None
    use_internal_ips: bool = False
    ssh_user: str = "ubuntu"

    def endpoint(self) -> str:
        """The setting, else LAMBDA_API_ENDPOINT, else Lambda's public API."""
        value = self.api_endpoint or os.environ.get("LAMBDA_API_ENDPOINT") or LAMBDA_ENDPOINT
        return value.rstrip("/")


@dataclass(frozen=True)
class VastSettings:
    """The `vast:` section (see the module docstring)."""

    api_endpoint: str | None = None
    ssh_user: str = "root"
    image: str = "vastai/base-image:cuda-12.4.1-auto"
    disk_gb: int = 32

    def endpoint(self) -> str:
        """The setting, else VAST_API_ENDPOINT, else Vast's public API."""
        value = self.api_endpoint or os.environ.get("VAST_API_ENDPOINT") or VAST_ENDPOINT
        return value.rstrip("/")


def _err(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{where}': {message}")


def _mapping(body: Any, section: str, keys: tuple[str, ...], source: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _err(source, section, f"expected a mapping ({', '.join(keys)}).")
    unknown = sorted(str(k) for k in body if k not in keys)
    if unknown:
        raise _err(source, f"{section}.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(keys)}).")
    return body


def _str(body: dict[str, Any], section: str, key: str, source: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _err(source, f"{section}.{key}", f"expected a non-empty string, got {value!r}.")
    if key == "api_endpoint" and not value.startswith(("http://", "https://")):
        raise _err(source, f"{section}.{key}", f"expected an http(s) URL, got {value!r}.")
    return value


def parse_lambda(body: Any, source: str) -> LambdaSettings:
    """Parse the `lambda:` mapping (None = defaults). Raises ConfigError."""
    if body is None:
        return LambdaSettings()
    body = _mapping(body, "lambda", LAMBDA_KEYS, source)
    internal = body.get("use_internal_ips", False)
    if not isinstance(internal, bool):
        raise _err(source, "lambda.use_internal_ips", f"expected true or false, got {internal!r}.")
    return LambdaSettings(api_endpoint=_str(body, "lambda", "api_endpoint", source),
                          use_internal_ips=internal,
                          ssh_user=_str(body, "lambda", "ssh_user", source) or "ubuntu")


def parse_vast(body: Any, source: str) -> VastSettings:
    """Parse the `vast:` mapping (None = defaults). Raises ConfigError."""
    if body is None:
        return VastSettings()
    body = _mapping(body, "vast", VAST_KEYS, source)
    disk = body.get("disk_gb", 32)
    if not isinstance(disk, int) or isinstance(disk, bool) or disk < 1:
        raise _err(source, "vast.disk_gb", f"expected a positive integer, got {disk!r}.")
    return VastSettings(api_endpoint=_str(body, "vast", "api_endpoint", source),
                        ssh_user=_str(body, "vast", "ssh_user", source) or "root",
                        image=_str(body, "vast", "image", source) or VastSettings.image,
                        disk_gb=disk)
