"""One interface for the CLI's stateful verbs, two implementations.

`Backend` is what `launcher launch/exec/check/status/queue/logs/cancel/stop/start/down/
autostop`, `launcher jobs launch/queue/logs/cancel`, `cost-report` and `users ...` call:

- `EmbeddedBackend` (here): the `launcher.api` functions in this process, on this
  machine's `LAUNCHER_HOME` (the default: no server needed);
- `launcher.client.remote.RemoteBackend`: the same calls over HTTP to a server
  (`launcher api login`), returning the same types.

`launcher.client.backend()` chooses between them (the only place that does). Both
return the same dataclasses, so the CLI renders one way and the output, `--json`
and exit codes are the same whichever runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from launcher.api.cluster_common import LaunchResult
    from launcher.api.clusters import ClusterStatusView, NodeView
    from launcher.api.cost_report import CostReport
    from launcher.api.jobs import ManagedJob, ManagedJobDetail
    from launcher.api.ssh_pools import PoolView
    from launcher.api.state_check import StateHealth
    from launcher.errors import LauncherError
    from launcher.jobs.accounting import JobSummary
    from launcher.jobs.daemon import ControllerInfo
    from launcher.provisioning.failover import ConfirmCallback
    from launcher.runtime.agent_client import CancelResult
    from launcher.runtime.jobspec import JobRecord
    from launcher.task.model import Task

LineCallback = Callable[[str], None]


@dataclass(frozen=True)
class BestPlacement:
    """Where a managed job would start now (what `jobs launch` asks to confirm)."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    hourly_cost: float
    accelerator: str | None = None
    accelerator_count: float = 0.0


@dataclass(frozen=True)
class CheckReport:
    """What `launcher check` shows: the state DB's health, every cloud's (enabled,
    reason), and the SSH pools' hosts."""

    state: StateHealth
    clouds: dict[str, tuple[bool, str]]
    pools: list[PoolView]


class Backend(Protocol):
    """The calls the CLI makes for its stateful verbs (see the module docstring)."""

    remote: bool

    # running tasks (`launch`'s `confirm` is asked before paying for a new placement)
    def launch(self, task: Task, cluster: str | None, *, detach_run: bool,
               idle_minutes: float | None, down: bool, yes: bool,
               confirm: ConfirmCallback | None, on_line: LineCallback,
               on_setup_line: LineCallback, on_event: LineCallback,
               retry_until_up: bool) -> LaunchResult: ...
    def exec(self, cluster: str, what: Task | str, *, detach_run: bool,
             on_line: LineCallback, on_event: LineCallback) -> LaunchResult: ...
    def check(self) -> CheckReport: ...

    # clusters
    def status(self, refresh: bool, all_users: bool) -> tuple[list[ClusterStatusView], list[str]]: ...
    def cluster_names(self) -> list[str]: ...
    def unknown_clusters(self, names: Sequence[str]) -> list[tuple[str, LauncherError]]: ...
    def queue(self, cluster: str) -> list[JobRecord]: ...
    def cluster_nodes(self, cluster: str) -> list[NodeView]: ...
    def logs(self, cluster: str, job_id: int | None, follow: bool,
             on_line: LineCallback) -> JobRecord: ...
    def cancel(self, cluster: str, job_ids: Sequence[int] | None) -> CancelResult: ...
    def stop(self, cluster: str) -> None: ...
    def start(self, cluster: str) -> None: ...
    def down_many(self, names: Sequence[str]) -> list[tuple[str, LauncherError | None]]: ...
    def autostop(self, cluster: str, idle_minutes: float | None, down: bool) -> None: ...
    # managed jobs
    def jobs_check_feasible(self, task: Task) -> BestPlacement: ...
    def jobs_launch(self, task: Task, name: str | None,
                    on_line: LineCallback | None = None) -> ManagedJob: ...
    def jobs_queue(self, all_users: bool) -> list[JobSummary]: ...
    def jobs_status(self, job_id: int) -> JobSummary: ...
    def jobs_detail(self, job_id: int) -> ManagedJobDetail: ...
    def jobs_cancel(self, job_id: int) -> JobSummary: ...
    def jobs_wait(self, job_id: int, timeout: float | None) -> JobSummary: ...
    def jobs_logs(self, job_id: int, on_line: LineCallback, follow: bool) -> JobSummary: ...
    def controller_log_lines(self, job_id: int) -> list[str]: ...
    def pipeline_stage_ids(self, job_id: int) -> list[int]: ...
    def ensure_controller(self) -> ControllerInfo | None: ...
    # spending
    def cost_report(self, days: float) -> CostReport: ...
    # users (the server's; embedded: this home's, for a server started on it)
    def users_list(self) -> list[dict[str, Any]]: ...
    def users_create(self, name: str, role: str) -> str: ...
    def users_rotate(self, name: str) -> str: ...
    def users_delete(self, name: str) -> None: ...


