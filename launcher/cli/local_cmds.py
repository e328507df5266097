"""`launcher local ...`: commands specific to the embedded local cloud."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from launcher.cli.app import app

local_app = typer.Typer(
    name="local",
    help="The embedded local cloud (nodes are processes on this machine).",
    no_args_is_help=True,
)
app.add_typer(local_app, name="local")


@local_app.command("preempt")
def preempt_cmd(
    target: Annotated[str | None, typer.Argument(
        metavar="CLUSTER|JOB_ID",
        help="Local cluster name, or a managed job's id (its current cluster, as "
             "`launcher jobs queue` shows it).")] = None,
    job: Annotated[int | None, typer.Option(
        "--job", "-j", help="A managed job's id: preempt the cluster it runs on now.")] = None,
    node: Annotated[int | None, typer.Option("--node", "-n", help="Rank of the node (default: every node).")] = None,
    notice: Annotated[float, typer.Option("--notice", help="Seconds of interruption notice before the kill.")] = 0.0,
) -> int:
    """Take nodes away like a provider reclaiming spot capacity.

    Name the cluster (`mj-3-1`), or a managed job by its id (`3` or `--job 3`: the
    cluster it runs on now). With --notice, the job first gets SIGTERM (relayed by the
    head-node agent) and up to that many seconds to save a checkpoint; then the node's
    processes are killed and the local cloud reports the node PREEMPTED.
    """
    from launcher.api.clusters import local_preempt

    cluster = _preempt_target(target, job)
    ranks = local_preempt(cluster, node, notice)
    sys.stderr.write(f"Preempted node(s) {', '.join(map(str, ranks))} of {cluster}.\n")
    return 0


def _preempt_target(target: str | None, job: int | None) -> str:
    """The cluster `local preempt` acts on: the name given, or a managed job's cluster
    (a bare integer is a job id: cluster names start with a letter)."""
    from launcher.errors import UsageError

    if (target is None) == (job is None):
        raise UsageError("Name one cluster or one managed job: `launcher local preempt CLUSTER`"
                         ", `launcher local preempt JOB_ID` or `--job JOB_ID`.")
    if target is not None and not target.isdigit():
        return target
    from launcher.api.jobs import jobs_current_cluster

    return jobs_current_cluster(int(target) if target is not None else int(job or 0))


@local_app.command("spot-capacity")
def spot_capacity_cmd(
    state: Annotated[str, typer.Argument(help="on (spot launches succeed) or off (refused).")],
) -> int:
    """Switch the local cloud's spot capacity on or off (fault injection).

    While off, every spot launch on the local cloud fails with a capacity error, as a
    provider out of spot capacity does; on-demand launches are not affected. Running
    clusters are left alone (take them away with `launcher local preempt`).
    """
    from launcher.clouds.local import set_spot_capacity

    value = state.strip().lower()
    if value not in ("on", "off"):
        sys.stderr.write(f"Error: spot-capacity takes 'on' or 'off', not {state!r}.\n")
        raise typer.Exit(2)
    set_spot_capacity(value == "on")
    sys.stderr.write(f"Local spot capacity {value}.\n")
    return 0
