"""`launcher health CLUSTER [--deep] [--json]` (docs/health.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from launcher.cli.app import app, print_json
from launcher.cli.completion import complete_cluster_name


@app.command("health")
def health_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    deep: Annotated[bool, typer.Option("--deep", help="Also run DCGM diagnostics level 2 (`dcgmi diag -r 2`, minutes) where dcgmi is installed.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> int:
    """Check every node's GPUs now (count, model, ECC, XIDs, PCIe, NVLink, InfiniBand).
    Exit code 1 when a node fails."""
    from launcher.api.node_health import DEEP_GATE, check

    nodes = check(cluster, gate=DEEP_GATE if deep else "quick")
    failed = any(n.status == "fail" for n in nodes)
    if json_out:
        print_json({"cluster": cluster, "status": "fail" if failed else "ok",
                    "nodes": [n.to_json() for n in nodes]})
        return 1 if failed else 0
    from launcher.cli.table import Table, print_table

    table = Table()
    for col in ("NODE", "HOST", "CHECK", "STATUS", "SECONDS", "DETAIL"):
        table.add_column(col)
    for n in nodes:
        if n.error:
            table.add_row(str(n.rank), n.host, "-", n.status.upper(), "-", n.error)
        for c in n.checks:
            table.add_row(str(n.rank), n.host, c.name, c.status.upper(), f"{c.seconds:.2f}",
                          c.summary)
    print_table(table)
    return 1 if failed else 0
