"""`resources.health`: the node health gate before setup and the watch while the job
runs (docs/health.md).

    resources:
      health:
        gate: quick          # quick | dcgm-1 | dcgm-2 | off (default quick)
        burn_in: none        # none | nccl (an all_reduce_perf across a multi-node gang)
        on_failure: stop     # stop | warn (unset: the gate stops, the watch warns)
        watch_seconds: 5     # the watch's sampling period; 0 turns the watch off (unset:
                             # 5, or off on the local cloud, whose GPUs are simulated)
        hang_minutes: 30     # no output and ~0% GPU utilization on every rank this long
        straggler_pct: 20    # a rank this far behind the others' progress is a straggler

`health: off` (or false) is short for `{gate: off, watch_seconds: 0}`. Task-wide like
`autostop`: given in
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

DEFAULT_WATCH_S = 5.0
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
    on_failure: str | None = None  # None: the gate stops, the watch only warns
    watch_seconds: float | None = None  # None: 5 s, off on the local cloud
    hang_minutes: float = 30.0
    straggler_pct: float = 20.0

    @property
    def gate_stops(self) -> bool:
        """Whether a node failing the gate fails the launch (unset on_failure: yes)."""
        return self.on_failure != "warn"

    def watch_period(self, cloud: str) -> float:
        """The watch's sampling period on `cloud` in seconds; 0 = no watch."""
        if self.watch_seconds is not None:
            return self.watch_seconds
        return 0.0 if cloud == "local" else DEFAULT_WATCH_S

    @property
    def watch_stops(self) -> bool:
        """Whether a finding of the watch SIGTERMs a plain cluster's job (only when asked)."""
        return self.on_failure == "stop"

    def to_yaml_value(self) -> dict[str, object]:
        out: dict[str, object] = {"gate": self.gate, "burn_in": self.burn_in}
        if self.on_failure is not None:
            out["on_failure"] = self.on_failure
        if self.watch_seconds is not None:
            out["watch_seconds"] = self.watch_seconds
        if (self.hang_minutes, self.straggler_pct) != (30.0, 20.0):
            out.update(hang_minutes=self.hang_minutes, straggler_pct=self.straggler_pct)
        return out


DEFAULT_HEALTH = HealthSpec()


def parse_health(value: object, path: Path, origin: Origin) -> HealthSpec | None:
    """None (not given), `off`/false, or a mapping {gate, burn_in, on_failure}."""
    if value is None:
        return None
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return HealthSpec(gate="off", watch_seconds=0.0)  # the gate and the watch
    mapping = expect_mapping(value, path, origin, "'off' or a mapping {gate, burn_in, on_failure, "
                             "watch_seconds, hang_minutes, straggler_pct}")
    check_keys(mapping, path, origin, ("gate", "burn_in", "on_failure", "watch_seconds",
                                       "hang_minutes", "straggler_pct"))
    gate = _choice(mapping.get("gate", "quick"), GATES, path + ("gate",), origin)
    burn_in = _choice(mapping.get("burn_in", "none"), BURN_INS, path + ("burn_in",), origin)
    on_failure = None
    if mapping.get("on_failure") is not None:
        on_failure = _choice(mapping["on_failure"], ON_FAILURE, path + ("on_failure",), origin)
    watch = mapping.get("watch_seconds")
    if watch is not None:
        watch = _number(watch, path + ("watch_seconds",), origin, 0.0)
    if watch is not None and 0 < watch < 0.1:
        raise origin.error(path + ("watch_seconds",),
                           f"must be 0 (off) or at least 0.1 seconds, got {watch:g}.")
    hang = _number(mapping.get("hang_minutes", 30.0), path + ("hang_minutes",), origin, 0.0)
    pct = _number(mapping.get("straggler_pct", 20.0), path + ("straggler_pct",), origin, 0.0)
    if pct >= 100:
        raise origin.error(path + ("straggler_pct",), f"must be below 100, got {pct:g}.")
    return HealthSpec(gate, burn_in, on_failure, watch, hang, pct)


def _number(value: object, path: Path, origin: Origin, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise origin.error(path, f"expected a number, got {describe(value)}.")
    if value < minimum:
        raise origin.error(path, f"must be at least {minimum:g}, got {value:g}.")
    return float(value)


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
