"""The `runpod:` section of `$LAUNCHER_HOME/config.yaml` (how the `runpod` cloud provisions).

    runpod:                  # every key optional (docs/runpod.md)
      api_endpoint: https://api.runpod.io/graphql
                                # RunPod's GraphQL endpoint (a proxy, a test fake);
                                # RUNPOD_API_BASE_URL (runpod-python's variable, without
                                # /graphql) also sets it
      image: runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04
                                # the container image of every pod (task image_id wins)
      container_disk_gb: 50     # the pod's container disk (task disk_size wins)
      volume_gb: 0              # a pod volume at /workspace (deleted with the pod)
      bid_margin: 0.0           # spot: bid = the offer's spot price per GPU x (1 + margin)

Stdlib only. Malformed values raise ConfigError naming the field (`runpod.volume_gb`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from launcher.errors import ConfigError

DEFAULT_ENDPOINT = "https://api.runpod.io/graphql"
DEFAULT_IMAGE = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
RUNPOD_KEYS = ("api_endpoint", "image", "container_disk_gb", "volume_gb", "bid_margin")


@dataclass(frozen=True)
class RunPodSettings:
    """The `runpod:` section (see the module docstring)."""

    api_endpoint: str | None = None
    image: str = DEFAULT_IMAGE
    container_disk_gb: int = 50
    volume_gb: int = 0
    bid_margin: float = 0.0

    def endpoint(self) -> str:
        """The GraphQL URL: the setting, else $RUNPOD_API_BASE_URL/graphql, else public."""
        if self.api_endpoint:
            return self.api_endpoint.rstrip("/")
        base = os.environ.get("RUNPOD_API_BASE_URL")
        return f"{base.rstrip('/')}/graphql" if base else DEFAULT_ENDPOINT


def _err(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{where}': {message}")


def parse_runpod(body: Any, source: str) -> RunPodSettings:
    """Parse the `runpod:` mapping (None = defaults). Raises ConfigError."""
    if body is None:
        return RunPodSettings()
    if not isinstance(body, dict):
        raise _err(source, "runpod", "expected a mapping (api_endpoint, image, ...).")
    unknown = sorted(str(k) for k in body if k not in RUNPOD_KEYS)
    if unknown:
        raise _err(source, f"runpod.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(RUNPOD_KEYS)}).")
    endpoint = body.get("api_endpoint")
    if endpoint is not None and (not isinstance(endpoint, str)
                                 or not endpoint.startswith(("http://", "https://"))):
        raise _err(source, "runpod.api_endpoint", f"expected an http(s) URL, got {endpoint!r}.")
    image = body.get("image", DEFAULT_IMAGE)
    if not isinstance(image, str) or not image:
        raise _err(source, "runpod.image", f"expected an image name, got {image!r}.")

    def number(key: str, default: float, integer: bool) -> Any:
        value = body.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
                or (integer and not float(value).is_integer()):
            kind = "a whole number >= 0" if integer else "a number >= 0"
            raise _err(source, f"runpod.{key}", f"expected {kind}, got {value!r}.")
        return int(value) if integer else float(value)

    return RunPodSettings(api_endpoint=endpoint, image=image,
                          container_disk_gb=number("container_disk_gb", 50, True),
                          volume_gb=number("volume_gb", 0, True),
                          bid_margin=number("bid_margin", 0.0, False))
