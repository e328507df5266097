"""Task-wide policies: checkpoint (ours), job_recovery (SkyPilot + our deadline), autostop.

`job_recovery` and `autostop` are written inside `resources:` in SkyPilot's format
but apply to the whole task; `checkpoint` is a top-level field of ours. The
parsers raise `TaskValidationError` with field path and line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from launcher.task.fields import (
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
from launcher.task.resources import format_number

RECOVERY_STRATEGIES = ("FAILOVER", "EAGER_NEXT_REGION", "DEADLINE")
# SkyPilot's elastic strategy (recover with at least `min_nodes` of the gang): read as
# FAILOVER, which always recovers the whole gang (stricter, never looser), with a note.
ELASTIC_STRATEGY = "DYNAMIC_NODE_SET"
DEADLINE_STRATEGY = "DEADLINE"
PROGRESS_MODES = ("wall", "reported")
# The restart overhead assumed before the job has any history of its own (provisioning +
# setup + the work since the last checkpoint), when `restart_overhead` is not given.
DEFAULT_RESTART_OVERHEAD_S = 600.0
_DEADLINE_KEYS = ("deadline", "duration", "restart_overhead", "progress", "policy")
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
    `max_restarts_on_errors`.

    The DEADLINE strategy (ours, see docs/managed-jobs.md) finishes the job by a deadline at
    least cost, moving between spot and on-demand: `deadline_hours` after submission or
    `deadline_at` (an absolute epoch time; exactly one of the two), `duration_hours` (the
    work the job needs on a healthy gang), `restart_overhead_minutes` (None: estimated from
    the job's history, `DEFAULT_RESTART_OVERHEAD_S` before it has any), `progress` ("wall":
    healthy running time; "reported": the job's LAUNCHER_PROGRESS reports) and `policy` (a
    launcher.spot policy name, None = the default). These fields are refused with any other
    strategy.
    """

    strategy: str | None = None  # one of RECOVERY_STRATEGIES
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: tuple[int, ...] = ()
    deadline_hours: float | None = None
    deadline_at: float | None = None  # epoch seconds (an absolute deadline)
    duration_hours: float | None = None
    restart_overhead_minutes: float | None = None
    progress: str = "wall"
    policy: str | None = None
    # SkyPilot's elastic recovery as written (DYNAMIC_NODE_SET / min_nodes): accepted, and
    # the whole gang is recovered anyway (see `notes`).
    elastic: bool = False
    min_nodes: int | None = None

    @property
    def is_deadline(self) -> bool:
        return self.strategy == DEADLINE_STRATEGY

    @property
    def notes(self) -> tuple[str, ...]:
        """A sentence for the dry run when SkyPilot's elastic recovery was asked for."""
        if not self.elastic and self.min_nodes is None:
            return ()
        asked = (f"job_recovery.min_nodes: {self.min_nodes}" if self.min_nodes is not None
                 else f"job_recovery.strategy: {ELASTIC_STRATEGY}")
        return (f"{asked} accepted: launcher always recovers the whole gang (every node of "
                "num_nodes, with the FAILOVER strategy), so a recovery never continues on "
                "fewer nodes; this is stricter than SkyPilot's elastic recovery, never looser.",)

    def to_yaml_value(self) -> dict[str, object]:
        out: dict[str, object] = {"strategy": ELASTIC_STRATEGY if self.elastic else self.strategy}
        if self.min_nodes is not None:
            out["min_nodes"] = self.min_nodes
        if self.max_restarts_on_errors:
            out["max_restarts_on_errors"] = self.max_restarts_on_errors
        if self.recover_on_exit_codes:
            out["recover_on_exit_codes"] = list(self.recover_on_exit_codes)
        if self.deadline_hours is not None:
            out["deadline"] = f"{format_number(self.deadline_hours)}h"
        if self.deadline_at is not None:
            out["deadline"] = format_deadline_at(self.deadline_at)
        if self.duration_hours is not None:
            out["duration"] = f"{format_number(self.duration_hours)}h"
        if self.restart_overhead_minutes is not None:
            out["restart_overhead"] = f"{format_number(self.restart_overhead_minutes)}m"
        if self.is_deadline:
            out["progress"] = self.progress
        if self.policy is not None:
            out["policy"] = self.policy
        return out


def span_text(hours: float) -> str:
    """A span for messages: '10 min', '1.5 h', '36 h' (minutes below an hour)."""
    if hours < 1:
        return f"{round(hours * 60, 1):g} min"
    return f"{round(hours, 2):g} h"


