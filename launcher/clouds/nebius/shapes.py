"""Catalog instance types -> Nebius platform + preset; cloud-init; resource names.

The catalog (SkyPilot's nebius/vms.csv layout) names a Nebius VM shape
`<platform>_<preset>`, e.g. `gpu-h100-sxm_8gpu-128vcpu-1600gb` = platform `gpu-h100-sxm`,
preset `8gpu-128vcpu-1600gb` (the two fields of `ResourcesSpec`). GPU platforms boot the
`nebius.image_family` image (drivers and CUDA preinstalled), others `cpu_image_family`.
"""

from __future__ import annotations

import json

from launcher.clouds.base import InvalidRequestError

CLUSTER_LABEL = "launcher-cluster"
RANK_LABEL = "launcher-rank"


def platform_preset(instance_type: str) -> tuple[str, str]:
    """('gpu-h100-sxm', '8gpu-128vcpu-1600gb') for 'gpu-h100-sxm_8gpu-128vcpu-1600gb'.
    Raises InvalidRequestError for a name without both parts."""
    platform, sep, preset = instance_type.partition("_")
    if not sep or not platform or not preset:
        raise InvalidRequestError(
            f"Nebius instance type {instance_type!r} is not <platform>_<preset> "
            "(e.g. gpu-h100-sxm_8gpu-128vcpu-1600gb).", cloud="nebius")
    return platform, preset


def is_gpu_platform(platform: str) -> bool:
    return platform.startswith("gpu-")


def instance_name(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}"


def disk_name(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}-boot"


def gpu_cluster_name(cluster: str) -> str:
    return f"{cluster}-ib"


def user_data(user: str, public_key: str) -> str:
    """cloud-init user data creating `user` (passwordless sudo) with `public_key`."""
    body = {"users": [{"name": user, "sudo": "ALL=(ALL) NOPASSWD:ALL",
                       "shell": "/bin/bash", "ssh_authorized_keys": [public_key.strip()]}]}
    return "#cloud-config\n" + json.dumps(body) + "\n"
