"""`resources.health`: the node health gate before setup (docs/health.md).

    resources:
      health:
        gate: quick        # quick | dcgm-1 | dcgm-2 | off (default quick)
        burn_in: none      # none | nccl (nccl: not built yet, refused by name)
        on_failure: stop   # stop | warn (default stop)

`health: off` (or false) is short for `{gate: off}`. Task-wide like `autostop`: given in
the base or an alternative, it must agree everywhere. The parser raises
TaskValidationError naming the field path and line.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.task.fields import (
    Origin,
    Path,
    check_keys,
    describe,
    did_you_mean,
    expect_mapping,
)

GATES = ("quick", "dcgm-1", "dcgm-2", "off")
BURN_INS = ("none", "nccl")
ON_FAILURE = ("stop", "warn")


@dataclass(frozen=True, slots=True)
class HealthSpec:
    """What the health gate runs on every node before setup, and what a failure does:
    `stop` fails provisioning (a managed job replaces the node), `warn` records it and
    goes on."""

    gate: str = "quick"
    burn_in: str = "none"
    on_failure: str = "stop"

    def to_yaml_value(self) -> dict[str, str]:
        return {"gate": self.gate, "burn_in": self.burn_in, "on_failure": self.on_failure}


DEFAULT_HEALTH = HealthSpec()


def parse_health(value: object, path: Path, origin: Origin) -> HealthSpec | None:
    """None (not given), `off`/false, or a mapping {gate, burn_in, on_failure}."""
    if value is None:
        return None
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return HealthSpec(gate="off")
    mapping = expect_mapping(value, path, origin, "'off' or a mapping {gate, burn_in, on_failure}")
    check_keys(mapping, path, origin, ("gate", "burn_in", "on_failure"))
    gate = _choice(mapping.get("gate", "quick"), GATES, path + ("gate",), origin)
    burn_in = _choice(mapping.get("burn_in", "none"), BURN_INS, path + ("burn_in",), origin)
    if burn_in == "nccl":
        raise origin.error(
            path + ("burn_in",),
            "the NCCL burn-in is not built yet (docs/health.md); use 'none'.",
        )
    on_failure = _choice(mapping.get("on_failure", "stop"), ON_FAILURE,
                         path + ("on_failure",), origin)
    return HealthSpec(gate, burn_in, on_failure)


def _choice(value: object, allowed: tuple[str, ...], path: Path, origin: Origin) -> str:
    if value is False and "off" in allowed:  # YAML 1.1 reads a bare `off` as false
        return "off"
    if not isinstance(value, str):
        raise origin.error(path, f"expected one of {', '.join(allowed)}, got {describe(value)}.")
    text = value.strip().lower()
    if text not in allowed:
        raise origin.error(
            path, f"unknown value '{value}'{did_you_mean(text, allowed)} "
            f"(allowed: {', '.join(allowed)}).")
    return text
