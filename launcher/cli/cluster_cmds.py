"""Cluster commands: launch, exec, queue, logs, cancel, status, stop, start, down, autostop.

Thin: parse, call launcher.api, render. Job output is written to stdout as is
(no markup); progress and errors go to stderr. `launch`, `exec` and `logs`
exit with the job's exit code when they follow it to the end.

Confirmation policy for `launch` without `-y`: a free placement (the local
cloud, your own SSH machines: $0/h) never asks. A paid placement is shown and
confirmed on a terminal; when stdin is not a terminal the launch is refused
with a hint to pass `-y` (no silent spending from scripts).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.catalog.money import format_money
from launcher.cli.app import ENV_HELP, SECRET_HELP, app, print_json
from launcher.cli.completion import complete_cluster_name

if TYPE_CHECKING:
    from launcher.api.clusters import NodeView
    from launcher.optimizer.ranking import Placement
    from launcher.task.model import Task

# `launcher local ...` (kept in its own module)
from launcher.cli import local_cmds  # noqa: E402,F401  isort: skip
# `launcher ssh ...`
from launcher.cli import ssh_cmds  # noqa: E402,F401  isort: skip


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _err_line(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _event(message: str) -> None:
    # plain writes, not rich: `exec` must not pay rich's import for one progress line
    if sys.stderr.isatty():
        message = f"\x1b[2m{message}\x1b[0m"
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _say(message: str) -> None:
    """A plain line on stderr (no rich: short commands should not pay its import)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _load_task(path: str, env: list[str] | None, cloud: str | None, gpus: str | None,
               num_nodes: int | None, secret: list[str] | None = None,
               require_values: bool = True, infra: str | None = None,
               use_spot: bool | None = None) -> Task:
    from launcher.cli.app import parse_assignments
    from launcher.task.model import Task

    task = Task.from_yaml(path, env_overrides=parse_assignments(env, "--env") or None,
                          secret_overrides=parse_assignments(secret, "--secret") or None,
                          require_values=require_values)
    resources: dict[str, object] = {}
    if cloud:
        resources["cloud"] = cloud
    if infra:
        resources["infra"] = infra
    if use_spot is not None:
        resources["use_spot"] = use_spot
    if gpus:
        resources["accelerators"] = gpus
    if resources or num_nodes is not None:
        task = task.with_overrides(resources=resources or None, num_nodes=num_nodes)
    return task


def _confirm(placement: Placement) -> bool:
    from launcher.api.launch import LaunchAbortedError

    where = "/".join(x for x in (placement.cloud, placement.region, placement.zone) if x)
    acc = f"{placement.accelerator}:{placement.accelerator_count:g}" if placement.accelerator else "no GPU"
    spot = " spot" if placement.use_spot else ""
    desc = (f"{placement.num_nodes}x {placement.instance_type}{spot} ({acc}) in {where} "
            f"at {format_money(placement.hourly_cost)}/h")
    if not sys.stdin.isatty():
        raise LaunchAbortedError(
            f"Launching {desc} costs money and needs confirmation, but stdin is not a "
            "terminal: pass -y to launch without asking."
        )
    _say(f"Launch {desc}?")
    return typer.confirm("Proceed?", default=True, err=True)


class _Progress:
    """Tracks what the launch did so far, for a useful message on Ctrl-C."""

    def __init__(self) -> None:
        self.job_id: int | None = None

    def event(self, message: str) -> None:
        if message.startswith("Job ") and " submitted" in message:
            self.job_id = int(message.split()[1])
        _event(message)


def _report_failover(exc: Exception, json_out: bool) -> int:
    """Every placement failed: the failover history as a table on stderr (or, with
    --json, as {"error", "attempts"} on stdout). Returns the exit code."""
    from launcher.clouds.base import ProvisionFailedError

    assert isinstance(exc, ProvisionFailedError)
    summary = str(exc).splitlines()[0]
    if json_out:
        print_json({
            "error": summary,
            "attempts": [
                {"cloud": a.cloud, "region": a.region, "zone": a.zone,
                 "instance_type": a.instance_type, "error_type": a.error_type,
                 "message": a.message}
                for a in exc.attempts
            ],
        })
        return exc.exit_code
    from launcher.cli.table import Table, print_table

    table = Table()
    for col in ("CLOUD", "REGION", "ZONE", "INSTANCE TYPE", "ERROR", "MESSAGE"):
        table.add_column(col)
    for a in exc.attempts:
        table.add_row(a.cloud, a.region, a.zone or "-", a.instance_type, a.error_type,
                      a.message, style="red" if a.error_type == "InvalidRequestError" else None)
    _say("Failover history:")
    print_table(table, sys.stderr)
    _say(f"Error: {summary}")
    return exc.exit_code


