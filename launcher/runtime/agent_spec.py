"""The agent's input shapes: a job spec and nodes.json, parsed and checked; AgentError.

STDLIB ONLY (shipped with the agent, a sibling of agent.py; imports nothing from
launcher nor from the other agent files). agent.py re-exports every name here
(`agent.JobSpec`, `agent.AgentError`, ...); agent_ranks.py reads these shapes.
"""

from __future__ import annotations

import re

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

EXIT_ERROR, EXIT_INVALID, EXIT_VERSION, EXIT_NOT_FOUND = 1, 2, 3, 4


class AgentError(Exception):
    def __init__(self, message: str, kind: str = "error", code: int = EXIT_ERROR,
                 extra: dict | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code
        self.extra = extra or {}


# --------------------------------------------------------------------------- shapes
# Mirrors of launcher/runtime/jobspec.py (same field names, same JSON).


# Plain classes, not dataclasses: importing dataclasses costs ~15 ms per CLI call.


class JobSpec:
    __slots__ = ("name", "run", "envs", "secret_names", "num_nodes", "gpus_per_node",
                 "workdir", "task_id", "checkpoint_dir", "cluster_info_json", "checkpoint_store",
                 "checkpoint_save_seconds", "health")

    def __init__(self, run: str, name: str | None = None, envs: dict[str, str] | None = None,
                 secret_names: list[str] | None = None, num_nodes: int = 1,
                 gpus_per_node: float = 0, workdir: str | None = None, task_id: str | None = None,
                 checkpoint_dir: str | None = None, cluster_info_json: str | None = None,
                 checkpoint_store: str | None = None,
                 checkpoint_save_seconds: float | None = None,
                 health: dict | None = None) -> None:
        self.run = run
        self.name = name
        self.envs = envs or {}
        self.secret_names = secret_names or []
        self.num_nodes = num_nodes
        self.gpus_per_node = gpus_per_node
        self.workdir = workdir
        self.task_id = task_id
        self.checkpoint_dir = checkpoint_dir
        self.cluster_info_json = cluster_info_json
        self.checkpoint_store = checkpoint_store  # s3:// prefix: see agent_storage.py
        self.checkpoint_save_seconds = checkpoint_save_seconds
        self.health = health  # the watch's settings (agent_watch.parse_health), None: no watch


class WorkerAccess:
    __slots__ = ("rank", "ip", "kind", "home", "host", "port", "user", "key_path",
                 "cuda_visible_devices", "slurm_job")

    def __init__(self, rank: int, ip: str, kind: str = "local", home: str | None = None,
                 host: str | None = None, port: int = 22, user: str | None = None,
                 key_path: str | None = None, cuda_visible_devices: str | None = None,
                 slurm_job: str | None = None) -> None:
        self.rank = rank
        self.ip = ip
        self.kind = kind
        self.home = home
        self.host = host
        self.port = port
        self.user = user
        self.key_path = key_path
        self.cuda_visible_devices = cuda_visible_devices
        self.slurm_job = slurm_job  # kind "srun": the Slurm allocation's job id

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise AgentError(message, "invalid", EXIT_INVALID)


def _opt_str(d: dict, key: str) -> str | None:
    v = d.get(key)
    _check(v is None or isinstance(v, str), f"field '{key}' must be a string or null")
    return v


def parse_job_spec(d: object) -> JobSpec:
    _check(isinstance(d, dict), "job spec must be a JSON object")
    assert isinstance(d, dict)
    run = d.get("run")
    _check(isinstance(run, str) and bool(run.strip()), "job spec: 'run' must be a non-empty string")
    envs = d.get("envs") or {}
    _check(isinstance(envs, dict), "job spec: 'envs' must be an object")
    for k, v in envs.items():
        _check(isinstance(k, str) and bool(_ENV_NAME.match(k)), f"job spec: bad env name {k!r}")
        _check(isinstance(v, str), f"job spec: env {k} must be a string")
    secrets = d.get("secret_names") or []
    _check(isinstance(secrets, list) and all(isinstance(s, str) for s in secrets),
           "job spec: 'secret_names' must be a list of strings")
    num_nodes = d.get("num_nodes", 1)
    _check(isinstance(num_nodes, int) and not isinstance(num_nodes, bool) and num_nodes >= 1,
           "job spec: 'num_nodes' must be an integer >= 1")
    gpus = d.get("gpus_per_node") or 0
    _check(isinstance(gpus, int | float) and not isinstance(gpus, bool) and gpus >= 0,
           "job spec: 'gpus_per_node' must be a number >= 0")
    return JobSpec(
        run=str(run), name=_opt_str(d, "name"), envs=dict(envs), secret_names=list(secrets),
        num_nodes=int(num_nodes), gpus_per_node=float(gpus), workdir=_opt_str(d, "workdir"),
        task_id=_opt_str(d, "task_id"), checkpoint_dir=_opt_str(d, "checkpoint_dir"),
        cluster_info_json=_opt_str(d, "cluster_info_json"),
        checkpoint_store=_opt_str(d, "checkpoint_store"),
        checkpoint_save_seconds=_opt_positive(d, "checkpoint_save_seconds"),
        health=_health(d.get("health")),
    )


def _health(v: object) -> dict | None:
    try:
        return parse_health(v)
    except ValueError as exc:
        raise AgentError(str(exc), "invalid", EXIT_INVALID) from None


def parse_health(d: object) -> dict | None:
    """The job spec's `health` object: the health watch's settings (agent_watch.py);
    None: no watch. Raises ValueError naming the field."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError("job spec: 'health' must be an object or null")
    out = {"watch_seconds": 5.0, "hang_minutes": 30.0, "straggler_pct": 20.0,
           "history_seconds": 60.0, "stop": False}
    for key in ("watch_seconds", "hang_minutes", "straggler_pct", "history_seconds"):
        v = d.get(key, out[key])
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise ValueError(f"job spec: health.{key} must be a number >= 0")
        out[key] = float(v)
    if not isinstance(d.get("stop", False), bool):
        raise ValueError("job spec: health.stop must be true or false")
    out["stop"] = bool(d.get("stop", False))
    return out


def _opt_positive(d: dict, key: str) -> float | None:
    v = d.get(key)
    _check(v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v > 0),
           f"job spec: {key!r} must be a number > 0 or null")
    return None if v is None else float(v)


def parse_worker(d: object) -> WorkerAccess:
    _check(isinstance(d, dict), "worker must be a JSON object")
    assert isinstance(d, dict)
    kind = d.get("kind", "local")
    _check(kind in ("local", "ssh", "srun"),
           f"worker kind must be 'local', 'ssh' or 'srun', got {kind!r}")
    rank, ip, port = d.get("rank"), d.get("ip"), d.get("port") or 22
    _check(isinstance(rank, int) and isinstance(ip, str) and isinstance(port, int),
           "worker needs integer 'rank', string 'ip', integer 'port'")
    assert isinstance(rank, int) and isinstance(port, int)
    w = WorkerAccess(rank=rank, ip=str(ip), kind=kind, home=_opt_str(d, "home"),
                     host=_opt_str(d, "host"), port=port, user=_opt_str(d, "user"),
                     key_path=_opt_str(d, "key_path"),
                     cuda_visible_devices=_opt_str(d, "cuda_visible_devices"),
                     slurm_job=_opt_str(d, "slurm_job"))
    _check(kind != "ssh" or bool(w.host and w.user), f"worker {w.rank}: ssh needs host and user")
    _check(kind != "srun" or bool(w.host and w.slurm_job),
           f"worker {w.rank}: srun needs host and slurm_job")
    return w


class NodesConfig:
    """nodes.json: written by the client's install(); re-read for every job start."""

    __slots__ = ("cluster", "workers", "cluster_info_json", "notice_sources")

    def __init__(self, cluster: str, workers: list[WorkerAccess],
                 cluster_info_json: str | None = None,
                 notice_sources: list[str] | None = None) -> None:
        self.cluster = cluster
        self.workers = workers
        self.cluster_info_json = cluster_info_json
        self.notice_sources = notice_sources or ["local-file"]

    def to_json(self) -> dict:
        return {"cluster": self.cluster, "workers": [w.to_json() for w in self.workers],
                "cluster_info_json": self.cluster_info_json,
                "notice_sources": self.notice_sources}


def parse_nodes(d: object) -> NodesConfig:
    _check(isinstance(d, dict), "nodes config must be a JSON object")
    assert isinstance(d, dict)
    cluster = d.get("cluster")
    workers = d.get("workers")
    _check(isinstance(cluster, str), "nodes config: 'cluster' must be a string")
    _check(isinstance(workers, list) and bool(workers), "nodes config: 'workers' must be a list")
    assert isinstance(workers, list)
    ws = sorted((parse_worker(w) for w in workers), key=lambda w: w.rank)
    _check([w.rank for w in ws] == list(range(len(ws))), "nodes config: ranks must be 0..N-1")
    sources = d.get("notice_sources") or ["local-file"]
    _check(isinstance(sources, list), "nodes config: 'notice_sources' must be a list")
    return NodesConfig(str(cluster), ws, _opt_str(d, "cluster_info_json"), list(sources))
