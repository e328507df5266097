"""`Backend` over HTTP: the same calls as `launcher.api.backend.EmbeddedBackend`,
answered by a server (`launcher api login`), returning the same types.

Failures read as one paragraph each: an unreachable endpoint (naming the URL and
`launcher api status`), a refused token (401), a client/server version skew, and
every error the server's API call raised, re-raised here with its message and exit
code (`RemoteError`), so the CLI prints exactly what the embedded one would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from launcher import __version__
from launcher.api.backend import BestPlacement, CheckReport
from launcher.client.http import load_httpx
from launcher.errors import LauncherError

if TYPE_CHECKING:
    import httpx
else:
    httpx = load_httpx()  # without httpx's CLI and trio: see launcher/client/http.py

if TYPE_CHECKING:
    from launcher.api.cluster_common import LaunchResult
    from launcher.api.clusters import ClusterStatusView, NodeView
    from launcher.api.cost_report import CostReport
    from launcher.api.jobs import ManagedJob, ManagedJobDetail
    from launcher.jobs.accounting import JobSummary
    from launcher.jobs.daemon import ControllerInfo
    from launcher.provisioning.failover import ConfirmCallback
    from launcher.runtime.agent_client import CancelResult
    from launcher.runtime.jobspec import JobRecord
    from launcher.task.model import Task

LineCallback = Callable[[str], None]


class RemoteError(LauncherError):
    """An error the server's API call raised (its message and exit code)."""

    def __init__(self, message: str, exit_code: int = 1, kind: str = "LauncherError") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.kind = kind


class RequestDetached(LauncherError):
    """Ctrl-C while following an asynchronous request: it keeps running on the server."""

    exit_code = 130


def _error(payload: Any, status: int) -> LauncherError:
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict) and err.get("type") == "ProvisionFailedError" \
            and isinstance(err.get("attempts"), list):
        from launcher.clouds.base import FailoverAttempt, ProvisionFailedError

        # the same error (message and failover table) as a launch on this machine
        return ProvisionFailedError(str(err.get("message")).splitlines()[0],
                                    [FailoverAttempt(**a) for a in err["attempts"]])
    if isinstance(err, dict):
        return RemoteError(str(err.get("message")), int(err.get("exit_code") or 1),
                           str(err.get("type")))
    if isinstance(payload, dict) and "detail" in payload:  # a request FastAPI refused
        return RemoteError(f"The server refused the request ({status}): {payload['detail']}", 2)
    return RemoteError(f"The server answered {status}.")


