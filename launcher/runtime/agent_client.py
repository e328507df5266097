"""Client side of the head-node agent: drives `agent.py` on the head through a CommandRunner.

Every method is one (or, for a first install, a few) `runner.run` round trips
running `~/.launcher-agent/agent COMMAND` on the head, which prints one JSON
document. Nothing here keeps state between calls, so a client may come and go
(a killed CLI leaves the job running; another client picks it up).

Errors: AgentError (a LauncherError) with the agent's message; JobNotFoundError
for an unknown job id; the runner's NodeUnreachableError / CommandTimeoutError
pass through unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.errors import LauncherError
from launcher.runtime.jobspec import JobRecord, JobSpec, Notice, WorkerAccess

if TYPE_CHECKING:
    from launcher.clouds.base import ClusterInfo
    from launcher.runtime.runner import CommandRunner

AGENT_DIR = "~/.launcher-agent"
END_MARKER = "@@launcher-agent-end@@"
_AGENT = f"{AGENT_DIR}/agent"  # the launcher script `setup` writes (fast: no shims, -S)
_SHORT_TIMEOUT_S = 60.0


class AgentError(LauncherError):
    """The head-node agent refused or failed a request; the message says why."""


class JobNotFoundError(AgentError):
    """No job with that id on the cluster."""

    exit_code = 4


class ClusterAutodownedError(AgentError):
    """Autostop took the cluster down from its head (clouds whose nodes cannot tear
    themselves down, e.g. ssh pools): the agent stopped; the client must release the
    nodes and forget the cluster (launcher.api.cluster_common.reconcile_autodowned)."""

    def __init__(self, message: str, at: float | None, idle_minutes: float | None) -> None:
        super().__init__(message)
        self.at = at
        self.idle_minutes = idle_minutes


@dataclass(frozen=True)
class AutostopConfig:
    idle_minutes: float
    down: bool
    action: str  # shell command the agent runs when idle ("" = only record the event)
    set_at: float


@dataclass(frozen=True)
class RankProcess:
    rank: int
    kind: str
    pid: int | None
    pgid: int | None  # the rank's run process group (on its node)
    exit_code: int | None


@dataclass(frozen=True)
class AgentStatus:
    version: str
    cluster: str | None
    num_nodes: int
    daemon_running: bool
    daemon_pid: int | None
    daemon_version: str | None
    running_job: int | None
    running_ranks: tuple[RankProcess, ...]
    pending_jobs: int
    idle_since: float | None
    autostop: AutostopConfig | None
    last_notice: Notice | None


@dataclass(frozen=True)
class AgentEvent:
    """Something the agent did: job_submitted/started/succeeded/failed/cancelled, notice,
    autostop_set, autostop, daemon_started/stopped... `detail` is one human line."""

    id: int
    ts: float
    kind: str
    job_id: int | None
    detail: str


@dataclass(frozen=True)
class CancelResult:
    cancelled: tuple[int, ...]
    already_finished: tuple[int, ...]
    not_found: tuple[int, ...]
    cancelling: tuple[int, ...]  # still stopping when the agent stopped waiting


# ----------------------------------------------------------------------------- helpers


def __getattr__(name: str) -> object:
    """`AGENT_FILES` (agent.AGENT_FILES), imported lazily: agent.py costs ~15 ms per CLI call."""
    if name == "AGENT_FILES":
        from launcher.runtime.agent import AGENT_FILES

        return AGENT_FILES
    raise AttributeError(name)


def agent_sources() -> dict[str, str]:
    """The agent files shipped to nodes, name -> text."""
    from importlib import resources  # lazy (with agent.py): ~35 ms off every exec/queue call

    from launcher.runtime.agent import AGENT_FILES

    pkg = resources.files("launcher.runtime")
    return {name: pkg.joinpath(name).read_text(encoding="utf-8") for name in AGENT_FILES}


def agent_version(sources: Mapping[str, str]) -> str:
    """sha256 over the agent files in AGENT_FILES order (what `agent.py` computes too)."""
    from launcher.runtime.agent import AGENT_FILES

    h = hashlib.sha256()
    for name in AGENT_FILES:
        h.update(sources[name].encode("utf-8"))
    return h.hexdigest()


def known_hosts_text(cluster: ClusterInfo, workers: Sequence[WorkerAccess]) -> str:
    """known_hosts lines pinning each ssh worker's host key (from provisioning) on the head."""
    keys = {n.rank: n.ssh_host_key for n in cluster.nodes}
    lines = []
    for w in workers:
        key = keys.get(w.rank)
        if w.kind != "ssh" or not key or not w.host:
            continue
        name = w.host if w.port == 22 else f"[{w.host}]:{w.port}"
        lines.append(f"{name} {key.strip()}")
    return "\n".join(lines) + ("\n" if lines else "")