def _report_job_end(cluster: str, job_id: int | None, status: str | None, exit_code: int | None,
                    failed_rank: int | None, reason: str | None) -> None:
    if status is None or status == "SUCCEEDED":
        return
    detail = reason or (f"rank {failed_rank} exited with {exit_code}" if failed_rank is not None else "")
    text = f"Job {job_id} on {cluster} {status}" + (f": {detail}" if detail else "")
    _say(f"\x1b[31m{text}\x1b[0m" if sys.stderr.isatty() else text)


@app.command("launch")
def launch_cmd(
    task_file: Annotated[str, typer.Argument(help="Task YAML file.", metavar="TASK")],
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Cluster name (reused if it exists).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dryrun: Annotated[bool, typer.Option("--dryrun", help="Show the plan; launch nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="With --dryrun --json: every placement, not the best 100.")] = False,
    detach_run: Annotated[bool, typer.Option("--detach-run", "-d", help="Submit the job and return.")] = False,
    idle_minutes: Annotated[float | None, typer.Option("--idle-minutes-to-autostop", "-i", help="Autostop after this many idle minutes (fractions allowed).")] = None,
    down: Annotated[bool, typer.Option("--down", help="Autostop tears the cluster down (alone: right after the job).")] = False,
    env: Annotated[list[str] | None, typer.Option("--env", metavar="NAME[=VALUE]", help=ENV_HELP + " Overrides the task's envs.")] = None,
    secret: Annotated[list[str] | None, typer.Option("--secret", metavar="NAME[=VALUE]", help=SECRET_HELP)] = None,
    cloud: Annotated[str | None, typer.Option("--cloud", help="Override resources.cloud.")] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="Override resources.accelerators (e.g. H100:8).")] = None,
    num_nodes: Annotated[int | None, typer.Option("--num-nodes", help="Override num_nodes.")] = None,
    infra: Annotated[str | None, typer.Option("--infra", help="Override the location: cloud[/region[/zone]] (e.g. aws/us-east-1).")] = None,
    use_spot: Annotated[bool | None, typer.Option("--use-spot/--no-use-spot", help="Override resources.use_spot.")] = None,
    retry_until_up: Annotated[bool, typer.Option("--retry-until-up", help="When every placement fails for capacity or quota, retry the whole plan with backoff (30 s doubling to 10 min) until it comes up; Ctrl-C stops.")] = False,
) -> int:
    """Launch a task on a new or existing cluster and stream its output."""
    task = _load_task(task_file, env, cloud, gpus, num_nodes, secret, require_values=not dryrun,
                      infra=infra, use_spot=use_spot)
    if dryrun:
        from launcher.api.planning import plan
        from launcher.cli.catalog_cmds import plan_and_render

        plan_and_render(lambda: plan(task, verify_credentials=False), as_json=json_out,
                        show_all=show_all)
        return 0
    task.check_local_paths()
    for note in task.notes:
        _event(note)
    from launcher.client import backend

    b = backend()  # through a server: a request there, its log streamed here
    progress = _Progress()
    name_hint = cluster
    if cluster is None and not b.remote:  # the server names it (and says so)
        from launcher.api.launch import generate_cluster_name
        from launcher.state.db import StateDB

        with StateDB() as db:
            name_hint = generate_cluster_name(db)
        _event(f"Cluster name: {name_hint}")
    from launcher.clouds.base import ProvisionFailedError

    try:
        result = b.launch(
            task,
            name_hint,
            detach_run=detach_run,
            idle_minutes=idle_minutes,
            down=down,
            yes=yes,
            confirm=_confirm,
            on_line=_err_line if json_out else _out,
            on_setup_line=_err_line if json_out else _out,
            on_event=progress.event,
            retry_until_up=retry_until_up,
        )
    except ProvisionFailedError as exc:
        return _report_failover(exc, json_out)
    except KeyboardInterrupt:
        if b.remote or name_hint is None:  # before the request was made: nothing was
            raise
        if progress.job_id is not None:
            _say(
                f"Interrupted. Job {progress.job_id} keeps running on {name_hint}: "
                f"`launcher logs {name_hint} {progress.job_id}` to follow it, "
                f"`launcher cancel {name_hint} {progress.job_id}` to stop it."
            )
        else:
            _say_interrupted_before_job(name_hint)
        raise
    if json_out:
        print_json(
            {
                "cluster": result.cluster_name,
                "job_id": result.job_id,
                "job_status": result.job_status,
                "exit_code": result.exit_code,
                "created": result.created,
                "cloud": result.cloud,
                "region": result.region,
                "zone": result.zone,
                "num_nodes": result.num_nodes,
                "hourly_cost": result.hourly_cost,
            }
        )
    _report_job_end(result.cluster_name, result.job_id, result.job_status, result.exit_code,
                    result.failed_rank, result.reason)
    if result.job_id is not None and result.exit_code is None:
        _event(f"Job {result.job_id} runs detached: `launcher logs {result.cluster_name} {result.job_id}`")
    return result.exit_code or 0


