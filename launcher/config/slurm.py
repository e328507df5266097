"""The `slurm:` section of `$LAUNCHER_HOME/config.yaml` (the `slurm` cloud, docs/slurm.md).

    slurm:
      clusters:
        CLUSTER:                        # a region of the `slurm` cloud
          login: login1.example.org     # where sbatch/squeue run; `localhost` runs them here
          user: alice                   # SSH user on the login node (default: yours)
          identity_file: ~/.ssh/id_ed25519
          port: 22
          host_key: ssh-ed25519 AAAA...  # the login's SSH host key (default: the entry
                                        # for it in ~/.ssh/known_hosts)
          partitions: [gpu, preempt]    # default: every partition sinfo lists
          pricing: 1.25                 # per GPU-hour, for chargeback (default 0)
          fabric:                       # per partition: Slurm does not say
            gpu: {fabric: infiniband, gbps: 400}
          provision_timeout: 600        # seconds a gang may stay PENDING (then CapacityError)
          command_timeout: 30           # seconds one sinfo/squeue/sbatch/... may take
          time_limit: 12h               # sbatch --time (whole minutes, rounded up); default:
                                        # the partition's MaxTime. A task may set its own
                                        # (`config: {slurm: {time_limit: 90m}}`)
          gpu_models:                   # per partition: the GPU an untyped `gpu:N` GRES is
            plain: A100                 # (typed GRES name it themselves: gpu:a100:4 -> A100)

Stdlib only. Malformed values raise ConfigError naming the field
(`slurm.clusters.lab.pricing`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import ConfigError

LOCALHOST = "localhost"
_CLUSTER_KEYS = ("login", "user", "identity_file", "port", "host_key", "partitions", "pricing", "fabric",
                 "provision_timeout", "gpu_models", "time_limit", "command_timeout")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class PartitionFabric:
    fabric: str
    gbps: float | None = None


@dataclass(frozen=True)
class SlurmCluster:
    """One `slurm.clusters.NAME` entry (see the module docstring)."""

    name: str
    login: str = LOCALHOST
    user: str | None = None
    identity_file: str | None = None
    port: int = 22
    host_key: str | None = None  # "ssh-ed25519 AAAA..."; None: ~/.ssh/known_hosts
    partitions: tuple[str, ...] = ()  # empty: every partition
    pricing: float = 0.0  # per GPU-hour
    fabric: dict[str, PartitionFabric] = field(default_factory=dict)
    provision_timeout: float = 600.0
    command_timeout: float = 30.0  # one Slurm command (not an srun step: those run the task)
    gpu_models: dict[str, str] = field(default_factory=dict)  # partition -> accelerator name
    # whole minutes (sbatch --time); None: the partition's MaxTime. The field a task's
    # `config: {slurm: {time_limit: ...}}` replaces (task_config.apply_overrides).
    time_limit: int | None = None

    @property
    def local(self) -> bool:
        return self.login == LOCALHOST


@dataclass(frozen=True)
class SlurmSettings:
    clusters: dict[str, SlurmCluster] = field(default_factory=dict)


def _err(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{where}': {message}")


def _text(value: Any, where: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(source, where, f"expected a non-empty string, got {value!r}.")
    return value.strip()


def _number(value: Any, where: str, source: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
            or (positive and value == 0):
        kind = "a number > 0" if positive else "a number >= 0"
        raise _err(source, where, f"expected {kind}, got {value!r}.")
    return float(value)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def time_limit_minutes(value: Any) -> int | None:
    """'90m', '12h', '1d12h', '45s' -> whole minutes, rounded up (Slurm's unit); None
    when `value` is not a positive duration with units."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().lower()
    pos, seconds = 0, 0.0
    while pos < len(text):
        m = _DURATION.match(text, pos)
        if m is None:
            return None
        seconds += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    return math.ceil(seconds / 60) if seconds > 0 else None


def _parse_time_limit(value: Any, where: str, source: str) -> int | None:
    if value is None:
        return None
    minutes = time_limit_minutes(value)
    if minutes is None:
        raise _err(source, where, f"expected a duration such as '90m', '12h' or '1d12h', got {value!r}.")
    return minutes


def _parse_fabric(body: Any, where: str, source: str) -> dict[str, PartitionFabric]:
    from launcher.task.resources import FABRICS

    if body is None:
        return {}
    if not isinstance(body, dict):
        raise _err(source, where, "expected a mapping of partition -> {fabric, gbps}.")
    out = {}
    for part, spec in body.items():
        pw = f"{where}.{part}"
        if isinstance(spec, str):
            spec = {"fabric": spec}
        if not isinstance(spec, dict):
            raise _err(source, pw, f"expected {{fabric: ..., gbps: ...}}, got {spec!r}.")
        unknown = sorted(str(k) for k in spec if k not in ("fabric", "gbps"))
        if unknown:
            raise _err(source, f"{pw}.{unknown[0]}", "unknown field (expected fabric, gbps).")
        fab = spec.get("fabric")
        if fab not in FABRICS:
            raise _err(source, f"{pw}.fabric", f"expected one of {', '.join(FABRICS)}, got {fab!r}.")
        gbps = spec.get("gbps")
        out[str(part)] = PartitionFabric(
            str(fab), None if gbps is None else _number(gbps, f"{pw}.gbps", source, positive=True)
        )
    return out


def _parse_cluster(name: str, body: Any, source: str) -> SlurmCluster:
    where = f"slurm.clusters.{name}"
    if not _NAME.match(name):
        raise _err(source, where, "cluster names use letters, digits, '.', '_' and '-'.")
    if not isinstance(body, dict):
        raise _err(source, where, "expected a mapping with at least 'login'.")
    unknown = sorted(str(k) for k in body if k not in _CLUSTER_KEYS)
    if unknown:
        raise _err(source, f"{where}.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(_CLUSTER_KEYS)}).")
    if "login" not in body:
        raise _err(source, f"{where}.login", "missing (a host name, or 'localhost').")
    login = _text(body["login"], f"{where}.login", source)
    user = _text(body["user"], f"{where}.user", source) if body.get("user") is not None else None
    ident = body.get("identity_file")
    identity = os.path.expanduser(_text(ident, f"{where}.identity_file", source)) if ident else None
    port = body.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise _err(source, f"{where}.port", f"expected a port number 1-65535, got {port!r}.")
    host_key = body.get("host_key")
    if host_key is not None:
        host_key = _text(host_key, f"{where}.host_key", source)
        if len(host_key.split()) < 2:
            raise _err(source, f"{where}.host_key",
                       f"expected '<type> <base64>' (a line of ssh-keyscan), got {host_key!r}.")
    parts_raw = body.get("partitions") or []
    if isinstance(parts_raw, str):
        parts_raw = [parts_raw]
    if not isinstance(parts_raw, list):
        raise _err(source, f"{where}.partitions", f"expected a list of partition names, got {parts_raw!r}.")
    partitions = tuple(_text(p, f"{where}.partitions[{i}]", source) for i, p in enumerate(parts_raw))
    models_raw = body.get("gpu_models") or {}
    if not isinstance(models_raw, dict):
        raise _err(source, f"{where}.gpu_models", f"expected a mapping of partition -> GPU name, got {models_raw!r}.")
    gpu_models = {str(p): _text(m, f"{where}.gpu_models.{p}", source) for p, m in models_raw.items()}
    return SlurmCluster(
        gpu_models=gpu_models, name=name, login=login, user=user, identity_file=identity, port=port,
        host_key=host_key,
        partitions=partitions,
        pricing=_number(body.get("pricing", 0), f"{where}.pricing", source, positive=False),
        fabric=_parse_fabric(body.get("fabric"), f"{where}.fabric", source),
        provision_timeout=_number(body.get("provision_timeout", 600),
                                  f"{where}.provision_timeout", source, positive=True),
        command_timeout=_number(body.get("command_timeout", 30), f"{where}.command_timeout",
                                source, positive=True),
        time_limit=_parse_time_limit(body.get("time_limit"), f"{where}.time_limit", source),
    )  # fmt: skip


def parse_slurm(body: Any, source: str) -> SlurmSettings:
    """Parse the `slurm:` mapping (None = no clusters). Raises ConfigError."""
    if body is None:
        return SlurmSettings()
    if not isinstance(body, dict):
        raise _err(source, "slurm", "expected a mapping with 'clusters'.")
    unknown = sorted(str(k) for k in body if k != "clusters")
    if unknown:
        raise _err(source, f"slurm.{unknown[0]}", "unknown field (expected clusters).")
    clusters_raw = body.get("clusters") or {}
    if not isinstance(clusters_raw, dict):
        raise _err(source, "slurm.clusters", "expected a mapping of cluster names.")
    return SlurmSettings({str(n): _parse_cluster(str(n), b, source) for n, b in clusters_raw.items()})