def _stderr(line: str) -> None:
    import sys

    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Chunks:
    """A write-only file whose writes are taken out in chunks (a tar made as it streams)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, b: bytes) -> int:
        self.parts.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def _tar_stream(blobs: dict[str, tuple[str, int]]) -> Iterator[bytes]:
    """A gzip'ed tar of the given files, each member named by its SHA-256, produced
    while it is sent (never whole in memory)."""
    import gzip
    import tarfile

    buf = _Chunks()
    gz = gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=3)  # type: ignore[call-overload]
    with gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        for sha, (path, size) in blobs.items():
            info = tarfile.TarInfo(sha)
            info.size = size
            with open(path, "rb") as f:
                tar.addfile(info, f)
            yield buf.take()
    yield buf.take()


class RemoteBackend:
    remote = True

    def __init__(self, endpoint: str, token: str, *, timeout: float = 60.0,
                 pin: tuple[str, str] | None = None) -> None:
        """`pin`: (certificate PEM, its SHA-256) of a self-signed server: trusted alone
        (launcher.client.pinning). Otherwise LAUNCHER_API_CA_BUNDLE, else the system CAs."""
        self._uploaded: dict[int, tuple[Task | None, dict[str, Any] | None]] = {}
        self.endpoint = endpoint
        verify: Any = os.environ.get("LAUNCHER_API_CA_BUNDLE") or True
        if pin is not None:
            from launcher.client.pinning import pinned_context

            verify = pinned_context(*pin)
        self._http = httpx.Client(base_url=endpoint, timeout=httpx.Timeout(timeout, connect=5.0),
                                  headers={"Authorization": f"Bearer {token}",
                                           "X-Launcher-Version": __version__},
                                  verify=verify)

    # ---- transport

    def _unreachable(self, exc: Exception) -> LauncherError:
        if "not the pinned one" in str(exc):
            return LauncherError(
                f"The server at {self.endpoint} presented a TLS certificate other than the "
                f"one this client pinned ({exc}). Refusing to talk to it: if the server was "
                "redeployed, log in again with its new fingerprint (`launcher api login -e "
                "URL --tls-fingerprint FP`).")
        return LauncherError(
            f"Cannot reach the launcher server at {self.endpoint} ({type(exc).__name__}: "
            f"{exc}). Is it running? On the server's machine, `launcher api status` says so "
            "and `launcher api start` starts it; `launcher api logout` goes back to running "
            "everything on this machine.")

    def _check(self, resp: httpx.Response) -> None:
        theirs = resp.headers.get("x-launcher-version")
        if theirs is not None and theirs != __version__:
            raise LauncherError(
                f"This client is launcher {__version__} but the server at {self.endpoint} runs "
                f"launcher {theirs}: install launcher {theirs} here (pip install "
                f"'launcher=={theirs}') or upgrade the server to match.")
        if resp.status_code >= 400:
            try:
                payload = resp.json()
            except ValueError:
                payload = None
            raise _error(payload, resp.status_code)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        self._check(resp)
        return resp.json()

    @contextmanager
    def _stream(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Iterator[dict[str, Any]]]:
        try:
            with self._http.stream("GET", path, params=params,
                                   timeout=httpx.Timeout(None, connect=5.0)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                self._check(resp)
                yield (json.loads(line) for line in resp.iter_lines() if line.strip())
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _follow(self, path: str, params: dict[str, Any], on_line: LineCallback) -> Any:
        with self._stream(path, params) as items:
            for item in items:
                if "line" in item:
                    on_line(item["line"])
                elif "error" in item:
                    raise _error(item, 400)
                elif "result" in item:
                    return item["result"]
        raise LauncherError(f"The server at {self.endpoint} ended the stream early; try again.")

    # ---- running tasks

    def _run_request(self, path: str, body: dict[str, Any], on_line: LineCallback,
                     on_event: LineCallback) -> LaunchResult:
        """Submit a launch/exec request and follow its log to the end. Ctrl-C detaches
        (RequestDetached names how to re-attach or cancel); the work goes on."""
        from launcher.api.cluster_common import LaunchResult
        from launcher.clouds.base import FailoverAttempt

        rid = self.call("POST", path, json=body)["request_id"]
        on_event(f"Server request {rid} (Ctrl-C detaches; the work goes on).")
        try:
            row = self.request_follow(rid, on_line, on_event)
        except KeyboardInterrupt:
            raise RequestDetached(
                f"Detached; request {rid} goes on on the server. `launcher api logs {rid}` "
                f"re-attaches, `launcher api cancel {rid}` cancels it.") from None
        if row["status"] == "FAILED":
            raise _error(row, 400)
        if row["status"] == "CANCELLED":
            raise LauncherError(f"Request {rid} was cancelled.")
        d = dict(row["result"])
        d["attempts"] = [FailoverAttempt(**a) for a in d.get("attempts") or []]
        return LaunchResult(**d)

    def launch(self, task: Task, cluster: str | None, *, detach_run: bool,
               idle_minutes: float | None, down: bool, yes: bool,
               confirm: ConfirmCallback | None, on_line: LineCallback,
               on_setup_line: LineCallback, on_event: LineCallback,
               retry_until_up: bool) -> LaunchResult:
        """As `launcher.api.launch.launch`, on the server. Without `yes`, `confirm` is
        asked here first about the best placement when it costs money (the server
        cannot ask) - unless `cluster` already exists."""
        body = self._task_body(task)
        if not yes and confirm is not None and (cluster is None
                                                or cluster not in self.cluster_names()):
            best = self.jobs_check_feasible(task)
            if best.hourly_cost > 0 and not confirm(best):  # type: ignore[arg-type]
                from launcher.provisioning.failover import LaunchAbortedError

                raise LaunchAbortedError("Launch aborted; nothing was provisioned.")
        body.update(cluster=cluster, detach_run=detach_run, idle_minutes=idle_minutes,
                    down=down, retry_until_up=retry_until_up)
        return self._run_request("/clusters/launch", body, on_line, on_event)

    def exec(self, cluster: str, what: Task | str, *, detach_run: bool,
             on_line: LineCallback, on_event: LineCallback) -> LaunchResult:
        body: dict[str, Any] = {"detach_run": detach_run}
        if isinstance(what, str):
            body["command"] = what
        else:
            body.update(self._task_body(what))
            body.pop("name", None)
        return self._run_request(f"/clusters/{cluster}/exec", body, on_line, on_event)

    def check(self) -> CheckReport:
        from launcher.api.ssh_pools import PoolView
        from launcher.api.state_check import StateHealth
        from launcher.clouds.ssh_hosts import HostState

        d = self.call("GET", "/check")
        pools = [PoolView(p["name"], tuple(HostState(**h) for h in p["hosts"]))
                 for p in d["pools"]]
        return CheckReport(StateHealth(**d["state"]),
                           {n: (bool(v[0]), str(v[1])) for n, v in d["clouds"].items()}, pools)

    # ---- clusters

    def status(self, refresh: bool, all_users: bool) -> tuple[list[ClusterStatusView], list[str]]:
        from launcher.api.clusters import ClusterStatusView

        data = self.call("GET", "/clusters/status",
                         params={"refresh": refresh, "all_users": all_users})
        return [ClusterStatusView(**r) for r in data["rows"]], list(data["notes"])

    def cluster_names(self) -> list[str]:
        return list(self.call("GET", "/clusters/names"))

    def unknown_clusters(self, names: Sequence[str]) -> list[tuple[str, LauncherError]]:
        """[]: which names exist is the server's to say (an admin may act on clusters
        that are not in their own listing); `down_many` reports each missing one."""
        return []

    def queue(self, cluster: str) -> list[JobRecord]:
        from launcher.runtime.jobspec import JobRecord

        return [JobRecord.from_json(j) for j in self.call("GET", f"/clusters/{cluster}/queue")]

    def cluster_nodes(self, cluster: str) -> list[NodeView]:
        """The server's `GET /clusters/NAME/nodes` (the dashboard's node table reads it
        too); fields a newer server adds are left out, missing ones take defaults."""
        import dataclasses

        from launcher.api.clusters import NodeView

        known = {f.name for f in dataclasses.fields(NodeView)}
        return [NodeView(**{k: v for k, v in n.items() if k in known})
                for n in self.call("GET", f"/clusters/{cluster}/nodes")]

    def logs(self, cluster: str, job_id: int | None, follow: bool,
             on_line: LineCallback) -> JobRecord:
        from launcher.runtime.jobspec import JobRecord

        params: dict[str, Any] = {"follow": follow}
        if job_id is not None:
            params["job_id"] = job_id
        return JobRecord.from_json(self._follow(f"/clusters/{cluster}/logs", params, on_line))

    def cancel(self, cluster: str, job_ids: Sequence[int] | None) -> CancelResult:
        from launcher.runtime.agent_client import CancelResult

        d = self.call("POST", f"/clusters/{cluster}/cancel",
                      json={"job_ids": None if job_ids is None else list(job_ids)})
        return CancelResult(**{k: tuple(v) for k, v in d.items()})

    def stop(self, cluster: str) -> None:
        self.call("POST", f"/clusters/{cluster}/stop")

    def start(self, cluster: str) -> None:
        self.call("POST", f"/clusters/{cluster}/start")

    def down_many(self, names: Sequence[str]) -> list[tuple[str, LauncherError | None]]:
        out = self.call("POST", "/clusters/down", json={"names": list(names)},
                        timeout=httpx.Timeout(None, connect=5.0))
        return [(o["name"], None if o["error"] is None else _error(o, 400)) for o in out]

    def autostop(self, cluster: str, idle_minutes: float | None, down: bool) -> None:
        self.call("POST", f"/clusters/{cluster}/autostop",
                  json={"idle_minutes": idle_minutes, "down": down})

    # ---- managed jobs

    def _task_body(self, task: Task, name: str | None = None) -> dict[str, Any]:
        """The task as the server takes it; its workdir and local file_mounts uploaded
        first (once per task object: feasibility then launch upload once)."""
        key = id(task)
        if self._uploaded.get(key, (None, None))[0] is not task:
            self._uploaded[key] = (task, self.upload(task))
        return {"task": task.to_dict(), "secrets": dict(task.secrets or {}),
                "source": task.source_path, "name": name, "uploads": self._uploaded[key][1]}

    def upload(self, task: Task) -> dict[str, Any] | None:
        """Upload what the server lacks of `task`'s local files; the manifest's JSON
        (None when the task has no local files). One stderr line says what was sent."""
        from launcher.runtime.upload_manifest import build_manifest, local_roots

        if not local_roots(task):
            return None
        limit = int(self.info().get("max_upload_bytes") or 0) or None
        manifest = build_manifest(task, max_root_bytes=limit)
        data = manifest.to_json()
        missing = set(self.call("POST", "/uploads/missing", json={"manifest": data})["missing"])
        sent = files = 0
        for root in manifest.roots:
            todo: dict[str, tuple[str, int]] = {}
            for f in root.files:
                if f.sha256 in missing and f.link is None:
                    todo[f.sha256] = (os.path.join(root.source, f.path) if f.path
                                      else root.source, f.size)
            missing -= todo.keys()
            if todo:
                got = self.call("POST", "/uploads/blobs", content=_tar_stream(todo),
                                headers={"Content-Type": "application/x-tar"},
                                timeout=httpx.Timeout(None, connect=5.0))
                sent += int(got["bytes"])
                files += int(got["files"])
        total = sum(len(r.files) for r in manifest.roots)
        _stderr(f"Uploaded {files} of {total} file(s), {sent} bytes ({total - files} "
                "already on the server).")
        return data

    def jobs_check_feasible(self, task: Task) -> BestPlacement:
        return BestPlacement(**self.call("POST", "/jobs/feasible", json=self._task_body(task)))

    def jobs_launch(self, task: Task, name: str | None,
                    on_line: LineCallback | None = None) -> ManagedJob:
        from launcher.api.jobs import ManagedJob

        rid = self.call("POST", "/jobs/launch", json=self._task_body(task, name))["request_id"]
        try:
            row = self.request_follow(rid, on_line or (lambda _: None))
        except KeyboardInterrupt:
            raise RequestDetached(
                f"Detached; request {rid} goes on on the server. `launcher api logs {rid}` "
                f"re-attaches, `launcher api cancel {rid}` cancels it.") from None
        if row["status"] == "FAILED":
            raise _error(row, 400)
        if row["status"] == "CANCELLED":
            raise LauncherError(f"Request {rid} was cancelled.")
        return ManagedJob(**row["result"])

    def request_follow(self, rid: str, on_line: LineCallback,
                       on_event: LineCallback | None = None) -> dict[str, Any]:
        """Stream request `rid`'s log: output lines to `on_line`, progress lines to
        `on_event` (default: `on_line` too); returns its final row."""
        with self._stream(f"/requests/{rid}/logs") as items:
            for item in items:
                if "line" in item:
                    (on_line if item.get("fd") == 1 or on_event is None else on_event)(
                        item["line"])
                elif "request" in item:
                    if item["request"] is None:
                        raise LauncherError(f"No request {rid!r}.")
                    return dict(item["request"])
        raise LauncherError(f"The server at {self.endpoint} ended the stream early; "
                            f"`launcher api logs {rid}` re-attaches.")

    def request_cancel(self, rid: str) -> dict[str, Any]:
        return dict(self.call("POST", f"/requests/{rid}/cancel"))

    def jobs_queue(self, all_users: bool) -> list[JobSummary]:
        from launcher.jobs.accounting import JobSummary

        return [JobSummary(**r) for r in self.call("GET", "/jobs", params={"all_users": all_users})]

    def jobs_status(self, job_id: int) -> JobSummary:
        from launcher.jobs.accounting import JobSummary

        return JobSummary(**self.call("GET", f"/jobs/{job_id}"))

    def jobs_detail(self, job_id: int) -> ManagedJobDetail:
        from launcher.api.jobs import AttemptView, ManagedJobDetail, PolicySwitch
        from launcher.jobs.accounting import JobSummary
        from launcher.jobs.store import EventRow

        d = self.call("GET", f"/jobs/{job_id}/detail")
        return ManagedJobDetail(JobSummary(**d["summary"]),
                                [AttemptView(**a) for a in d["attempts"]],
                                [EventRow(**e) for e in d["events"]],
                                [PolicySwitch(**p) for p in d.get("policy_switches", [])])

    def jobs_cancel(self, job_id: int) -> JobSummary:
        from launcher.jobs.accounting import JobSummary

        return JobSummary(**self.call("POST", f"/jobs/{job_id}/cancel"))

    def jobs_wait(self, job_id: int, timeout: float | None) -> JobSummary:
        from launcher.jobs.accounting import JobSummary

        params = {} if timeout is None else {"timeout": timeout}
        return JobSummary(**self.call("GET", f"/jobs/{job_id}/wait", params=params,
                                      timeout=httpx.Timeout(None, connect=5.0)))

    def jobs_logs(self, job_id: int, on_line: LineCallback, follow: bool) -> JobSummary:
        from launcher.jobs.accounting import JobSummary

        return JobSummary(**self._follow(f"/jobs/{job_id}/logs", {"follow": follow}, on_line))

    def controller_log_lines(self, job_id: int) -> list[str]:
        return list(self.call("GET", f"/jobs/{job_id}/controller-log"))

    def pipeline_stage_ids(self, job_id: int) -> list[int]:
        return list(self.call("GET", f"/jobs/{job_id}/stages"))

    def ensure_controller(self) -> ControllerInfo | None:
        return None  # the server runs its controller all the time

    # ---- spending, users, the server

    def cost_report(self, days: float) -> CostReport:
        from launcher.api.cost_report import CostLine, CostReport

        d = self.call("GET", "/cost-report", params={"days": days})
        return CostReport(since=d["since"], until=d["until"], days=d["days"],
                          lines=tuple(CostLine(**ln) for ln in d["lines"]),
                          total_cost=d["total_cost"], total_node_hours=d["total_node_hours"],
                          clusters_cost=d["clusters_cost"],
                          managed_jobs_cost=d["managed_jobs_cost"], by_cloud=d["by_cloud"],
                          by_job={int(k): v for k, v in d["by_job"].items()})

    def users_list(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/users"))

    def users_create(self, name: str, role: str) -> str:
        return str(self.call("POST", "/users", json={"name": name, "role": role})["token"])

    def users_rotate(self, name: str) -> str:
        return str(self.call("POST", f"/users/{name}/rotate")["token"])

    def users_delete(self, name: str) -> None:
        self.call("DELETE", f"/users/{name}")

    def info(self) -> dict[str, Any]:
        return dict(self.call("GET", "/info"))