def _say_interrupted_before_job(name: str) -> None:
    """After Ctrl-C before the job was submitted: say what is left (a cluster, or nothing)."""
    import contextlib

    from launcher.state.db import StateDB

    with contextlib.suppress(Exception), StateDB() as db:
        rec = db.get_cluster(name)
        if rec is None:
            _say("Interrupted before the job was submitted; no cluster was left behind.")
        else:
            _say(f"Interrupted before the job was submitted; cluster {name} is {rec.status.value}. "
                 f"Launch again with `-c {name}` to reuse it, or `launcher down {name}` to remove it.")


@app.command("exec")
def exec_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    target: Annotated[list[str], typer.Argument(help="TASK.yaml, or -- COMMAND...", metavar="TASK|-- CMD")],
    detach_run: Annotated[bool, typer.Option("--detach-run", "-d", help="Submit the job and return.")] = False,
    env: Annotated[list[str] | None, typer.Option("--env", metavar="NAME[=VALUE]", help=ENV_HELP + " For a task file.")] = None,
    secret: Annotated[list[str] | None, typer.Option("--secret", metavar="NAME[=VALUE]", help=SECRET_HELP + " For a task file.")] = None,
) -> int:
    """Run a task (no setup) or a command (head node) on a cluster, as a new job."""
    import os

    from launcher.client import backend

    if len(target) == 1 and target[0].endswith((".yaml", ".yml")) and not os.path.exists(target[0]):
        from launcher.errors import UsageError

        raise UsageError(
            f"Task file {target[0]!r} not found. To run a shell command instead, put it after "
            f"`--`: `launcher exec {cluster} -- CMD`.")
    if len(target) == 1 and target[0].endswith((".yaml", ".yml")):
        from launcher.cli.app import parse_assignments
        from launcher.task.model import Task

        task = Task.from_yaml(target[0], env_overrides=parse_assignments(env, "--env") or None,
                              secret_overrides=parse_assignments(secret, "--secret") or None)
        task.check_local_paths()
        what: Task | str = task
    else:  # one argument is a shell command as is; several are words whose quoting must survive
        import shlex

        what = target[0] if len(target) == 1 else shlex.join(target)
    progress = _Progress()
    try:
        result = backend().exec(cluster, what, detach_run=detach_run, on_line=_out,
                                on_event=progress.event)
    except KeyboardInterrupt:
        if progress.job_id is not None:
            j = progress.job_id
            _say(f"Interrupted. Job {j} keeps running on {cluster}: follow it with "
                 f"`launcher logs {cluster} {j}`, stop it with `launcher cancel {cluster} {j}`.")
        raise
    _report_job_end(cluster, result.job_id, result.job_status, result.exit_code,
                    result.failed_rank, result.reason)
    return result.exit_code or 0


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    if time.time() - ts < 20 * 3600:
        return time.strftime("%H:%M:%S", time.localtime(ts))
    return time.strftime("%b %d %H:%M", time.localtime(ts))


