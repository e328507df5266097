"""`launcher jobs ...`: managed jobs that survive spot preemptions. A thin skin over
launcher.api.jobs (imported inside command bodies, like rich).

Exit codes of `jobs launch` (following the job) and `jobs logs`: 0 SUCCEEDED;
FAILED -> the job's exit code (1 if none); FAILED_SETUP 1; FAILED_NO_RESOURCE 3;
CANCELLED 1.
"""

from __future__ import annotations

import datetime as _dt
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.catalog.money import format_money
from launcher.cli.app import ENV_HELP, SECRET_HELP, app, console, err_console, print_json
from launcher.cli.completion import complete_managed_job_id

if TYPE_CHECKING:
    from launcher.jobs.accounting import JobSummary
    from launcher.task.pipeline import Pipeline

jobs_app = typer.Typer(
    rich_markup_mode=None,
    help="Managed jobs: run on spot, recover from preemptions, resume from checkpoints.",
    no_args_is_help=True,
)
controller_app = typer.Typer(rich_markup_mode=None, help="The managed-jobs controller process.", no_args_is_help=True)
jobs_app.add_typer(controller_app, name="controller")
app.add_typer(jobs_app, name="jobs")


def exit_code_for(summary: JobSummary, job_exit: int | None) -> int:
    status = summary.status
    if status == "SUCCEEDED":
        return 0
    if status == "FAILED":
        return job_exit if job_exit is not None and job_exit != 0 else 1
    if status == "FAILED_NO_RESOURCE":
        return 3
    return 1


