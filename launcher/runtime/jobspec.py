"""The job types shared by the head-node agent and its client, and their JSON shape.

The agent (`agent.py`) is a stdlib-only script that must not import `launcher`,
so it keeps its own copy of these shapes. The JSON produced by `to_json()` here
is exactly what the agent reads, and what the agent prints is what
`from_json()` here reads; tests/runtime/test_agent_client.py checks both
directions against the real agent module. Field names are the contract: add
fields (with defaults) rather than renaming them.

JSON shapes (times are float seconds since the epoch, UTC):

JobSpec      {"name": str|null, "run": str, "envs": {str: str}, "secret_names": [str],
              "num_nodes": int, "gpus_per_node": number, "workdir": str|null,
              "task_id": str|null, "checkpoint_dir": str|null,
              "cluster_info_json": str|null, "checkpoint_store": str|null,
              "checkpoint_save_seconds": number|null, "health": Watch|null}
Watch        {"watch_seconds": number, "hang_minutes": number, "straggler_pct": number,
              "history_seconds": number, "stop": bool}  (agent_watch.py)
JobRecord    {"id": int, "name": str|null, "status": "PENDING"|"RUNNING"|"SUCCEEDED"|
              "FAILED"|"CANCELLED", "num_nodes": int, "submitted_at": float,
              "started_at": float|null, "ended_at": float|null, "exit_code": int|null,
              "failed_rank": int|null, "reason": str|null, "notice": Notice|null,
              "health": Finding|null}
Finding      {"kind": str, "severity": "fail"|"warn", "rank": int|null, "summary": str,
              "evidence": [str], "detected_at": float}
Notice       {"rank": int, "grace_seconds": float, "received_at": float,
              "source": str, "detail": str}
WorkerAccess {"rank": int, "ip": str, "kind": "local"|"ssh", "home": str|null,
              "host": str|null, "port": int, "user": str|null, "key_path": str|null,
              "cuda_visible_devices": str|null}
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from launcher.errors import LauncherError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobShapeError(LauncherError):
    """A JSON document from (or for) the agent does not have the documented shape."""


class JobStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


def _opt_str(d: Mapping[str, object], key: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise JobShapeError(f"field '{key}' must be a string or null, got {type(v).__name__}")
    return v


def _req_str(d: Mapping[str, object], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise JobShapeError(f"field '{key}' must be a string, got {type(v).__name__}")
    return v


def _opt_int(d: Mapping[str, object], key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise JobShapeError(f"field '{key}' must be an integer or null, got {v!r}")
    return v


def _req_int(d: Mapping[str, object], key: str) -> int:
    v = _opt_int(d, key)
    if v is None:
        raise JobShapeError(f"field '{key}' is required")
    return v


def _opt_float(d: Mapping[str, object], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise JobShapeError(f"field '{key}' must be a number or null, got {v!r}")
    return float(v)


def _req_float(d: Mapping[str, object], key: str) -> float:
    v = _opt_float(d, key)
    if v is None:
        raise JobShapeError(f"field '{key}' is required")
    return v


@dataclass(frozen=True)
class JobSpec:
    """One job for the cluster's queue: `run` is executed with bash on every rank.

    `envs` holds user variables and secret values alike; names listed in
    `secret_names` are never shown by the agent (queue, status, log headers).
    `workdir` is a path on the nodes ("~/..." or relative = under the node's
    home; None = the home itself). `task_id` defaults on the agent to
    "launcher-<cluster>-<job id>". `checkpoint_store` (an s3:// prefix) makes every
    rank restore `checkpoint_dir` from it before the run and save it back every
    `checkpoint_save_seconds` (default 300), on an interruption notice and at exit
    (agent_storage.py).
    """

    run: str
    name: str | None = None
    envs: dict[str, str] = field(default_factory=dict)
    secret_names: tuple[str, ...] = ()
    num_nodes: int = 1
    gpus_per_node: float = 0
    workdir: str | None = None
    task_id: str | None = None
    checkpoint_dir: str | None = None
    cluster_info_json: str | None = None
    checkpoint_store: str | None = None
    checkpoint_save_seconds: float | None = None
    health: Mapping[str, object] | None = None  # the health watch (agent_watch.py)

    def __post_init__(self) -> None:
        if not self.run.strip():
            raise JobShapeError("job spec: 'run' is empty")
        if self.num_nodes < 1:
            raise JobShapeError(f"job spec: num_nodes must be >= 1, got {self.num_nodes}")
        if self.gpus_per_node < 0:
            raise JobShapeError(f"job spec: gpus_per_node must be >= 0, got {self.gpus_per_node}")
        if self.checkpoint_save_seconds is not None and self.checkpoint_save_seconds <= 0:
            raise JobShapeError("job spec: checkpoint_save_seconds must be > 0")
        for name in self.envs:
            if not _ENV_NAME.match(name):
                raise JobShapeError(f"job spec: '{name}' is not a valid environment variable name")

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "run": self.run,
            "envs": dict(self.envs),
            "secret_names": list(self.secret_names),
            "num_nodes": self.num_nodes,
            "gpus_per_node": self.gpus_per_node,
            "workdir": self.workdir,
            "task_id": self.task_id,
            "checkpoint_dir": self.checkpoint_dir,
            "cluster_info_json": self.cluster_info_json,
            "checkpoint_store": self.checkpoint_store,
            "checkpoint_save_seconds": self.checkpoint_save_seconds,
            "health": dict(self.health) if self.health is not None else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> JobSpec:
        envs_raw = d.get("envs") or {}
        if not isinstance(envs_raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in envs_raw.items()
        ):
            raise JobShapeError("field 'envs' must map strings to strings")
        secrets_raw = d.get("secret_names") or []
        if not isinstance(secrets_raw, list) or not all(isinstance(s, str) for s in secrets_raw):
            raise JobShapeError("field 'secret_names' must be a list of strings")
        return cls(
            run=_req_str(d, "run"),
            name=_opt_str(d, "name"),
            envs=dict(envs_raw),
            secret_names=tuple(secrets_raw),
            num_nodes=_opt_int(d, "num_nodes") or 1,
            gpus_per_node=_opt_float(d, "gpus_per_node") or 0,
            workdir=_opt_str(d, "workdir"),
            task_id=_opt_str(d, "task_id"),
            checkpoint_dir=_opt_str(d, "checkpoint_dir"),
            cluster_info_json=_opt_str(d, "cluster_info_json"),
            checkpoint_store=_opt_str(d, "checkpoint_store"),
            checkpoint_save_seconds=_opt_float(d, "checkpoint_save_seconds"),
            health=d["health"] if isinstance(d.get("health"), dict) else None,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Notice:
    """A spot interruption notice the agent saw for node `rank` and relayed as SIGTERM."""

    rank: int
    grace_seconds: float
    received_at: float
    source: str  # "local-file", later "aws-imds", "gcp-metadata", "azure-scheduled-events"
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "grace_seconds": self.grace_seconds,
            "received_at": self.received_at,
            "source": self.source,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Notice:
        return cls(
            rank=_req_int(d, "rank"),
            grace_seconds=_req_float(d, "grace_seconds"),
            received_at=_req_float(d, "received_at"),
            source=_req_str(d, "source"),
            detail=_opt_str(d, "detail") or "",
        )


@dataclass(frozen=True)
class HealthFinding:
    """What the health watch found wrong while the job ran (agent_watch.py): `rank` is
    the node (None for a hang), `summary` e.g. "Xid 79 (GPU has fallen off the bus)",
    `evidence` the raw lines."""

    kind: str
    severity: str
    rank: int | None
    summary: str
    evidence: tuple[str, ...]
    detected_at: float
    stop: bool = False  # the agent stopped the job for it (a managed job's node is replaced)

    def headline(self) -> str:
        """'node 1: Xid 79' (as `status` shows it after DEGRADED)."""
        who = f"node {self.rank}: " if self.rank is not None else ""
        return who + self.summary.split(" (")[0]

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "severity": self.severity, "rank": self.rank,
                "summary": self.summary, "evidence": list(self.evidence),
                "detected_at": self.detected_at, "stop": self.stop}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> HealthFinding:
        ev = d.get("evidence") or []
        return cls(kind=_req_str(d, "kind"), severity=_req_str(d, "severity"),
                   rank=_opt_int(d, "rank"), summary=_req_str(d, "summary"),
                   evidence=tuple(str(e) for e in ev) if isinstance(ev, list) else (),
                   detected_at=_req_float(d, "detected_at"), stop=d.get("stop") is True)


@dataclass(frozen=True)
class JobRecord:
    """A job as the agent reports it. Never carries env values.

    FAILED jobs say which rank failed first (`failed_rank`), its `exit_code`
    (128+N when killed by signal N) and a one-line `reason`. A job that was
    running when an interruption notice arrived ends FAILED with `notice` set
    and a reason starting "preempted", whatever its ranks' exit codes were.
    """

    id: int
    name: str | None
    status: JobStatus
    submitted_at: float
    num_nodes: int = 1
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    failed_rank: int | None = None
    reason: str | None = None
    notice: Notice | None = None
    log_truncated: str | None = None  # "log truncated: no space left on MOUNT", or None
    health: HealthFinding | None = None  # the watch's failing finding (ended "health: ...")

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status.value,
            "num_nodes": self.num_nodes,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "failed_rank": self.failed_rank,
            "reason": self.reason,
            "notice": self.notice.to_json() if self.notice else None,
            "log_truncated": self.log_truncated,
            "health": self.health.to_json() if self.health else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> JobRecord:
        status_raw = _req_str(d, "status")
        try:
            status = JobStatus(status_raw)
        except ValueError:
            raise JobShapeError(f"unknown job status {status_raw!r}") from None
        notice_raw = d.get("notice")
        if notice_raw is not None and not isinstance(notice_raw, dict):
            raise JobShapeError("field 'notice' must be an object or null")
        health_raw = d.get("health")
        return cls(
            id=_req_int(d, "id"),
            name=_opt_str(d, "name"),
            status=status,
            submitted_at=_req_float(d, "submitted_at"),
            num_nodes=_opt_int(d, "num_nodes") or 1,
            started_at=_opt_float(d, "started_at"),
            ended_at=_opt_float(d, "ended_at"),
            exit_code=_opt_int(d, "exit_code"),
            failed_rank=_opt_int(d, "failed_rank"),
            reason=_opt_str(d, "reason"),
            notice=Notice.from_json(notice_raw) if notice_raw is not None else None,
            log_truncated=_opt_str(d, "log_truncated"),
            health=HealthFinding.from_json(health_raw) if isinstance(health_raw, dict) else None,
        )


@dataclass(frozen=True)
class WorkerAccess:
    """How the head node's agent reaches node `rank` to start that rank's process.

    kind "local": spawn on the head's machine, with HOME and the default cwd =
    `home` (None = the agent's own HOME; the local cloud gives each node a home
    directory on one machine). kind "ssh": `ssh -i key_path -p port user@host`
    from the head, with host keys pinned in the agent's known_hosts file.
    `key_path` is a path on the head ("~/..." = the head's home).
    kind "srun": a job step of Slurm allocation `slurm_job` on node `host`
    (`srun --overlap --jobid=slurm_job -w host -N1 -n1`), started from the head.
    `cuda_visible_devices`, when set, is exported as CUDA_VISIBLE_DEVICES.
    """

    rank: int
    ip: str
    kind: Literal["local", "ssh", "srun"] = "local"
    home: str | None = None
    host: str | None = None
    port: int = 22
    user: str | None = None
    key_path: str | None = None
    cuda_visible_devices: str | None = None
    slurm_job: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("local", "ssh", "srun"):
            raise JobShapeError(f"worker {self.rank}: kind must be 'local', 'ssh' or 'srun'")
        if self.kind == "ssh" and not (self.host and self.user):
            raise JobShapeError(f"worker {self.rank}: ssh access needs host and user")
        if self.kind == "srun" and not (self.host and self.slurm_job):
            raise JobShapeError(f"worker {self.rank}: srun access needs host and slurm_job")

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "ip": self.ip,
            "kind": self.kind,
            "home": self.home,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "key_path": self.key_path,
            "cuda_visible_devices": self.cuda_visible_devices,
            "slurm_job": self.slurm_job,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> WorkerAccess:
        kind = _req_str(d, "kind")
        if kind not in ("local", "ssh"):
            raise JobShapeError(f"worker kind must be 'local' or 'ssh', got {kind!r}")
        return cls(
            rank=_req_int(d, "rank"),
            ip=_req_str(d, "ip"),
            kind="local" if kind == "local" else "ssh",
            home=_opt_str(d, "home"),
            host=_opt_str(d, "host"),
            port=_opt_int(d, "port") or 22,
            user=_opt_str(d, "user"),
            key_path=_opt_str(d, "key_path"),
            cuda_visible_devices=_opt_str(d, "cuda_visible_devices"),
        )
