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
    cluster: Annotated[str, typer.Argument(help="Local cluster name.")],
    node: Annotated[int | None, typer.Option("--node", "-n", help="Rank of the node (default: every node).")] = None,
    notice: Annotated[float, typer.Option("--notice", help="Seconds of interruption notice before the kill.")] = 0.0,
) -> int:
    """Take nodes away like a provider reclaiming spot capacity.

    With --notice, the job first gets SIGTERM (relayed by the head-node agent) and
    up to that many seconds to save a checkpoint; then the node's processes are
    killed and the local cloud reports the node PREEMPTED.
    """
    from launcher.api.clusters import local_preempt

    ranks = local_preempt(cluster, node, notice)
    sys.stderr.write(f"Preempted node(s) {', '.join(map(str, ranks))} of {cluster}.\n")
    return 0