def _fmt_duration(start: float | None, end: float | None) -> str:
    from launcher.cli.table import format_duration

    if start is None:
        return "-"
    return format_duration((end if end is not None else time.time()) - start)


@app.command("queue")
def queue_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> int:
    """The cluster's job queue."""
    from launcher.api.clusters import job_json
    from launcher.client import backend

    jobs = backend().queue(cluster)
    if json_out:
        print_json([job_json(j) for j in jobs])
        return 0
    from launcher.cli.table import Table, print_table

    if not jobs:
        _say(f"No jobs on {cluster} yet.")
        return 0
    table = Table()
    for col in ("ID", "NAME", "STATUS", "SUBMITTED", "DURATION", "EXIT", "DETAIL"):
        table.add_column(col)
    for j in jobs:
        table.add_row(
            str(j.id), j.name or "-", j.status.value, _fmt_time(j.submitted_at),
            _fmt_duration(j.started_at, j.ended_at),
            "-" if j.exit_code is None else str(j.exit_code),
            "; ".join(x for x in (j.reason, j.log_truncated) if x),
        )
    print_table(table)
    return 0


@app.command("logs")
def logs_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    job_id: Annotated[int | None, typer.Argument(help="Job id (default: the latest job).")] = None,
    no_follow: Annotated[bool, typer.Option("--no-follow", help="Print what is there and return.")] = False,
) -> int:
    """A job's output, rank-prefixed; follows it until it ends unless --no-follow."""
    from launcher.api.clusters import exit_code_of
    from launcher.client import backend

    record = backend().logs(cluster, job_id, not no_follow, _out)
    if record.status.is_terminal:
        _report_job_end(cluster, record.id, record.status.value, record.exit_code,
                        record.failed_rank, record.reason)
        return exit_code_of(record)
    return 0


@app.command("cancel")
def cancel_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    job_ids: Annotated[list[int] | None, typer.Argument(help="Job ids (default: the latest pending or running job).")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", "-a", help="Cancel every pending or running job.")] = False,
) -> int:
    """Cancel jobs on a cluster (no ids: its latest pending or running job, as in SkyPilot)."""
    from launcher.client import backend

    b = backend()
    if not job_ids and not all_jobs:
        active = [j.id for j in b.queue(cluster) if not j.status.is_terminal]
        if not active:
            _say(f"No pending or running jobs on {cluster}.")
            return 0
        job_ids = [max(active)]
    result = b.cancel(cluster, None if all_jobs else job_ids)
    if result.cancelled:
        _say(f"Cancelled job(s) {_ids(result.cancelled)} on {cluster}.")
    if result.cancelling:
        _say(f"Job(s) {_ids(result.cancelling)} are still stopping.")
    if result.already_finished:
        _say(f"Job(s) {_ids(result.already_finished)} had already finished.")
    if not (result.cancelled or result.cancelling or result.already_finished):
        _say(f"No pending or running jobs on {cluster}.")
    return 0


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(map(str, ids))


