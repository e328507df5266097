"""Boot images and machine-type facts.

Image: `image_id` when the task gives one (a full or partial resource path such as
`projects/P/global/images/family/F` or `projects/P/global/images/NAME`, passed as the
boot disk's sourceImage; a bare name means an image of the user's project); else the
newest image of a public family, resolved with `images.getFromFamily` (pinned per
launch, so every node of a gang boots the same image): a Deep Learning VM family
(NVIDIA driver + CUDA) for GPU machines, Ubuntu 22.04 LTS for CPU machines.

Machine type: `machineTypes.get` in the zone; a type the zone does not offer (404)
is a CapacityError for this zone (failover tries the next), like EC2's `Unsupported`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.clouds.base import CapacityError
from launcher.clouds.gcp.errors import CLOUD, gcp_errors, is_not_found
from launcher.clouds.gcp.ops import call

GPU_IMAGE = ("deeplearning-platform-release", "common-cu124-ubuntu-2204-py310")
CPU_IMAGE = ("ubuntu-os-cloud", "ubuntu-2204-lts")
# GPUs attached to N1 hosts (guestAccelerators): catalog name -> GCP accelerator type
N1_ACCELERATORS = {
    "T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80",
}


@dataclass(frozen=True)
class MachineFacts:
    name: str
    guest_cpus: int
    memory_mb: int
    accelerators: tuple[tuple[str, int], ...]  # fixed GPUs (a2/a3/g2...): (type, count)


def source_image(clients: Any, image_id: str | None, gpu: bool) -> str:
    """The boot disk's sourceImage (see the module docstring). Raises CloudError."""
    if image_id:
        if image_id.startswith(("projects/", "https://", "global/")):
            return image_id
        return f"global/images/{image_id}"
    project, family = GPU_IMAGE if gpu else CPU_IMAGE
    image = call(clients.images().get_from_family, action=f"image family {project}/{family}",
                 project=project, family=family)
    return str(image.self_link or f"projects/{project}/global/images/{image.name}")


def machine_facts(clients: Any, project: str, zone: str, machine_type: str) -> MachineFacts:
    """The type's facts in `zone`. Raises CapacityError (not offered in the zone)."""
    with gcp_errors(zone=zone, action=f"machine type {machine_type}"):
        try:
            mt = call(lambda: clients.machine_types().get(
                project=project, zone=zone, machine_type=machine_type),
                action=f"machine type {machine_type}", zone=zone)
        except CapacityError:
            raise
        except Exception as exc:
            cause = exc.__cause__ or exc
            if is_not_found(cause):
                raise CapacityError(f"{machine_type} is not offered in {zone}.", cloud=CLOUD,
                                    zone=zone) from exc
            raise
    accs = tuple((str(a.guest_accelerator_type), int(a.guest_accelerator_count))
                 for a in (getattr(mt, "accelerators", None) or []))
    return MachineFacts(str(mt.name), int(mt.guest_cpus or 0), int(mt.memory_mb or 0), accs)
