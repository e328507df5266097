"""A task's `config:` section: SkyPilot's per-task config overrides.

CONTRACT:
    parse_task_config(value, origin) -> TaskConfig   (value: the raw `config:` mapping)
    TaskConfig.notes            -- sentences for the dry run about keys with no effect here
                                   and keys planned only on their cloud
    TaskConfig.launch_refusal(cloud) -> why a launch on `cloud` is refused, or None
    TaskConfig.provider_overrides() -> {section: {key: value}} for the provisioner
    apply_overrides(settings, overrides) -> settings  (a frozen dataclass, replaced)

SkyPilot lets a task carry the keys of its `~/.sky/config.yaml` that may differ per
task (`config: {aws: {use_internal_ips: true}, docker: {run_options: [...]}}`). Every
key is one of three kinds here, from the table `CONFIG_KEYS`:

- applied: the key means the same as launcher's own setting of that name (the
  `aws:` section of launcher's config.yaml); the value is validated and handed to the
  cloud's provisioner with the request (`ProvisionRequest.settings`), which lays it
  over config.yaml's for that launch (`apply_overrides`).
- no effect here: a real SkyPilot key for something launcher does differently or does
  not run (the managed-jobs controller is a local process; there is no Kubernetes or
  GCP provisioner). Accepted, and the dry run says it has no effect, and why.
- planned only on its cloud: a key asking for something the cloud of its section
  (`gcp.enable_gpu_direct`, `azure.remote_identity`, ...) cannot give in this version.
  The task is planned (a note names the key); the plan marks that cloud's placements not
  enabled with the key and why as the reason, so a launch fails over to another cloud or
  is refused naming the key (`launch_refusal`). Values in `KeyRule.same_here` mean what
  launcher does anyway: they have no effect instead.
- refused: a SkyPilot key whose silent omission would change what the user gets
  (`aws.ssh_proxy_command`, `aws.remote_identity`, ...): an error naming the key and why.

A key in no row is an error naming it (with a close name when there is one). Pure:
no I/O, stdlib only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from launcher.task.fields import (
    Origin,
    Path,
    describe,
    did_you_mean,
    expect_bool,
    expect_mapping,
    expect_str,
    format_path,
    parse_duration,
)

Kind = Literal["applied", "no-effect", "refused", "plan-only"]
ValueType = Literal["bool", "str", "str-list", "minutes", "any"]


@dataclass(frozen=True)
class KeyRule:
    """What one `config:` key does here, and the value type of an applied key."""

    kind: Kind
    reason: str = ""
    value: ValueType = "any"
    # plan-only keys: values (upper case) that ask for what launcher does anyway.
    same_here: tuple[str, ...] = ()


_NO_K8S = ("a task's `config: kubernetes` overrides are not read: set contexts, namespace, "
           "pod_config and the rest in config.yaml's `kubernetes:` section (docs/kubernetes.md)")

# section -> key -> rule; a section mapped to a KeyRule covers every key under it.
CONFIG_KEYS: Mapping[str, Mapping[str, KeyRule] | KeyRule] = {
    "aws": {
        "use_internal_ips": KeyRule("applied", value="bool"),
        "vpc_name": KeyRule("applied", value="str"),
        "vpc_id": KeyRule("applied", value="str"),
        "security_group_name": KeyRule("applied", value="str"),
        "ssh_user": KeyRule("applied", value="str"),
        "iam_instance_profile": KeyRule("applied", value="str"),
        "labels": KeyRule("no-effect", "use resources.labels, which launcher tags every node with"),
        "remote_identity": KeyRule(
            "refused", "launcher does not manage IAM roles per task; attach one with "
            "aws.iam_instance_profile"),
        "ssh_proxy_command": KeyRule(
            "refused", "launcher reaches nodes directly (or on private IPs with "
            "aws.use_internal_ips), not through an SSH proxy"),
        "post_provision_runcmd": KeyRule(
            "refused", "launcher runs no boot-time commands; put them in 'setup'"),
        "disk_encrypted": KeyRule(
            "refused", "launcher does not choose the volume encryption; the account's EBS "
            "default applies"),
        "prioritize_reservations": KeyRule("refused", "capacity reservations are not used"),
        "specific_reservations": KeyRule("refused", "capacity reservations are not used"),
        "use_ssm": KeyRule("refused", "launcher reaches nodes over SSH, not SSM"),
    },
    "docker": {
        "run_options": KeyRule(
            "no-effect", "no provisioner in this version starts `docker:` images, so there is "
            "no container to pass options to"),
    },
    "jobs": {
        "controller": KeyRule(
            "no-effect", "the managed-jobs controller is a local process on this machine, "
            "not a cloud VM"),
        "bucket": KeyRule(
            "no-effect", "managed jobs keep their files on this machine and in the task's "
            "checkpoint store"),
    },
    "azure": {
        "use_internal_ips": KeyRule("applied", value="bool"),
        "ssh_user": KeyRule("applied", value="str"),
        "subscription_id": KeyRule("applied", value="str"),
        "resource_group_vm": KeyRule(
            "refused", "launcher creates one resource group per cluster and deletes it with "
            "the cluster; it does not launch into an existing group"),
        "storage_account": KeyRule(
            "refused", "Azure Blob storage is not supported yet (docs/azure.md)"),
        "remote_identity": KeyRule(
            "plan-only", "launcher does not manage identities per task: nodes get no managed "
            "identity and no copy of your local Azure credentials (only the keys a bucket "
            "mount needs)", same_here=("NO_UPLOAD",)),
    },
    "slurm": {
        # launcher's slurm.clusters.NAME.time_limit: sbatch --time, whole minutes
        "time_limit": KeyRule("applied", value="minutes"),
    },
    "serve": KeyRule("no-effect", "`launch` does not run SkyServe services"),
    "kubernetes": KeyRule("no-effect", _NO_K8S),
    "gcp": {
        "use_internal_ips": KeyRule("applied", value="bool"),
        "project_id": KeyRule("applied", value="str"),  # launcher's gcp.project
        "vpc_name": KeyRule("applied", value="str"),  # launcher's gcp.network
        "labels": KeyRule("no-effect", "use resources.labels, which launcher puts on every node"),
        "ssh_proxy_command": KeyRule(
            "refused", "launcher reaches nodes directly (or on private IPs with "
            "gcp.use_internal_ips), not through an SSH proxy"),
        "remote_identity": KeyRule(
            "refused", "launcher does not manage service accounts per task; nodes run as "
            "the project's default compute service account"),
        "prioritize_reservations": KeyRule("refused", "reservations are not used"),
        "specific_reservations": KeyRule("refused", "reservations are not used"),
        "managed_instance_group": KeyRule(
            "plan-only", "launcher creates GCP instances directly (one insert per node); it "
            "does not provision managed instance groups (DWS) in this version"),
        "enable_gpu_direct": KeyRule(
            "plan-only", "GPUDirect multi-node networking (TCPX/TCPXO or RDMA NICs on their "
            "own VPCs) is not provisioned by this version (launcher/clouds/gcp/limits.py, "
            "docs/gcp.md)"),
        "placement_policy": KeyRule(
            "no-effect", "launcher makes a compact placement policy for multi-node GPU "
            "gangs itself"),
        "enable_gvnic": KeyRule(
            "no-effect", "launcher's GCP instances keep the image's default network "
            "interface; gVNIC is not requested"),
    },
    "ssh": KeyRule(
        "no-effect", "SkyPilot's SSH node pools run pods (pod_config, custom_metadata); "
        "launcher's ssh cloud runs tasks on the hosts directly"),
    "vast": KeyRule("no-effect", "there is no Vast provisioner in this version (planned only)"),
    "active_workspace": KeyRule("no-effect", "launcher has no workspaces"),
    "nvidia_gpus": KeyRule("no-effect", "launcher leaves the GPU driver settings of the image as they are"),
}


@dataclass(frozen=True)
class TaskConfig:
    """The validated `config:` section: the applied keys (section -> key -> value), the
    keys accepted with no effect (dotted paths), and the section as written."""

    applied: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    no_effect: tuple[tuple[str, str], ...] = ()  # (dotted key, why it has no effect)
    raw: Mapping[str, object] = field(default_factory=dict, compare=False)
    # (dotted key, why): plan-only keys; the cloud is the key's section
    plan_only: tuple[tuple[str, str], ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """One sentence per key accepted with no effect, and per plan-only key."""
        return tuple(f"config.{key} has no effect here: {why}." for key, why in self.no_effect) + tuple(
            f"config.{key} is planned only: {why}; {key.split('.')[0]} placements are shown "
            "as not enabled, and a launch there is refused." for key, why in self.plan_only)

    def launch_refusal(self, cloud: str) -> str | None:
        """Why a launch on `cloud` is refused for this task's plan-only keys, or None."""
        whys = [f"config.{key}: {why}" for key, why in self.plan_only
                if key.split(".")[0] == cloud]
        if not whys:
            return None
        return ("the task's " + "; ".join(whys)
                + " (a SkyPilot setting this launcher cannot honour; remove it to launch here)")

    def provider_overrides(self) -> dict[str, dict[str, object]]:
        """The applied keys, section -> key -> value (copies), for a ProvisionRequest."""
        return {section: dict(keys) for section, keys in self.applied.items()}

    def to_yaml_value(self) -> dict[str, object]:
        """The section as written (so `Task.from_dict(task.to_dict())` keeps it)."""
        return dict(self.raw)