@app.command("status")
def status_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="Only these clusters.", autocompletion=complete_cluster_name)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", "-r", help="Ask the clouds for the nodes' state first.")] = False,
    all_users: Annotated[bool, typer.Option("--all-users", help="On a server, as an admin: every user's clusters.")] = False,
    nodes: Annotated[bool, typer.Option("--nodes", help="Also each cluster's nodes: IPs, last reported state and health finding, when and by whom (`nodes` in --json).")] = False,
) -> int:
    """Your clusters (with --nodes, each one's nodes too)."""
    from dataclasses import asdict

    from launcher.client import backend

    be = backend()
    rows, notes = be.status(refresh, all_users)
    missing: list[str] = []
    if names:
        known = [r.name for r in rows]
        missing = [n for n in dict.fromkeys(names) if n not in known]
        rows = [r for r in rows if r.name in names]
        if missing:
            # a typo must not read as "you have no clusters"; exit 4 when nothing matched
            what = (f"Cluster {missing[0]!r} does not exist." if len(missing) == 1 else
                    f"Clusters not found: {', '.join(missing)}.")
            _say("Error: " + what
                 + (f" Known clusters: {', '.join(known)}." if known else " There are no clusters."))
    rc = 4 if missing and not rows else 0
    node_views = {r.name: be.cluster_nodes(r.name) for r in rows} if nodes else {}
    if json_out:
        for note in notes:  # e.g. orphans found by --refresh: never hidden, never in the JSON
            _say(note)
        print_json([r.to_json() | ({"nodes": [asdict(n) for n in node_views[r.name]]}
                                   if nodes else {}) for r in rows])
        return rc
    for note in notes:
        _say(note)
    if not rows:
        if not missing:
            _say("No clusters.")
        return rc
    from launcher.cli.table import Table, print_table

    table = Table()
    for col in ("NAME", "LAUNCHED", "RESOURCES", "WHERE", "STATUS", "$/H", "AUTOSTOP"):
        table.add_column(col, justify="right" if col == "$/H" else "left")
    colors = {"UP": "green", "INIT": "yellow", "STOPPED": "dim", "PREEMPTED": "red",
              "DEGRADED": "yellow"}
    for r in rows:
        where = "/".join(x for x in (r.cloud, r.region, r.zone) if x)
        auto = "-" if r.autostop_minutes is None else f"{r.autostop_minutes:g}m" + (" (down)" if r.autostop_down else "")
        status = r.status
        if status == "DEGRADED" and (r.status_reason or "").startswith("health: "):
            status = f"DEGRADED ({r.status_reason[len('health: '):]})"  # type: ignore[index]
        table.add_row(
            r.name, _fmt_time(r.launched_at), r.resources, where, status,
            format_money(r.hourly_cost), auto, style=colors.get(r.status),
        )
    print_table(table)
    if not refresh:  # a refresh printed its findings above
        for r in rows:
            if r.status_reason and r.status_seen_at is not None:
                _say(f"{r.name}: {r.status} as seen by `status --refresh` at "
                     f"{_fmt_time(r.status_seen_at)}: {r.status_reason} "
                     "(`launcher status --refresh` checks again)")
    for name, views in node_views.items():
        _print_nodes(name, views)
    return 0


def _print_nodes(cluster: str, views: list[NodeView]) -> None:
    """`status --nodes`: one cluster's node table (what `GET /clusters/NAME/nodes` and
    the dashboard's cluster page show). A row is red when its node is not up or failed
    its health check, yellow for a warning or a node on its way up."""
    from launcher.cli.table import Table, echo, print_table

    echo("")
    echo(f"Nodes of {cluster}:", style="bold")
    if not views:
        echo("  (no nodes recorded yet)", style="dim")
        return
    table = Table()
    for col in ("RANK", "NODE", "INTERNAL IP", "EXTERNAL IP", "STATE", "STATE SEEN",
                "HEALTH", "HEALTH SEEN"):
        table.add_column(col, justify="right" if col == "RANK" else "left",
                         min_width={"HEALTH": 12, "STATE SEEN": 14, "HEALTH SEEN": 14}.get(col))
    for n in views:
        health = "-" if n.health is None else (
            n.health + (f": {n.health_detail}" if n.health_detail else ""))
        bad = n.state in ("preempted", "unreachable", "terminated") or n.health == "fail"
        slow = n.state in ("provisioning", "pending") or n.health == "warn"
        table.add_row(
            str(n.rank), n.node_id, n.internal_ip, n.external_ip or "-", n.state,
            _seen(n.state_seen_at, n.state_source), health,
            "-" if n.health is None else _seen(n.health_seen_at, n.health_source),
            style="red" if bad else "yellow" if slow else None)
    print_table(table)


def _seen(at: float | None, source: str | None) -> str:
    """When and by whom a node's state or health was reported ("cluster status" alone:
    nothing reported since the cluster's status last changed)."""
    who = source or "?"
    return who if at is None else f"{_fmt_time(at)} by {who}"