def _final_exit(job_id: int, summary: JobSummary) -> int:
    from launcher.client import backend

    detail = backend().jobs_detail(job_id)
    exits = [a.exit_code for a in detail.attempts if a.exit_code is not None]
    return exit_code_for(summary, exits[-1] if exits else None)


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@jobs_app.command("launch")
def launch_cmd(
    task: Annotated[str, typer.Argument(metavar="TASK", help="Task YAML file.")],
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for confirmation.")] = False,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Job name.")] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "--detach-run", "-d",
                           help="Return once submitted; do not follow logs.")
    ] = False,
    env: Annotated[list[str] | None, typer.Option(
        "--env", metavar="NAME[=VALUE]", help=ENV_HELP + " Overrides the task's envs.")
    ] = None,
    secret: Annotated[list[str] | None, typer.Option(
        "--secret", metavar="NAME[=VALUE]", help=SECRET_HELP)
    ] = None,
    dryrun: Annotated[bool, typer.Option(
        "--dryrun", help="Show the plan (of every stage of a pipeline); submit nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="With --dryrun: machine-readable plan.")] = False,
    show_all: Annotated[bool, typer.Option(
        "--all", help="With --dryrun --json: every placement, not the best 100.")] = False,
) -> int:
    """Submit TASK as a managed job; follow its logs until it ends (unless --detach).

    A file of several YAML documents is a pipeline (SkyPilot's format): every stage runs
    as a managed job, one after another; a stage starts when the one before SUCCEEDED."""
    from launcher.cli.app import parse_assignments
    from launcher.client import backend
    from launcher.task.pipeline import load_pipeline

    pipeline = load_pipeline(task, env_overrides=parse_assignments(env, "--env") or None,
                             secret_overrides=parse_assignments(secret, "--secret") or None,
                             require_values=not dryrun)
    if dryrun:
        return _dryrun(pipeline, json_out, show_all)
    b = backend()
    if pipeline.is_pipeline:
        if b.remote:
            from launcher.errors import UsageError

            raise UsageError("Pipelines do not go through an API server yet: submit each "
                             "stage with `launcher jobs launch`, or `launcher api logout`.")
        return _launch_pipeline(pipeline, name, yes, detach)
    t = pipeline.stages[0]
    best = b.jobs_check_feasible(t)  # always, -y or not: an unsatisfiable task is refused
    if not yes and best.hourly_cost > 0:  # like `launch`: only a paid placement asks
        from launcher.api.launch import LaunchAbortedError

        where = "/".join(x for x in (best.cloud, best.region, best.zone) if x)
        desc = (f"managed job {name or t.name or task}: {best.num_nodes}x {best.instance_type} "
                f"{'spot ' if best.use_spot else ''}on {where} ({format_money(best.hourly_cost)}/h now; "
                "recoveries may move it)")
        if not sys.stdin.isatty():
            raise LaunchAbortedError(
                f"Launching {desc} costs money and needs confirmation, but stdin is not a "
                "terminal: pass -y to launch without asking.")
        err_console().print(f"Launch {desc}?")
        if not typer.confirm("Proceed?", default=True, err=True):
            raise typer.Abort()
    job = b.jobs_launch(t, name, on_line=None)
    err_console().print(
        f"Managed job {job.id} ({job.name}) submitted; LAUNCHER_TASK_ID={job.task_id}."
    )
    if detach:
        return 0
    try:
        summary = b.jobs_logs(job.id, _print_line, True)
    except KeyboardInterrupt:
        err_console().print(f"\nStopped following. The job keeps running; "
                            f"`launcher jobs logs {job.id}` to reattach.", soft_wrap=True)
        return 130
    err_console().print(f"Managed job {job.id} {summary.status} after {summary.recoveries} "
                        f"recovery(ies), {summary.restarts_on_errors} restart(s).")
    return _final_exit(job.id, summary)


def _dryrun(pipeline: Pipeline, json_out: bool, show_all: bool) -> int:
    """`jobs launch --dryrun`: the plan of the task, or of every stage of a pipeline."""
    from launcher.api.planning import plan
    from launcher.cli.catalog_cmds import plan_and_render, render_plan

    if not pipeline.is_pipeline:
        plan_and_render(lambda: plan(pipeline.stages[0], verify_credentials=False), as_json=json_out,
                        show_all=show_all)
        return 0
    from launcher.api.pipelines import pipeline_plan_json, plan_pipeline
    from launcher.api.planning import JSON_PLACEMENT_LIMIT

    stage_plans = plan_pipeline(pipeline)
    bad = next((sp for sp in stage_plans if sp.error is not None), None)
    if json_out:
        print_json(pipeline_plan_json(pipeline, stage_plans,
                                      None if show_all else JSON_PLACEMENT_LIMIT))
    else:
        title = f"Pipeline {pipeline.name}" if pipeline.name else "Pipeline"
        console().print(f"{title}: {len(stage_plans)} stages, run one after another "
                        "(each a managed job; a stage starts when the one before succeeded).")
        for sp in stage_plans:
            console().print(f"\nStage {sp.index + 1}/{len(stage_plans)}: {sp.name}")
            if sp.plan is not None:
                render_plan(sp.plan, False)
            else:
                console().print(f"no placement: {sp.error}")
    if bad is not None:
        from launcher.errors import NoPlacementError

        raise NoPlacementError(f"stage {bad.index + 1} ({bad.name}): {bad.error}")
    return 0


def _launch_pipeline(pipeline: Pipeline, name: str | None, yes: bool, detach: bool) -> int:
    """Submit every stage; follow them in order (unless --detach). Exit code: the last
    stage that ran's, as for one managed job."""
    from launcher.api import jobs as api
    from launcher.api.pipelines import jobs_launch_pipeline

    if not yes:
        for t in pipeline.stages:
            best = api.jobs_check_feasible(t)
            cost = best.placements[best.chosen].hourly_cost
            if cost > 0:  # like `launch`: only a paid placement asks
                from launcher.api.launch import LaunchAbortedError

                if not sys.stdin.isatty():
                    raise LaunchAbortedError(
                        f"The pipeline's stages cost money ({format_money(cost)}/h now for one) and need "
                        "confirmation, but stdin is not a terminal: pass -y to launch without "
                        "asking.")
                err_console().print(f"Launch pipeline {name or pipeline.name or ''} "
                                    f"({len(pipeline.stages)} managed jobs, in order)?")
                if not typer.confirm("Proceed?", default=True, err=True):
                    raise typer.Abort()
                break
    jobs = jobs_launch_pipeline(pipeline, name)
    err_console().print(
        f"Pipeline {jobs[0].id} submitted: stages " + ", ".join(
            f"{i + 1} = job {j.id} ({j.name})" for i, j in enumerate(jobs))
        + f". `launcher jobs cancel {jobs[0].id}` cancels the whole pipeline.", soft_wrap=True)
    if detach:
        return 0
    code = 0
    try:
        for j in jobs:
            summary = api.jobs_logs(j.id, _print_line, follow=True)
            err_console().print(f"Stage job {j.id} ({j.name}) {summary.status}.")
            code = _final_exit(j.id, summary)
            if summary.status != "SUCCEEDED":
                break
    except KeyboardInterrupt:
        err_console().print("\nStopped following. The pipeline keeps running; "
                            "`launcher jobs queue` shows its stages.", soft_wrap=True)
        return 130
    return code


def _ts(t: float | None) -> str:
    if t is None:
        return "-"
    return _dt.datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S")


def _dur(s: float | None) -> str:
    from launcher.cli.table import format_duration

    return format_duration(s)


def _ensure_controller() -> None:
    """Live jobs but no controller: start it (their statuses would stay stale) and say so."""
    from launcher.client import backend
    from launcher.state.files import StateError

    try:
        started = backend().ensure_controller()
    except StateError:
        raise  # the state DB is unusable: one error, not a warning then the same error
    except Exception as exc:  # still show what the DB says, with a warning
        from launcher.state.db import launcher_home
        from launcher.state.diskspace import is_disk_full_error, is_full
        from launcher.state.store import STORAGE_ERRORS

        if is_disk_full_error(exc) or (isinstance(exc, STORAGE_ERRORS)
                                       and is_full(launcher_home())):
            raise  # a full disk: main() says so in one line
        err_console().print(f"Warning: managed jobs are live but no controller runs, and "
                            f"starting one failed ({exc}); statuses may be stale.", soft_wrap=True)
        return
    if started is not None:
        err_console().print(
            "Warning: managed jobs are live but no controller was running (statuses shown may "
            f"be stale until it catches up); started it (pid {started.pid}).", soft_wrap=True)


@jobs_app.command("queue")
def queue_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    all_users: Annotated[bool, typer.Option("--all-users", help="On a server, as an admin: every user's jobs.")] = False,
) -> int:
    """List managed jobs with where they run, recoveries and cost so far."""
    from launcher.client import backend

    _ensure_controller()
    rows = backend().jobs_queue(all_users)
    if as_json:
        print_json([r.to_json() for r in rows])
        return 0
    if not rows:
        console().print("No managed jobs.")
        return 0
    from launcher.cli.table import Table, print_table

    table = Table()
    for col in ("ID", "NAME", "STATUS", "SUBMITTED", "DURATION", "WHERE", "CLUSTER",
                "RECOV", "RESTARTS", "LAST RECOV", "LOST", "COST"):
        table.add_column(col)
    for r in rows:
        where = "/".join(x for x in (r.cloud, r.region, r.zone) if x) or "-"
        table.add_row(
            str(r.id), r.display_name, r.status, _ts(r.submitted_at), _dur(r.duration_s), where,
            r.cluster or "-", str(r.recoveries), str(r.restarts_on_errors),
            "-" if r.last_recovery_s is None else f"{r.last_recovery_s:.1f}s",
            _dur(r.work_lost_s) if r.work_lost_s else "-", format_money(r.cost_so_far),
        )
    print_table(table)
    deadlines = [r for r in rows if r.deadline_at is not None]
    if deadlines:
        table = Table()
        for col in ("ID", "NAME", "DEADLINE", "MODE", "PROGRESS", "PROJECTED FINISH"):
            table.add_column(col)
        for r in deadlines:
            finish = "-"
            if r.projected_finish_at is not None:
                late = r.deadline_at is not None and r.projected_finish_at > r.deadline_at
                finish = _ts(r.projected_finish_at) + (" (late)" if late else "")
            mode = (r.mode or "-").replace("_", "-")
            if r.decided and r.decided != r.mode and r.status not in ("SUCCEEDED", "FAILED",
                                                                      "CANCELLED"):
                mode += f" -> {r.decided.replace('_', '-')}"
            table.add_row(str(r.id), r.display_name, _ts(r.deadline_at or 0.0), mode,
                          f"{100 * (r.progress or 0.0):.0f}%", finish)
        print_table(table)
    return 0