def parse_task_config(value: object, origin: Origin, path: Path = ("config",)) -> TaskConfig | None:
    """Validate a task's `config:` (None when absent). Raises TaskValidationError naming
    the key for an unknown or refused key or a value of the wrong type."""
    if value is None:
        return None
    top = expect_mapping(value, path, origin, "a mapping of config sections (aws, docker, ...)")
    applied: dict[str, dict[str, object]] = {}
    no_effect: list[tuple[str, str]] = []
    plan_only: list[tuple[str, str]] = []
    for section, body in top.items():
        where = path + (section,)
        rules = CONFIG_KEYS.get(section)
        if rules is None:
            raise origin.error(
                where,
                f"unknown config section '{section}'{did_you_mean(section, CONFIG_KEYS)} "
                f"(a task's config may set: {', '.join(sorted(CONFIG_KEYS))}).",
            )
        if isinstance(rules, KeyRule):
            no_effect.append((section, rules.reason))
            continue
        body_map = expect_mapping(body, where, origin, f"a mapping of '{section}' settings")
        for key, item in body_map.items():
            rule = rules.get(key)
            dotted = format_path((section, key))
            if rule is None:
                raise origin.error(
                    where + (key,),
                    f"unknown config key '{dotted}'{did_you_mean(key, rules)} "
                    f"(known under '{section}': {', '.join(sorted(rules))}).",
                )
            if rule.kind == "refused":
                raise origin.error(
                    where + (key,),
                    f"config key '{dotted}' is a SkyPilot setting launcher doesn't support: "
                    f"{rule.reason}.",
                )
            if rule.kind == "no-effect":
                no_effect.append((dotted, rule.reason))
                continue
            if rule.kind == "plan-only":
                if isinstance(item, str) and item.strip().upper() in rule.same_here:
                    no_effect.append((dotted, f"{item.strip()} is what launcher does anyway "
                                      f"({rule.reason})"))
                else:
                    plan_only.append((dotted, rule.reason))
                continue
            applied.setdefault(section, {})[key] = _typed(item, rule.value, where + (key,), origin)
    if "vpc_name" in applied.get("aws", {}) and "vpc_id" in applied.get("aws", {}):
        raise origin.error(path + ("aws", "vpc_id"), "set vpc_name or vpc_id, not both.")
    return TaskConfig(applied, tuple(no_effect), top, tuple(plan_only))


def _typed(value: object, kind: ValueType, path: Path, origin: Origin) -> object:
    if kind == "bool":
        return expect_bool(value, path, origin)
    if kind == "str":
        return expect_str(value, path, origin).strip()
    if kind == "minutes":  # a duration -> whole minutes, rounded up
        return math.ceil(parse_duration(value, path, origin, unit="m", example="90m"))
    if kind == "str-list":
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise origin.error(path, f"expected a list of strings, got {describe(value)}.")
        return tuple(value)
    return value


def apply_overrides(settings: Any, overrides: Mapping[str, object]) -> Any:
    """`settings` (a frozen dataclass such as launcher.config.settings.AWSSettings) with the
    fields named in `overrides` replaced; keys it has no field for are left out."""
    names = {f.name for f in dataclasses.fields(settings)}
    return dataclasses.replace(settings, **{k: v for k, v in overrides.items() if k in names})