def default_notice_sources(cloud: str) -> list[str]:
    """The agent notice sources that watch a `cloud` node (see agent_notices.py)."""
    from launcher.runtime.agent_notices import CLOUD_NOTICE_SOURCES

    return [CLOUD_NOTICE_SOURCES.get(cloud, "local-file")]


def default_autostop_action(cluster: ClusterInfo, down: bool) -> str:
    """What the agent runs when the cluster is idle, or "" when the head cannot act itself.

    Local cloud: the head is this machine, so it runs this `launcher` (same Python,
    same LAUNCHER_HOME) with `down NAME -y` / `stop NAME`. A cloud with an
    `autostop_action(cluster, down)` method (AWS) gives its own action. Other clouds:
    with `down`, the agent takes the cluster down itself (kills job processes, stops,
    leaves the `autodowned` marker the client reconciles), and without `down` it
    records an "autostop" event only (the API refuses that for clouds that cannot stop).
    """
    if cluster.cloud != "local":
        # a cloud whose nodes can stop themselves says how (AWS: power off; EC2 then
        # stops or terminates each instance, see launcher/clouds/aws/autostop.py)
        from launcher.clouds.registry import IMPLEMENTED, get_cloud

        action = getattr(get_cloud(cluster.cloud), "autostop_action", None) \
            if cluster.cloud in IMPLEMENTED else None
        return str(action(cluster, down)) if action is not None else ""
    from launcher.config.settings import launcher_home

    boot = "import sys; from launcher.cli import main; main(sys.argv[1:])"
    verb = ["down", cluster.cluster_name, "-y"] if down else ["stop", cluster.cluster_name]
    return " ".join([
        f"LAUNCHER_HOME={shlex.quote(str(launcher_home()))}",
        shlex.quote(sys.executable), "-c", shlex.quote(boot), *map(shlex.quote, verb),
    ])


def _parse_doc(stdout: str) -> dict[str, object] | None:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def _opt_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _opt_float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int_tuple(v: object) -> tuple[int, ...]:
    return tuple(x for x in v if isinstance(x, int)) if isinstance(v, list) else ()


# ----------------------------------------------------------------------------- client


