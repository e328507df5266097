"""`resources.health` (launcher/task/health.py): defaults, values, errors naming the field."""

from __future__ import annotations

import pytest

from launcher.errors import TaskValidationError
from launcher.task.health import HealthSpec
from launcher.task.model import Task


def _task(health: object) -> Task:
    return Task.from_dict({"run": "true", "resources": {"health": health}})


def test_default_is_none_meaning_quick() -> None:
    assert Task.from_dict({"run": "true"}).health is None


def test_values_and_round_trip() -> None:
    task = _task({"gate": "dcgm-2", "on_failure": "warn"})
    assert task.health == HealthSpec(gate="dcgm-2", burn_in="none", on_failure="warn")
    assert Task.from_dict(task.to_dict()).health == task.health
    assert _task("off").health == HealthSpec(gate="off", watch_seconds=0.0)
    assert _task(False).health == HealthSpec(gate="off", watch_seconds=0.0)
    assert _task({"gate": False}).health == HealthSpec(gate="off")  # YAML 1.1's bare off


@pytest.mark.parametrize(("value", "needle"), [
    ({"gate": "quik"}, "field 'resources.health.gate'): unknown value 'quik' — did you mean 'quick'?"),
    ({"gates": "quick"}, "resources.health"),
    ({"on_failure": "ignore"}, "resources.health.on_failure"),
    ({"burn_in": "nccl-tests"}, "resources.health.burn_in"),
    (3, "resources.health"),
])
def test_errors_name_the_field(value: object, needle: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        _task(value)
    assert needle in str(err.value)


def test_alternatives_must_agree() -> None:
    with pytest.raises(TaskValidationError, match="health"):
        Task.from_dict({"run": "true", "resources": {
            "health": {"gate": "quick"},
            "any_of": [{"cloud": "aws", "health": {"gate": "off"}}]}})


def test_cli_style_override() -> None:
    task = Task.from_dict({"run": "true"}).with_overrides(resources={"health": "off"})
    assert task.health == HealthSpec(gate="off", watch_seconds=0.0)


def test_watch_fields_defaults_values_and_round_trip() -> None:
    default = _task({"gate": "quick"}).health
    assert default is not None and default.on_failure is None
    assert (default.watch_seconds, default.hang_minutes, default.straggler_pct) == (None, 30, 20)
    assert default.watch_period("aws") == 5 and default.watch_period("local") == 0
    assert _task({"watch_seconds": 2}).health.watch_period("local") == 2  # type: ignore[union-attr]
    assert default.gate_stops and not default.watch_stops  # unset: the gate stops, the watch warns
    task = _task({"on_failure": "stop", "watch_seconds": 0.5, "hang_minutes": 0.1,
                  "straggler_pct": 25})
    assert task.health == HealthSpec(on_failure="stop", watch_seconds=0.5, hang_minutes=0.1,
                                     straggler_pct=25)
    assert task.health is not None and task.health.watch_stops
    assert Task.from_dict(task.to_dict()).health == task.health


@pytest.mark.parametrize(("value", "needle"), [
    ({"watch_seconds": "fast"}, "resources.health.watch_seconds"),
    ({"watch_seconds": 0.01}, "must be 0 (off) or at least 0.1 seconds"),
    ({"hang_minutes": -1}, "resources.health.hang_minutes"),
    ({"straggler_pct": 100}, "resources.health.straggler_pct"),
])
def test_watch_field_errors_name_the_field(value: object, needle: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        _task(value)
    assert needle in str(err.value)
