"""The `kubernetes:` section of `$LAUNCHER_HOME/config.yaml` (the `kubernetes` cloud,
docs/kubernetes.md).

    kubernetes:
      allowed_contexts: [gke-a, coreweave]  # kubeconfig contexts to use, in failover order
                                            # (default: the kubeconfig's current context)
      pricing: 1.5                  # per GPU-hour, for chargeback (default 0)
      provision_timeout: 600        # seconds a gang may stay unschedulable (then rolled back)
      image: ubuntu:22.04           # the pods' image (sshd is installed when it lacks one)
      kueue: {local_queue_name: team-a}   # gangs queue through Kueue (SkyPilot's key)
      contexts:                     # per-context overrides of the defaults above, and:
        gke-a:
          namespace: ml             # default: the context's namespace, else "default"
          service_account: launcher
          priority_class: high
          pod_config: {spec: {nodeSelector: {pool: a}}}   # merged into every pod
          image: ghcr.io/acme/train:latest
          pricing: 2.0
          provision_timeout: 120
          kueue: {local_queue_name: gke-queue}   # null: no Kueue in this context

Stdlib only. Malformed values raise ConfigError naming the field
(`kubernetes.contexts.gke-a.pricing`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import ConfigError

DEFAULT_IMAGE = "ubuntu:22.04"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_TOP_KEYS = ("allowed_contexts", "pricing", "provision_timeout", "image", "kueue", "contexts")
_CTX_KEYS = ("namespace", "service_account", "priority_class", "pod_config", "image", "pricing",
             "provision_timeout", "kueue")


@dataclass(frozen=True)
class ContextSettings:
    """What a pod launched in one context gets (the section's defaults filled in)."""

    namespace: str | None = None  # None: the kubeconfig context's namespace, else "default"
    service_account: str | None = None
    priority_class: str | None = None
    pod_config: dict[str, Any] = field(default_factory=dict)
    image: str = DEFAULT_IMAGE
    pricing: float = 0.0  # per GPU-hour
    provision_timeout: float = 600.0
    kueue_queue: str | None = None  # Kueue's LocalQueue the gangs go through (None: no Kueue)


@dataclass(frozen=True)
class KubernetesSettings:
    allowed_contexts: tuple[str, ...] = ()  # empty: the kubeconfig's current context
    pricing: float = 0.0
    provision_timeout: float = 600.0
    image: str = DEFAULT_IMAGE
    kueue_queue: str | None = None
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)  # raw, validated

    def for_context(self, name: str) -> ContextSettings:
        """The settings of context `name` (its overrides over the section's defaults)."""
        o = self.contexts.get(name, {})
        return ContextSettings(
            namespace=o.get("namespace"), service_account=o.get("service_account"),
            priority_class=o.get("priority_class"), pod_config=dict(o.get("pod_config") or {}),
            image=o.get("image", self.image), pricing=float(o.get("pricing", self.pricing)),
            provision_timeout=float(o.get("provision_timeout", self.provision_timeout)),
            kueue_queue=o.get("kueue", self.kueue_queue),
        )  # fmt: skip


def _err(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{where}': {message}")


def _number(value: Any, where: str, source: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
            or (positive and value == 0):
        kind = "a number > 0" if positive else "a number >= 0"
        raise _err(source, where, f"expected {kind}, got {value!r}.")
    return float(value)


def _text(value: Any, where: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(source, where, f"expected a non-empty string, got {value!r}.")
    return value.strip()


def _kueue(body: Any, where: str, source: str) -> str | None:
    """`kueue: {local_queue_name: Q}` -> Q; null -> None (no Kueue)."""
    if body is None:
        return None
    if not isinstance(body, dict) or set(body) - {"local_queue_name"}:
        raise _err(source, where, "expected {local_queue_name: NAME} (Kueue's LocalQueue in the "
                                  "namespace), or null.")
    name = _text(body.get("local_queue_name"), f"{where}.local_queue_name", source)
    if not _DNS_LABEL.match(name):
        raise _err(source, f"{where}.local_queue_name",
                   f"{name!r} is not a LocalQueue name (lowercase letters, digits and '-').")
    return name


def _context(name: str, body: Any, source: str) -> dict[str, Any]:
    where = f"kubernetes.contexts.{name}"
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise _err(source, where, f"expected a mapping ({', '.join(_CTX_KEYS)}).")
    unknown = sorted(str(k) for k in body if k not in _CTX_KEYS)
    if unknown:
        raise _err(source, f"{where}.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(_CTX_KEYS)}).")
    out: dict[str, Any] = {}
    for key in ("namespace", "service_account", "priority_class", "image"):
        if body.get(key) is not None:
            out[key] = _text(body[key], f"{where}.{key}", source)
    if body.get("pod_config") is not None:
        if not isinstance(body["pod_config"], dict):
            raise _err(source, f"{where}.pod_config",
                       "expected a mapping merged into each pod (e.g. {spec: {nodeSelector: ...}}).")
        out["pod_config"] = body["pod_config"]
    if "pricing" in body:
        out["pricing"] = _number(body["pricing"], f"{where}.pricing", source, positive=False)
    if "provision_timeout" in body:
        out["provision_timeout"] = _number(body["provision_timeout"], f"{where}.provision_timeout",
                                           source, positive=True)
    if "kueue" in body:
        out["kueue"] = _kueue(body["kueue"], f"{where}.kueue", source)
    return out


def parse_kubernetes(body: Any, source: str) -> KubernetesSettings:
    """Parse the `kubernetes:` mapping (None = defaults). Raises ConfigError."""
    if body is None:
        return KubernetesSettings()
    if not isinstance(body, dict):
        raise _err(source, "kubernetes", f"expected a mapping ({', '.join(_TOP_KEYS)}).")
    unknown = sorted(str(k) for k in body if k not in _TOP_KEYS)
    if unknown:
        raise _err(source, f"kubernetes.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(_TOP_KEYS)}).")
    allowed = body.get("allowed_contexts") or []
    if isinstance(allowed, str):
        allowed = [allowed]
    if not isinstance(allowed, list):
        raise _err(source, "kubernetes.allowed_contexts", f"expected a list of context names, got {allowed!r}.")
    names = tuple(_text(c, f"kubernetes.allowed_contexts[{i}]", source) for i, c in enumerate(allowed))
    ctx_raw = body.get("contexts") or {}
    if not isinstance(ctx_raw, dict):
        raise _err(source, "kubernetes.contexts", "expected a mapping of context names.")
    return KubernetesSettings(
        allowed_contexts=names,
        pricing=_number(body.get("pricing", 0), "kubernetes.pricing", source, positive=False),
        provision_timeout=_number(body.get("provision_timeout", 600), "kubernetes.provision_timeout",
                                  source, positive=True),
        image=_text(body["image"], "kubernetes.image", source) if body.get("image") is not None
        else DEFAULT_IMAGE,
        kueue_queue=_kueue(body.get("kueue"), "kubernetes.kueue", source),
        contexts={str(n): _context(str(n), b, source) for n, b in ctx_raw.items()},
    )
