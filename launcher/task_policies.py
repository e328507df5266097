"""Task-wide policies: checkpoint (ours), job_recovery (SkyPilot + our deadline), autostop.

`job_recovery` and `autostop` are written inside `resources:` in SkyPilot's format
but apply to the whole task; `checkpoint` is a top-level field of ours. The
parsers raise `TaskValidationError` with field path and line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from launcher.resources import format_number
from launcher.task_fields import (
    UNSUPPORTED_NOTE,
    Origin,
    Path,
    check_keys,
    describe,
    did_you_mean,
    expect_bool,
    expect_int,
    expect_list,
    expect_mapping,
    expect_str,
    parse_duration,
)

RECOVERY_STRATEGIES = ("FAILOVER", "EAGER_NEXT_REGION")
DEFAULT_AUTOSTOP_MINUTES = 5  # what `autostop: true` means (SkyPilot's default)
DEFAULT_CHECKPOINT_PATH = "~/launcher_checkpoint"
CHECKPOINT_STORE_SCHEMES = ("s3", "gs", "r2", "az", "https", "file")
_URI_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://(.*)\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    """Where a job keeps durable state.

    `path` is the directory on every node exported as LAUNCHER_CHECKPOINT_DIR
    (absolute, or relative to the node's home). `store` is the durable copy that
    outlives nodes: a bucket URI (s3://, gs://, r2://, az://, https://) or file://
    on the controller's machine; None lets the managed-jobs controller choose.
    """

    path: str = DEFAULT_CHECKPOINT_PATH
    store: str | None = None

    def to_yaml_value(self) -> dict[str, str]:
        out = {"path": self.path}
        if self.store is not None:
            out["store"] = self.store
        return out


@dataclass(frozen=True, slots=True)
class JobRecovery:
    """How a managed job recovers. `strategy` None = the controller's default.

    `recover_on_exit_codes` restart without counting against
    `max_restarts_on_errors`; `deadline_hours` asks to finish within that many
    hours of submission at least cost (ours).
    """

    strategy: str | None = None  # one of RECOVERY_STRATEGIES
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: tuple[int, ...] = ()
    deadline_hours: float | None = None

    def to_yaml_value(self) -> dict[str, object]:
        out: dict[str, object] = {"strategy": self.strategy}
        if self.max_restarts_on_errors:
            out["max_restarts_on_errors"] = self.max_restarts_on_errors
        if self.recover_on_exit_codes:
            out["recover_on_exit_codes"] = list(self.recover_on_exit_codes)
        if self.deadline_hours is not None:
            out["deadline"] = f"{format_number(self.deadline_hours)}h"
        return out


@dataclass(frozen=True, slots=True)
class AutostopSpec:
    """Stop (or with `down`, tear down) the cluster after `idle_minutes` without jobs."""

    idle_minutes: int = DEFAULT_AUTOSTOP_MINUTES
    down: bool = False

    def to_yaml_value(self) -> dict[str, object]:
        return {"idle_minutes": self.idle_minutes, "down": self.down}


def parse_checkpoint(value: object, path: Path, origin: Origin) -> CheckpointSpec | None:
    """'/ckpt' (a node path), 's3://bucket/run' (a store), or {path, store}."""
    if value is None:
        return None
    if isinstance(value, str):
        text = expect_str(value, path, origin).strip()
        if _URI_RE.match(text):
            return CheckpointSpec(store=_check_store(text, path, origin))
        return CheckpointSpec(path=_check_node_path(text, path, origin))
    mapping = expect_mapping(
        value, path, origin, "a path, a bucket URI, or a mapping {path, store}"
    )
    check_keys(mapping, path, origin, ("path", "store"))
    node_path = DEFAULT_CHECKPOINT_PATH
    if mapping.get("path") is not None:
        node_path = _check_node_path(
            expect_str(mapping["path"], path + ("path",), origin).strip(), path + ("path",), origin
        )
    store = None
    if mapping.get("store") is not None:
        store = _check_store(
            expect_str(mapping["store"], path + ("store",), origin).strip(),
            path + ("store",),
            origin,
        )
    return CheckpointSpec(node_path, store)


def _check_node_path(text: str, path: Path, origin: Origin) -> str:
    if _URI_RE.match(text):
        raise origin.error(
            path,
            f"'{text}' is a URI; the node path must be a directory path (put URIs in 'store').",
        )
    return text


def _check_store(text: str, path: Path, origin: Origin) -> str:
    match = _URI_RE.match(text)
    if match is None:
        raise origin.error(
            path,
            f"'{text}' is not a store URI; use e.g. s3://bucket/prefix, gs://bucket/prefix or file:///dir.",
        )
    scheme = match.group(1).lower()
    if scheme not in CHECKPOINT_STORE_SCHEMES:
        raise origin.error(
            path,
            f"unsupported store scheme '{scheme}://'{did_you_mean(scheme, CHECKPOINT_STORE_SCHEMES)} "
            f"(allowed: {', '.join(s + '://' for s in CHECKPOINT_STORE_SCHEMES)}).",
        )
    if not match.group(2).strip("/"):
        raise origin.error(path, f"the store '{text}' names no bucket or directory.")
    return text


def parse_job_recovery(value: object, path: Path, origin: Origin) -> JobRecovery | None:
    """'FAILOVER' or {strategy, max_restarts_on_errors, recover_on_exit_codes, deadline}."""
    if value is None:
        return None
    if isinstance(value, str):
        return JobRecovery(strategy=_parse_strategy(value, path, origin))
    mapping = expect_mapping(value, path, origin, "a strategy name or a mapping")
    check_keys(
        mapping, path, origin,
        ("strategy", "max_restarts_on_errors", "recover_on_exit_codes", "deadline"),
    )  # fmt: skip
    strategy = None
    if mapping.get("strategy") is not None:
        strategy = _parse_strategy(mapping["strategy"], path + ("strategy",), origin)
    restarts = 0
    if mapping.get("max_restarts_on_errors") is not None:
        restarts = expect_int(
            mapping["max_restarts_on_errors"], path + ("max_restarts_on_errors",), origin, minimum=0
        )
    codes = _parse_exit_codes(
        mapping.get("recover_on_exit_codes"), path + ("recover_on_exit_codes",), origin
    )
    deadline = None
    if mapping.get("deadline") is not None:
        deadline = parse_duration(
            mapping["deadline"], path + ("deadline",), origin, unit="h", example="36h"
        )
    return JobRecovery(strategy, restarts, codes, deadline)


def _parse_strategy(value: object, path: Path, origin: Origin) -> str:
    name = expect_str(value, path, origin).strip().upper().replace("-", "_")
    if name not in RECOVERY_STRATEGIES:
        raise origin.error(
            path,
            f"unknown recovery strategy '{value}'{did_you_mean(name, RECOVERY_STRATEGIES)} "
            f"(allowed: {', '.join(RECOVERY_STRATEGIES)}).",
        )
    return name


def _parse_exit_codes(value: object, path: Path, origin: Origin) -> tuple[int, ...]:
    if value is None:
        return ()
    items = expect_list(value, path, origin) if isinstance(value, list | tuple) else [value]
    codes = []
    for index, item in enumerate(items):
        where = path + (index,) if isinstance(value, list | tuple) else path
        codes.append(expect_int(item, where, origin, minimum=0, maximum=255))
    if len(set(codes)) != len(codes):
        raise origin.error(path, "lists an exit code more than once.")
    return tuple(codes)


def parse_autostop(value: object, path: Path, origin: Origin) -> AutostopSpec | None:
    """true (5 min), false (off), 10 (minutes), '1h', or {idle_minutes, down}."""
    if value is None or value is False:
        return None
    if value is True:
        return AutostopSpec()
    if isinstance(value, int | float | str):
        return AutostopSpec(idle_minutes=_idle_minutes(value, path, origin))
    mapping = expect_mapping(
        value, path, origin, "true/false, minutes, or a mapping {idle_minutes, down}"
    )
    for key in ("wait_for", "hook", "hook_timeout"):
        if key in mapping:
            raise origin.error(path + (key,), f"autostop '{key}' {UNSUPPORTED_NOTE}.")
    check_keys(mapping, path, origin, ("idle_minutes", "down"))
    minutes = DEFAULT_AUTOSTOP_MINUTES
    if mapping.get("idle_minutes") is not None:
        minutes = _idle_minutes(mapping["idle_minutes"], path + ("idle_minutes",), origin)
    down = False
    if mapping.get("down") is not None:
        down = expect_bool(mapping["down"], path + ("down",), origin)
    return AutostopSpec(minutes, down)


def _idle_minutes(value: object, path: Path, origin: Origin) -> int:
    if isinstance(value, str):
        if value.strip().isdigit():
            return int(value)
        return math.ceil(parse_duration(value, path, origin, unit="m", example="30m"))
    if isinstance(value, bool) or not isinstance(value, int):
        raise origin.error(
            path, f"expected idle minutes (a whole number) or e.g. '1h', got {describe(value)}."
        )
    return expect_int(value, path, origin, minimum=0)