def _names_or_all(names: list[str] | None, all_: bool, verb: str) -> list[str]:
    from launcher.errors import UsageError

    if all_:
        from launcher.client import backend

        return backend().cluster_names()
    if not names:
        raise UsageError(f"{verb}: give cluster names, or --all.")
    return names


@app.command("stop")
def stop_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="Cluster names.", autocompletion=complete_cluster_name)] = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Every cluster.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accepted as in SkyPilot; stop never asks.")] = False,
) -> int:
    """Stop clusters (disks kept; `launcher start` brings them back)."""
    from launcher.client import backend

    b = backend()
    for name in _names_or_all(names, all_, "stop"):
        b.stop(name)
        _say(f"Stopped {name}.")
    return 0


@app.command("start")
def start_cmd(
    names: Annotated[list[str], typer.Argument(help="Cluster names.", autocompletion=complete_cluster_name)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accepted as in SkyPilot; start never asks.")] = False,
) -> int:
    """Start stopped clusters."""
    from launcher.client import backend

    b = backend()
    for name in names:
        b.start(name)
        _say(f"Started {name}.")
    return 0


@app.command("down")
def down_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="Cluster names.", autocompletion=complete_cluster_name)] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Every cluster.")] = False,
    orphan: Annotated[str | None, typer.Option("--orphan", help="Remove everything (instances, security groups, placement groups, addresses...) tagged with this cluster name that no cluster here owns (listed by `status --refresh`); needs --cloud.", metavar="NAME")] = None,
    cloud: Annotated[str | None, typer.Option("--cloud", help="With --orphan: the cloud the instances run on.")] = None,
) -> int:
    """Terminate clusters and everything on them."""
    from launcher.client import backend
    from launcher.errors import LauncherError, UsageError

    if orphan is not None or cloud is not None:
        if orphan is None or cloud is None or names or all_:
            raise UsageError("down --orphan NAME --cloud CLOUD: give both, and no cluster names.")
        from launcher.api.clusters import down_orphan

        down_orphan(orphan, cloud)
        _say(f"Removed what was tagged {orphan!r} on {cloud}.")
        return 0
    targets = _names_or_all(names, all_, "down")
    if not targets:
        _say("No clusters.")
        return 0
    be = backend()
    exit_code = 0
    missing = be.unknown_clusters(targets)
    for _, not_found in missing:  # said before any question: there is nothing to confirm
        exit_code = exit_code or not_found.exit_code
        sys.stderr.write(f"Error: {not_found}\n")
    targets = [t for t in targets if t not in {name for name, _ in missing}]
    if not targets:
        return exit_code
    if not yes:
        if not sys.stdin.isatty():
            raise LauncherError(
                f"down {' '.join(targets)}: this deletes the cluster(s) and their data; "
                "pass -y to confirm (stdin is not a terminal)."
            )
        if not typer.confirm(f"Terminate {', '.join(targets)}?", default=False, err=True):
            raise typer.Abort()
    for name, error in be.down_many(targets):
        if error is None:
            _say(f"Terminated {name}.")
        else:
            exit_code = exit_code or error.exit_code
            sys.stderr.write(f"Error: {error}\n")
    return exit_code


@app.command("autostop")
def autostop_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    idle_minutes: Annotated[float | None, typer.Option("--idle-minutes", "-i", help="Idle minutes before autostop (fractions allowed; default 5, as in SkyPilot).")] = None,
    down: Annotated[bool, typer.Option("--down", help="Tear down instead of stopping.")] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Cancel autostop.")] = False,
) -> int:
    """Stop (or --down) a cluster after it has been idle for -i minutes (default 5)."""
    from launcher.client import backend
    from launcher.task.policies import DEFAULT_AUTOSTOP_MINUTES

    autostop = backend().autostop

    if cancel:
        autostop(cluster, None, False)
        _say(f"Autostop cancelled on {cluster}.")
        return 0
    if idle_minutes is None:
        idle_minutes = DEFAULT_AUTOSTOP_MINUTES
    autostop(cluster, idle_minutes, down)
    what = "taken down" if down else "stopped"
    _say(f"{cluster} will be {what} after {idle_minutes:g} idle minute(s).")
    return 0