class AgentClient:
    """Talks to the agent of `cluster` on its head node through `head` (a CommandRunner).

    Thread-safe as far as the runner is. Blocking calls; short commands time
    out after 60 s (CommandTimeoutError), `follow_logs` has no timeout.
    """

    def __init__(self, head: CommandRunner, cluster: ClusterInfo) -> None:
        self.head = head
        self.cluster = cluster

    # ------------------------------------------------------------------ plumbing

    def _call(self, args: str, *, stdin: str | None = None, timeout: float = _SHORT_TIMEOUT_S,
              agent: str = _AGENT) -> dict[str, object]:
        result = self.head.run(f"{agent} {args}", stdin=stdin, timeout=timeout)
        doc = _parse_doc(result.stdout)
        if doc is not None and "error" in doc:
            self._raise(doc)
        if result.returncode != 0 or doc is None:
            tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-5:]
            if result.returncode == 127 and agent == _AGENT:
                raise AgentError(f"The agent is not installed on {self.cluster.cluster_name}'s "
                                 "head node (run the launch again to reinstall it).")
            if result.returncode == 127:
                raise AgentError(f"{self.cluster.cluster_name}'s head node has no python3 on "
                                 "PATH; the agent needs Python >= 3.10: " + " | ".join(tail))
            raise AgentError(f"agent `{args.split()[0]}` failed on "
                             f"{self.cluster.cluster_name} (exit {result.returncode}): "
                             + " | ".join(tail))
        return doc

    def _raise(self, doc: Mapping[str, object]) -> None:
        message = str(doc.get("error"))
        if doc.get("kind") == "not_found":
            raise JobNotFoundError(f"{self.cluster.cluster_name}: {message}")
        if doc.get("kind") == "autodowned":
            raise ClusterAutodownedError(f"{self.cluster.cluster_name}: {message}",
                                         _opt_float(doc.get("at")),
                                         _opt_float(doc.get("idle_minutes")))
        raise AgentError(f"{self.cluster.cluster_name}: {message}")

    # ------------------------------------------------------------------ API

    def install(self, worker_access: list[WorkerAccess],
                notice_sources: Sequence[str] | None = None) -> None:
        """Make the agent run on the head with this node list. Idempotent and fast.

        `notice_sources` defaults to the cluster's cloud's interruption-notice source
        (AWS IMDSv2, GCP metadata, Azure Scheduled Events; local notice files else).

        One round trip when the agent files on the head are current (their hash
        matches); otherwise copies them first. Rewrites nodes.json (+ pinned
        known_hosts for ssh workers), starts the daemon if it is not running and
        restarts it if it runs older code (running jobs are adopted, not killed).
        """
        sources = agent_sources()
        version = agent_version(sources)
        config = json.dumps({
            "cluster": self.cluster.cluster_name,
            "workers": [w.to_json() for w in sorted(worker_access, key=lambda w: w.rank)],
            "cluster_info_json": json.dumps({
                "cluster_name": self.cluster.cluster_name, "cloud": self.cluster.cloud,
                "region": self.cluster.region, "zone": self.cluster.zone,
                "num_nodes": len(self.cluster.nodes)}),
            "notice_sources": list(notice_sources if notice_sources is not None
                                   else default_notice_sources(self.cluster.cloud)),
            "known_hosts": known_hosts_text(self.cluster, worker_access),
        })
        args = f"setup --expect-version {version}"
        result = self.head.run(f"{_AGENT} {args}", stdin=config, timeout=_SHORT_TIMEOUT_S)
        doc = _parse_doc(result.stdout)
        if result.returncode == 0 and doc is not None and "error" not in doc:
            return
        if doc is not None and doc.get("kind") not in (None, "version_mismatch"):
            self._raise(doc)
        for name, text in sources.items():
            self.head.put_text(text, f"{AGENT_DIR}/{name}", mode=0o700 if name == "agent.py"
                               else 0o600)
        self._call(args, stdin=config, agent=f"python3 {AGENT_DIR}/agent.py")

    def submit(self, spec: JobSpec) -> int:
        """Queue a job; it starts when the jobs before it have ended. Returns its id."""
        doc = self._call("submit", stdin=json.dumps(spec.to_json()))
        job_id = _opt_int(doc.get("job_id"))
        if job_id is None:
            raise AgentError(f"agent submit gave no job id: {doc}")
        return job_id

    def submit_and_follow(self, spec: JobSpec, on_line: Callable[[str], None],
                          on_submitted: Callable[[int], None] | None = None) -> JobRecord:
        """submit() + follow_logs() in one round trip (the fastest way to first output).

        `on_submitted(job_id)` is called as soon as the job is queued, before any output.
        Blocks until the job has ended; returns its final record.
        """
        submitted: list[int] = []

        def first(line: str) -> bool:
            if submitted or not line.startswith('{"job_id": '):
                return False
            job_id = _opt_int(json.loads(line).get("job_id"))
            if job_id is not None:
                submitted.append(job_id)
                if on_submitted is not None:
                    on_submitted(job_id)
            return True

        rec = self._stream("submit --follow", on_line, stdin=json.dumps(spec.to_json()),
                           intercept=first)
        if rec is None:
            if not submitted:
                raise AgentError(f"agent submit failed on {self.cluster.cluster_name}")
            return self.job(submitted[0])
        return rec

    def queue(self) -> list[JobRecord]:
        """Every job of the cluster, oldest first."""
        jobs = self._call("queue").get("jobs")
        return [JobRecord.from_json(j) for j in jobs if isinstance(j, dict)] if isinstance(
            jobs, list) else []

    def job(self, job_id: int) -> JobRecord:
        """One job's record. Raises JobNotFoundError."""
        return JobRecord.from_json(self._call(f"job {int(job_id)}"))

    def follow_logs(self, job_id: int, on_line: Callable[[str], None], follow: bool = True,
                    rank: int | None = None, *, complete: bool = False) -> JobRecord:
        """Stream the job's output to `on_line`, one "(rank N) text" line per call (no newline).

        With `follow`, blocks until the job has ended and all output is delivered, then
        returns its final record; otherwise returns what is there now and the current
        record. Stopping the client (even kill -9) does not affect the job.
        With `complete`, a stream cut before the agent's end marker (the command killed,
        the connection lost) raises AgentError: what `on_line` got is then partial.
        """
        cmd = f"logs {int(job_id)}"
        if follow:
            cmd += " --follow"
        if rank is not None:
            cmd += f" --rank {int(rank)}"
        rec = self._stream(cmd, on_line, require_end=complete)
        return rec if rec is not None else self.job(job_id)

    def logs_since(self, job_id: int, offsets: Mapping[int, int],
                   on_line: Callable[[str], None]) -> dict[int, int]:
        """Incremental log sync: the complete lines each rank's log has past its byte
        offset in `offsets` (0 for a rank not listed), in rank order; returns the offsets
        to ask from next time. One short agent call; never waits for output. Raises
        AgentError when the answer was cut (nothing delivered counts then: ask again
        from the same offsets)."""
        spec = ",".join(f"{int(r)}={int(b)}" for r, b in sorted(offsets.items())) or "0=0"
        holder: list[str] = []
        lines: list[str] = []

        def on_output(line: str) -> None:
            if line.startswith(END_MARKER):
                holder.append(line[len(END_MARKER):].strip())
            elif line.startswith('{"error": '):
                holder.append(line)
            else:
                lines.append(line)

        result = self.head.run(f"{_AGENT} logs {int(job_id)} --offsets {spec}",
                               on_output=on_output, timeout=_SHORT_TIMEOUT_S)
        if not holder:
            raise AgentError(f"agent `logs` on {self.cluster.cluster_name} stopped before its "
                             f"end marker (exit {result.returncode})")
        doc = json.loads(holder[0])
        if "error" in doc:
            self._raise(doc)
        raw = doc.get("log_offsets")
        if not isinstance(raw, dict):
            raise AgentError(f"the agent on {self.cluster.cluster_name} is too old for "
                             "incremental log sync (no log_offsets)")
        for line in lines:
            on_line(line)
        return {int(r): int(b) for r, b in raw.items()}

    def _stream(self, args: str, on_line: Callable[[str], None], *, stdin: str | None = None,
                intercept: Callable[[str], bool] | None = None,
                require_end: bool = False) -> JobRecord | None:
        """Run a streaming agent command; the END_MARKER record, or None if none came
        (AgentError instead with `require_end`)."""
        holder: list[str] = []

        def on_output(line: str) -> None:
            if line.startswith(END_MARKER):
                holder.append(line[len(END_MARKER):].strip())
            elif line.startswith('{"error": '):
                holder.append(line)
            elif intercept is None or not intercept(line):
                on_line(line)

        result = self.head.run(f"{_AGENT} {args}", on_output=on_output, stdin=stdin,
                               timeout=None)
        for text in holder:
            doc = json.loads(text)
            if "error" in doc:
                self._raise(doc)
            return JobRecord.from_json(doc)
        if result.returncode == 127:
            self._call("status")  # raises the not-installed error
        if require_end:
            raise AgentError(f"agent `{args.split()[0]}` on {self.cluster.cluster_name} stopped "
                             f"before its end marker (exit {result.returncode}): the output "
                             "is incomplete")
        return None

    def cancel(self, job_ids: list[int] | None = None) -> CancelResult:
        """Cancel jobs (None = every pending or running one). Pending jobs never start;
        running ones get SIGTERM, then SIGKILL after the agent's grace period; returns once
        they have ended. Raises JobNotFoundError naming unknown ids (the others are
        cancelled anyway)."""
        args = "cancel --all" if job_ids is None else "cancel " + " ".join(
            str(int(j)) for j in job_ids)
        if job_ids is not None and not job_ids:
            return CancelResult((), (), (), ())
        doc = self._call(args)
        res = CancelResult(_int_tuple(doc.get("cancelled")), _int_tuple(doc.get("already_finished")),
                           _int_tuple(doc.get("not_found")), _int_tuple(doc.get("cancelling")))
        if res.not_found:
            raise JobNotFoundError(f"{self.cluster.cluster_name}: no job "
                                   + ", ".join(map(str, res.not_found)))
        return res

    def set_autostop(self, idle_minutes: float | None, down: bool = False,
                     action: str | None = None) -> None:
        """Stop (or with `down`, tear down) the cluster after `idle_minutes` without pending or
        running jobs; None cancels. The agent runs `action` (a shell command on the head;
        default: default_autostop_action) and records an "autostop" event."""
        if idle_minutes is None:
            self._call("autostop --off")
            return
        if idle_minutes < 0:
            raise AgentError("autostop: idle minutes must be >= 0")
        act = default_autostop_action(self.cluster, down) if action is None else action
        args = f"autostop --idle-minutes {float(idle_minutes)!r}"
        if down:
            args += " --down"
        if act:
            args += f" --action {shlex.quote(act)}"
        self._call(args)

    def status(self) -> AgentStatus:
        """The agent's own view: daemon, queue, autostop, last interruption notice."""
        d = self._call("status")
        daemon = d.get("daemon") if isinstance(d.get("daemon"), dict) else {}
        assert isinstance(daemon, dict)
        auto = d.get("autostop")
        notice = d.get("last_notice")
        ranks = d.get("running_ranks")
        return AgentStatus(
            version=str(d.get("version")),
            cluster=d.get("cluster") if isinstance(d.get("cluster"), str) else None,  # type: ignore[arg-type]
            num_nodes=_opt_int(d.get("num_nodes")) or 0,
            daemon_running=bool(daemon.get("running")),
            daemon_pid=_opt_int(daemon.get("pid")),
            daemon_version=str(daemon["version"]) if daemon.get("version") else None,
            running_job=_opt_int(d.get("running_job")),
            running_ranks=tuple(
                RankProcess(int(r["rank"]), str(r["kind"]), _opt_int(r.get("pid")),
                            _opt_int(r.get("pgid")), _opt_int(r.get("exit_code")))
                for r in (ranks if isinstance(ranks, list) else []) if isinstance(r, dict)),
            pending_jobs=_opt_int(d.get("pending_jobs")) or 0,
            idle_since=_opt_float(d.get("idle_since")),
            autostop=AutostopConfig(float(auto["idle_minutes"]), bool(auto["down"]),
                                    str(auto.get("action") or ""), float(auto["set_at"]))
            if isinstance(auto, dict) else None,
            last_notice=Notice.from_json(notice) if isinstance(notice, dict) else None,
        )

    def events(self, since: int = 0) -> list[AgentEvent]:
        """The agent's events with id > `since`, oldest first."""
        evs = self._call(f"events --since {int(since)}").get("events")
        return [
            AgentEvent(int(e["id"]), float(e["ts"]), str(e["kind"]), _opt_int(e.get("job_id")),
                       str(e.get("detail") or ""))
            for e in (evs if isinstance(evs, list) else []) if isinstance(e, dict)
        ]

    def health(self, job_id: int | None = None, *, history: bool = False,
               clear: bool = False) -> dict[str, object]:
        """The health watch's view (agent `health`): {"degraded": finding|null, "job_id",
        "finding", "events", "history"} for `job_id` (default: the running or last job);
        `clear` forgets the cluster's degraded finding first."""
        args = "health" + (f" --job {int(job_id)}" if job_id is not None else "")
        args += (" --history" if history else "") + (" --clear" if clear else "")
        return dict(self._call(args))

    def shutdown(self, cancel_jobs: bool = False) -> None:
        """Stop the daemon (with `cancel_jobs`, cancel every job first). A later install()
        or submit() starts it again; the queue is kept."""
        self._call("shutdown --cancel-jobs" if cancel_jobs else "shutdown")