def format_deadline_at(epoch: float) -> str:
    """An absolute deadline as ISO 8601 UTC ('2026-11-27T18:00:00.5+00:00' keeps fractions)."""
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


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
    """'FAILOVER' or {strategy, max_restarts_on_errors, recover_on_exit_codes} or, for the
    deadline strategy, {strategy: deadline, deadline, duration, restart_overhead, progress,
    policy}."""
    if value is None:
        return None
    if isinstance(value, str):
        name = _parse_strategy(value, path, origin)
        if name == ELASTIC_STRATEGY:
            return JobRecovery(strategy="FAILOVER", elastic=True)
        if name == DEADLINE_STRATEGY:
            raise origin.error(path + ("deadline",), "the deadline strategy needs a mapping "
                               "{strategy: deadline, deadline: 36h, duration: 24h}.")
        return JobRecovery(strategy=name)
    mapping = expect_mapping(value, path, origin, "a strategy name or a mapping")
    check_keys(
        mapping, path, origin,
        ("strategy", "max_restarts_on_errors", "recover_on_exit_codes", "min_nodes",
         *_DEADLINE_KEYS),
    )  # fmt: skip
    strategy: str | None = None
    elastic = False
    if mapping.get("strategy") is not None:
        strategy = _parse_strategy(mapping["strategy"], path + ("strategy",), origin)
        if strategy == ELASTIC_STRATEGY:
            strategy, elastic = "FAILOVER", True
    min_nodes = None
    if mapping.get("min_nodes") is not None:
        if strategy == DEADLINE_STRATEGY:
            raise origin.error(path + ("min_nodes",), "'min_nodes' (SkyPilot's elastic "
                               "recovery) does not apply to the deadline strategy.")
        min_nodes = expect_int(mapping["min_nodes"], path + ("min_nodes",), origin, minimum=1)
    restarts = 0
    if mapping.get("max_restarts_on_errors") is not None:
        restarts = expect_int(
            mapping["max_restarts_on_errors"], path + ("max_restarts_on_errors",), origin, minimum=0
        )
    codes = _parse_exit_codes(
        mapping.get("recover_on_exit_codes"), path + ("recover_on_exit_codes",), origin
    )
    if strategy != DEADLINE_STRATEGY:
        for key in _DEADLINE_KEYS:
            if mapping.get(key) is not None:
                raise origin.error(
                    path + (key,), f"'{key}' applies only to the deadline strategy; add "
                    "'strategy: deadline' (and 'deadline' and 'duration'), or remove it.")
        return JobRecovery(strategy, restarts, codes, elastic=elastic, min_nodes=min_nodes)
    return _parse_deadline(mapping, path, origin, restarts, codes)


def _parse_deadline(mapping: dict[str, object], path: Path, origin: Origin, restarts: int,
                    codes: tuple[int, ...]) -> JobRecovery:
    if mapping.get("deadline") is None:
        raise origin.error(path + ("deadline",), "the deadline strategy needs 'deadline': hours "
                           "after submission (e.g. 36h) or an absolute time with a timezone "
                           "(e.g. '2026-11-27T18:00Z').")
    if mapping.get("duration") is None:
        raise origin.error(path + ("duration",), "the deadline strategy needs 'duration': the "
                           "work the job needs on a healthy gang (e.g. 24h).")
    hours: float | None = None
    at: float | None = None
    raw = mapping["deadline"]
    if isinstance(raw, str) and _ISO_RE.match(raw.strip()):
        at = _parse_iso(raw.strip(), path + ("deadline",), origin)
    elif isinstance(raw, dt_types()):
        at = _parse_iso(str(raw), path + ("deadline",), origin)
    else:
        hours = parse_duration(raw, path + ("deadline",), origin, unit="h", example="36h")
    duration = parse_duration(mapping["duration"], path + ("duration",), origin, unit="h",
                              example="24h")
    overhead = None
    if mapping.get("restart_overhead") is not None:
        overhead = parse_duration(mapping["restart_overhead"], path + ("restart_overhead",),
                                  origin, unit="m", example="15m")
    progress = "wall"
    if mapping.get("progress") is not None:
        progress = expect_str(mapping["progress"], path + ("progress",), origin).strip().lower()
        if progress not in PROGRESS_MODES:
            raise origin.error(path + ("progress",), f"unknown progress source '{progress}'"
                               f"{did_you_mean(progress, PROGRESS_MODES)} (allowed: "
                               f"{', '.join(PROGRESS_MODES)}).")
    policy = None
    if mapping.get("policy") is not None:
        policy = expect_str(mapping["policy"], path + ("policy",), origin).strip()
        from launcher.spot.policy import policy_by_name

        try:
            policy_by_name(policy)
        except ValueError as exc:
            raise origin.error(path + ("policy",), f"{exc}.") from None
    if hours is not None:
        over_h = (overhead if overhead is not None else DEFAULT_RESTART_OVERHEAD_S / 60) / 60
        if duration + over_h > hours:
            raise origin.error(
                path + ("deadline",),
                f"a deadline of {span_text(hours)} cannot be met even on on-demand: the "
                f"job needs {span_text(duration)} of work plus a restart overhead of "
                f"{span_text(over_h)}"
                + ("" if overhead is not None else " (the default; set 'restart_overhead')")
                + ".")
    return JobRecovery(DEADLINE_STRATEGY, restarts, codes, hours, at, duration, overhead,
                       progress, policy)


_ISO_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]")


def dt_types() -> tuple[type, ...]:
    """YAML loads an unquoted ISO timestamp as a datetime (or a date)."""
    import datetime as dt

    return (dt.datetime, dt.date)


def _parse_iso(text: str, path: Path, origin: Origin) -> float:
    """An absolute time with a timezone ('2026-11-27T18:00Z', '...+02:00') -> epoch."""
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise origin.error(path, f"'{text}' is not an ISO 8601 time such as "
                           "'2026-11-27T18:00Z'.") from None
    if when.tzinfo is None:
        raise origin.error(path, f"'{text}' has no timezone; add one, e.g. "
                           f"'{text}Z' (UTC) or '{text}+02:00'.")
    return when.timestamp()


def _parse_strategy(value: object, path: Path, origin: Origin) -> str:
    name = expect_str(value, path, origin).strip().upper().replace("-", "_")
    if name == ELASTIC_STRATEGY:
        return name
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