@jobs_app.command("logs")
def logs_cmd(
    job_id: Annotated[int, typer.Argument(metavar="ID", autocompletion=complete_managed_job_id)],
    no_follow: Annotated[bool, typer.Option("--no-follow", help="Print what exists; return.")] = False,
    controller: Annotated[
        bool, typer.Option("--controller", help="The controller's events for this job instead.")
    ] = False,
) -> int:
    """The job's output across all attempts, each headed by where it ran."""
    from launcher.client import backend

    b = backend()
    if controller:
        detail = b.jobs_detail(job_id)
        for e in detail.events:
            _print_line(f"{_ts(e.at)} {e.from_status or '-'} -> {e.to_status}"
                        f"{f' (attempt {e.attempt})' if e.attempt else ''}: {e.reason}")
        for line in b.controller_log_lines(job_id):
            _print_line(line)
        return 0
    _ensure_controller()
    try:
        summary = b.jobs_logs(job_id, _print_line, not no_follow)
    except KeyboardInterrupt:
        err_console().print(f"\nStopped following. The job keeps running; "
                            f"`launcher jobs logs {job_id}` to reattach.", soft_wrap=True)
        return 130
    if no_follow:
        return 0
    return _final_exit(job_id, summary)


@jobs_app.command("cancel")
def cancel_cmd(
    job_id: Annotated[int, typer.Argument(metavar="ID", autocompletion=complete_managed_job_id)],
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for confirmation.")] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until cancelled.")] = True,
) -> int:
    """Cancel a managed job (also while it recovers); its clusters are taken down.
    A pipeline's id (its first stage's) cancels every stage not yet ended."""
    from launcher.client import backend

    b = backend()
    ended = ("SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE", "CANCELLED")
    ids = b.pipeline_stage_ids(job_id)
    live = [(i, b.jobs_status(i)) for i in ids]
    live = [(i, s) for i, s in live if s.status not in ended]
    if not live:
        err_console().print(f"Managed job {job_id} already ended: {b.jobs_status(job_id).status}.")
        return 0
    what = (f"pipeline {job_id} ({len(live)} stage(s) not ended)" if len(ids) > 1
            else f"managed job {job_id} ({live[0][1].name})")
    if not yes and not typer.confirm(f"Cancel {what}?", err=True):
        raise typer.Abort()
    for i, _ in reversed(live):  # later stages first: none starts while its cause is cancelled
        b.jobs_cancel(i)
    for i, _ in live:
        s = b.jobs_wait(i, 120) if wait else b.jobs_status(i)
        err_console().print(f"Managed job {i}: {s.status}.")
    return 0


