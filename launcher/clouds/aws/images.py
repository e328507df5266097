"""The machine image and the instance-type facts a launch needs.

Default images, resolved per region through AWS's public SSM parameters:
- GPU types (`GpuInfo` in describe_instance_types): the Deep Learning Base OSS Nvidia
  Driver GPU AMI, Ubuntu 22.04 (NVIDIA driver, CUDA, EFA installer and NCCL's EFA plugin);
- everything else: Canonical's Ubuntu 22.04 server image.
`req.image_id` (a task's `resources.image_id`, already resolved to the placement's
region by the optimizer when the task gave a per-region map) overrides both. The root
EBS volume is sized by `disk_size` on the image's own root device name.
Instance-type facts and image root devices are immutable and cached per region
(records.py). Blocking; raises typed CloudErrors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.clouds.aws import records
from launcher.clouds.aws.errors import CLOUD, aws_errors
from launcher.clouds.base import InvalidRequestError

GPU_AMI_PARAMETER_X86_64 = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
GPU_AMI_PARAMETER_ARM64 = (
    "/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
CPU_AMI_PARAMETER_X86_64 = (
    "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
)
CPU_AMI_PARAMETER_ARM64 = (
    "/aws/service/canonical/ubuntu/server/22.04/stable/current/arm64/hvm/ebs-gp2/ami-id"
)


@dataclass(frozen=True)
class TypeFacts:
    """What a launch needs to know about an instance type."""

    instance_type: str
    arch: str  # "x86_64" | "arm64"
    gpus: int
    max_efa_interfaces: int  # 0: no EFA
    max_network_cards: int
    spot: bool  # supports the spot market


@dataclass(frozen=True)
class Image:
    image_id: str
    root_device_name: str


def type_facts(ec2: Any, region: str, instance_type: str) -> TypeFacts:
    """Facts of `instance_type` in `region` (cached). Raises InvalidRequestError for a
    type EC2 does not know."""
    cached = (records.region_cache(region).get("types") or {}).get(instance_type)
    if isinstance(cached, dict):
        return TypeFacts(**cached)
    with aws_errors(region=region, action="instance type"):
        types = ec2.describe_instance_types(InstanceTypes=[instance_type]).get("InstanceTypes", [])
    if not types:
        raise InvalidRequestError(f"EC2 does not know instance type {instance_type!r} in {region}.",
                                  cloud=CLOUD, region=region)
    t = types[0]
    archs = t.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
    net = t.get("NetworkInfo", {})
    efa = net.get("EfaInfo", {}) if net.get("EfaSupported") else {}
    facts = TypeFacts(
        instance_type=instance_type,
        arch="arm64" if "arm64" in archs and "x86_64" not in archs else "x86_64",
        gpus=sum(int(g.get("Count", 0)) for g in t.get("GpuInfo", {}).get("Gpus", [])),
        max_efa_interfaces=int(efa.get("MaximumEfaInterfaces", 0) or 0),
        max_network_cards=int(net.get("MaximumNetworkCards", 1) or 1),
        spot="spot" in t.get("SupportedUsageClasses", ["spot"]),
    )
    types_cache = dict(records.region_cache(region).get("types") or {})
    types_cache[instance_type] = facts.__dict__
    records.update_region_cache(region, types=types_cache)
    return facts


def default_parameter(facts: TypeFacts) -> str:
    """The SSM parameter naming the default image for this type."""
    if facts.gpus:
        return GPU_AMI_PARAMETER_ARM64 if facts.arch == "arm64" else GPU_AMI_PARAMETER_X86_64
    return CPU_AMI_PARAMETER_ARM64 if facts.arch == "arm64" else CPU_AMI_PARAMETER_X86_64


def resolve_image(ec2: Any, ssm: Any, region: str, facts: TypeFacts,
                  image_id: str | None) -> Image:
    """The image to launch (`image_id`, else the default's current AMI) and its root
    device. Raises InvalidRequestError for an unknown AMI / parameter."""
    if not image_id:
        param = default_parameter(facts)
        with aws_errors(region=region, action=f"SSM parameter {param}"):
            image_id = str(ssm.get_parameter(Name=param)["Parameter"]["Value"])
    roots = dict(records.region_cache(region).get("image_roots") or {})
    root = roots.get(image_id)
    if root:
        return Image(image_id, str(root))
    with aws_errors(region=region, action=f"image {image_id}"):
        images = ec2.describe_images(ImageIds=[image_id]).get("Images", [])
    if not images:
        raise InvalidRequestError(f"InvalidAMIID.NotFound: image {image_id} not found in {region}.",
                                  cloud=CLOUD, region=region)
    root = str(images[0].get("RootDeviceName") or "/dev/sda1")
    roots[image_id] = root
    records.update_region_cache(region, image_roots=roots)
    return Image(image_id, root)
