"""The OS image of a VM: `imageReference` of the ARM VM body.

Default: Microsoft's Ubuntu-HPC 22.04 image (`microsoft-dsvm:ubuntu-hpc:2204:latest`:
NVIDIA driver, CUDA, the Mellanox OFED stack for InfiniBand, no purchase plan) for GPU
and InfiniBand sizes; Canonical's Ubuntu 22.04 LTS Gen2 (arm64 for the Arm `p` sizes)
otherwise. `image_id` overrides it: a URN `publisher:offer:sku:version` (as `az vm
create --image` takes) or a resource id (`/subscriptions/.../images/...`, a gallery
image version). Anything else is an InvalidRequestError.
"""

from __future__ import annotations

import re
from typing import Any

from launcher.clouds.base import InvalidRequestError

GPU_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
CPU_IMAGE = "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest"
CPU_IMAGE_ARM64 = "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-arm64:latest"
_ARM_SIZE = re.compile(r"^Standard_[A-Z]+\d+[a-z]*p[a-z]*_v\d", re.I)


def default_image(instance_type: str, gpu: bool, infiniband: bool) -> str:
    if gpu or infiniband:
        return GPU_IMAGE
    return CPU_IMAGE_ARM64 if _ARM_SIZE.match(instance_type) else CPU_IMAGE


def image_reference(image: str, *, region: str | None = None) -> dict[str, Any]:
    """The `imageReference` for a URN or resource id. Raises InvalidRequestError."""
    if image.lower().startswith("/subscriptions/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) == 4 and all(parts):
        publisher, offer, sku, version = parts
        return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}
    raise InvalidRequestError(
        f"image_id {image!r}: expected publisher:offer:sku:version or an image resource id.",
        cloud="azure", region=region)
