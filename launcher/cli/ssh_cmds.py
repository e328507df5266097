"""`launcher ssh ...`: the SSH node pools' hosts (see docs/ssh-pools.md)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.cli.app import app, print_json

if TYPE_CHECKING:
    from launcher.api.ssh_pools import HostState

ssh_app = typer.Typer(
    name="ssh",
    help="SSH node pools: each host's state, and releasing quarantined hosts.",
    no_args_is_help=True,
)
app.add_typer(ssh_app, name="ssh")


def host_detail(h: HostState) -> str:
    """ "held by train", "quarantined until 14:05:00 (lost while held by train: ...)"."""
    if h.state == "held":
        return f"held by {h.cluster}"
    if h.state == "quarantined":
        until = time.strftime("%H:%M:%S", time.localtime(h.until)) if h.until else "?"
        lost = f"lost while held by {h.cluster}: " if h.cluster else ""
        return f"quarantined until {until} ({lost}{h.reason or 'no reason recorded'})"
    return "free"


@ssh_app.command("pools")
def pools_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> int:
    """Every host of every pool: free, held by a cluster, or quarantined (until when, why)."""
    from launcher.api.ssh_pools import ssh_pools

    pools = ssh_pools()
    if json_out:
        print_json([p.to_json() for p in pools])
        return 0
    if not pools:
        sys.stderr.write("No SSH node pools: add `ssh_node_pools` to config.yaml "
                         "(see docs/ssh-pools.md).\n")
        return 0
    from launcher.cli.table import Table, print_table

    table = Table()
    for col in ("POOL", "HOST", "STATE", "DETAIL"):
        table.add_column(col)
    colors = {"free": "green", "held": None, "quarantined": "yellow"}
    for p in pools:
        for h in p.hosts:
            table.add_row(p.name, h.address, h.state, host_detail(h), style=colors.get(h.state))
    print_table(table)
    if any(h.state == "quarantined" for p in pools for h in p.hosts):
        sys.stderr.write("A quarantined host you fixed: `launcher ssh release POOL HOST`.\n")
    return 0


@ssh_app.command("release")
def release_cmd(
    pool: Annotated[str, typer.Argument(help="Pool name.")],
    host: Annotated[str, typer.Argument(help="host:port, or the host name if unique in the pool.")],
) -> int:
    """Release a quarantined host now (after you fixed it); it is cleaned before reuse."""
    from launcher.api.ssh_pools import ssh_release

    h = ssh_release(pool, host)
    sys.stderr.write(f"{h.pool} {h.address}: {host_detail(h)}.\n")
    return 0