@controller_app.command("status")
def controller_status_cmd(
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> int:
    """Is the controller running?"""
    from dataclasses import asdict

    from launcher.api import jobs as api

    info = api.jobs_controller_status()
    live = sum(1 for r in api.jobs_queue() if r.status not in (
        "SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE", "CANCELLED"))
    if as_json:
        print_json({**asdict(info), "live_jobs": live})
        return 0
    state = f"running (pid {info.pid})" if info.running else "not running"
    console().print(f"Controller {state}; {live} live managed job(s).")
    console().print(f"Log: {info.log_path}", soft_wrap=True)  # a path must stay one line
    return 0


@controller_app.command("start")
def controller_start_cmd() -> int:
    """Start the controller if it is not running (it resumes every live job)."""
    from launcher.api import jobs as api

    info = api.jobs_controller_start()
    console().print(f"Controller {'running (pid ' + str(info.pid) + ')' if info.running else 'starting'}.")
    return 0


@controller_app.command("stop")
def controller_stop_cmd() -> int:
    """Stop the controller. Jobs keep running on their clusters and are resumed by the
    next controller (started by any `launcher jobs launch|cancel` or `controller start`)."""
    from launcher.api import jobs as api

    before = api.jobs_controller_status()
    api.jobs_controller_stop()
    console().print("Controller stopped." if before.running else "Controller was not running.")
    return 0


def _float_option(text: str | None, option: str) -> float | None:
    """A numeric option parsed here (not by typer) so a bad value is one line, exit 2."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        from launcher.cli.app import CliUsageError

        raise CliUsageError(f"{option} takes a number, got '{text}'.")
    return value


@jobs_app.command("simulate")
def simulate_cmd(
    task: Annotated[str, typer.Argument(metavar="TASK.yaml", help="The task file (gang size, resources).")],
    trace: Annotated[
        str, typer.Option("--trace", metavar="FILE[,FILE...]", help="Spot trace JSON files; several = several zones.")
    ],
    hours: Annotated[
        str | None,
        typer.Option("--hours", metavar="H", help="Work the job needs, in hours (default: the task's duration)."),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option("--deadline", metavar="H", help="Deadline, hours from the start (default: the task's, else none)."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="launcher (default), uniform_progress, greedy, on_demand."),
    ] = None,
    restart_overhead: Annotated[
        str | None,
        typer.Option("--restart-overhead", metavar="MIN", help="Minutes per restart (default: the task's, else 25)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay spot availability traces through the deadline policy the controller runs."""
    from launcher.api import spot_simulate as api

    sim = api.simulate_task(
        task,
        hours=_float_option(hours, "--hours"),
        traces=[p.strip() for p in trace.split(",") if p.strip()],
        deadline_h=_float_option(deadline, "--deadline"),
        policy=policy,
        restart_overhead_min=_float_option(restart_overhead, "--restart-overhead"),
    )
    if as_json:
        print_json(sim.to_json())
        return
    from launcher.cli.table import Table, echo, print_table

    r = sim.result
    table = Table()
    table.add_column("")
    table.add_column("", justify="right")
    rows = [
        ("policy", r.policy),
        ("cost", format_money(r.cost)),
        ("on-demand only", format_money(r.on_demand_cost)),
        ("savings", f"{r.savings:.1%}"),
        ("finished at", "not finished" if r.finish_h is None else f"{r.finish_h:.2f} h"),
        ("deadline", "none" if r.deadline_h is None else f"{r.deadline_h:g} h"
         + ("" if r.deadline_h is None else (" (met)" if r.deadline_met else " (MISSED)"))),
        ("spot / on-demand / idle", f"{r.spot_hours:.2f} / {r.on_demand_hours:.2f} / {r.idle_hours:.2f} h"),
        ("preemptions / restarts", f"{r.preemptions} / {r.restarts}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    print_table(table)
    for origin in sim.origins:
        echo(f"trace {origin.file}: {origin.describe()}", style="dim")
    price_from = ("spot prices from the trace" if sim.trace_prices
                  else f"spot {format_money(sim.placement.spot_h)}/h per node")
    if not sim.placement.matches_trace:
        why = ("the task's cheapest spot placement; the traces record no placement of this "
               "task, so their availability stands in for it")
    elif len(sim.origins) > 1:
        why = "the cheapest placement the traces record, used for every zone"
    else:
        why = "the placement the trace records"
    echo(f"prices {sim.placement.description} ({why}): on-demand "
         f"{format_money(sim.placement.on_demand_h)}/h per node, {price_from}; "
         f"{sim.work_h:g} h of work; restart overhead {sim.restart_overhead_h * 60:g} min.",
         style="dim")