class EmbeddedBackend:
    """`Backend` over `launcher.api` in this process. Everything here is yours, so
    `all_users` changes nothing."""

    remote = False

    def launch(self, task: Task, cluster: str | None, *, detach_run: bool,
               idle_minutes: float | None, down: bool, yes: bool,
               confirm: ConfirmCallback | None, on_line: LineCallback,
               on_setup_line: LineCallback, on_event: LineCallback,
               retry_until_up: bool) -> LaunchResult:
        from launcher.api.launch import launch

        return launch(task, cluster, detach_run=detach_run, idle_minutes=idle_minutes,
                      down=down, yes=yes, confirm=confirm, on_line=on_line,
                      on_setup_line=on_setup_line, on_event=on_event,
                      retry_until_up=retry_until_up)

    def exec(self, cluster: str, what: Task | str, *, detach_run: bool,
             on_line: LineCallback, on_event: LineCallback) -> LaunchResult:
        from launcher.api.exec_job import exec_

        return exec_(cluster, what, detach_run=detach_run, on_line=on_line, on_event=on_event)

    def check(self) -> CheckReport:
        return check_report()

    def status(self, refresh: bool, all_users: bool) -> tuple[list[ClusterStatusView], list[str]]:
        from launcher.api.clusters import status

        notes: list[str] = []
        rows = status(refresh=refresh, notes=notes)
        return rows, notes

    def cluster_names(self) -> list[str]:
        from launcher.api.clusters import cluster_names

        return cluster_names()

    def unknown_clusters(self, names: Sequence[str]) -> list[tuple[str, LauncherError]]:
        """(name, the error `down` would raise) for each of `names` the state DB does
        not know: said before asking to confirm anything about them."""
        from launcher.api.clusters import unknown_clusters

        return list(unknown_clusters(names))

    def queue(self, cluster: str) -> list[JobRecord]:
        from launcher.api.clusters import queue

        return queue(cluster)

    def cluster_nodes(self, cluster: str) -> list[NodeView]:
        from launcher.api.clusters import cluster_nodes

        return cluster_nodes(cluster)

    def logs(self, cluster: str, job_id: int | None, follow: bool,
             on_line: LineCallback) -> JobRecord:
        from launcher.api.clusters import logs

        return logs(cluster, job_id, follow=follow, on_line=on_line)

    def cancel(self, cluster: str, job_ids: Sequence[int] | None) -> CancelResult:
        from launcher.api.clusters import cancel

        return cancel(cluster, job_ids)

    def stop(self, cluster: str) -> None:
        from launcher.api.clusters import stop

        stop(cluster)

    def start(self, cluster: str) -> None:
        from launcher.api.clusters import start

        start(cluster)

    def down_many(self, names: Sequence[str]) -> list[tuple[str, LauncherError | None]]:
        from launcher.api.clusters import down_many

        return down_many(names)

    def autostop(self, cluster: str, idle_minutes: float | None, down: bool) -> None:
        from launcher.api.clusters import autostop

        autostop(cluster, idle_minutes, down=down)

    def jobs_check_feasible(self, task: Task) -> BestPlacement:
        from launcher.api.jobs import jobs_check_feasible

        p = jobs_check_feasible(task)
        return best_placement(p.placements[p.chosen])

    def jobs_launch(self, task: Task, name: str | None,
                    on_line: LineCallback | None = None) -> ManagedJob:
        from launcher.api.jobs import jobs_launch

        return jobs_launch(task, name=name, check=False)

    def jobs_queue(self, all_users: bool) -> list[JobSummary]:
        from launcher.api.jobs import jobs_queue

        return jobs_queue()

    def jobs_status(self, job_id: int) -> JobSummary:
        from launcher.api.jobs import jobs_status

        return jobs_status(job_id)

    def jobs_detail(self, job_id: int) -> ManagedJobDetail:
        from launcher.api.jobs import jobs_detail

        return jobs_detail(job_id)

    def jobs_cancel(self, job_id: int) -> JobSummary:
        from launcher.api.jobs import jobs_cancel

        return jobs_cancel(job_id)

    def jobs_wait(self, job_id: int, timeout: float | None) -> JobSummary:
        from launcher.api.jobs import jobs_wait

        return jobs_wait(job_id, timeout=timeout)

    def jobs_logs(self, job_id: int, on_line: LineCallback, follow: bool) -> JobSummary:
        from launcher.api.jobs import jobs_logs

        return jobs_logs(job_id, on_line, follow=follow)

    def controller_log_lines(self, job_id: int) -> list[str]:
        from launcher.api.jobs import controller_log_lines

        return controller_log_lines(job_id)

    def pipeline_stage_ids(self, job_id: int) -> list[int]:
        from launcher.api.pipelines import pipeline_stage_ids

        return list(pipeline_stage_ids(job_id))

    def ensure_controller(self) -> ControllerInfo | None:
        from launcher.api.jobs import ensure_controller

        return ensure_controller()

    def cost_report(self, days: float) -> CostReport:
        from launcher.api.cost_report import cost_report

        return cost_report(days)

    def users_list(self) -> list[dict[str, Any]]:
        from launcher.api.server_store import ServerStore

        with ServerStore() as s:
            return [u.to_json() for u in s.users()]

    def users_create(self, name: str, role: str) -> str:
        from launcher.api.server_store import ServerStore

        with ServerStore() as s:
            return s.create_user(name, role)

    def users_rotate(self, name: str) -> str:
        from launcher.api.server_store import ServerStore

        with ServerStore() as s:
            return s.rotate(name)

    def users_delete(self, name: str) -> None:
        from launcher.api.server_store import ServerStore

        with ServerStore() as s:
            s.delete_user(name)


def best_placement(p: Any) -> BestPlacement:
    """The BestPlacement of an optimizer Placement."""
    return BestPlacement(p.cloud, p.region, p.zone, p.instance_type, p.num_nodes, p.use_spot,
                         p.hourly_cost, p.accelerator, p.accelerator_count)


def check_report() -> CheckReport:
    """`launcher check`'s data on this machine (the server's, through a server)."""
    from launcher import api
    from launcher.api.ssh_pools import ssh_pools
    from launcher.catalog import query

    state = api.check_state()  # a damaged state DB is the first thing to fix
    catalog_clouds = [c.cloud for c in query.status().clouds]
    names = list(dict.fromkeys([*api.enabled_clouds().keys(), *catalog_clouds]))
    clouds = {n: (s.enabled, s.reason) for n, s in api.enabled_clouds(names).items()}
    # every host's state: free, held, quarantined (until when, why)
    return CheckReport(state, clouds, ssh_pools())
