"""`launcher health CLUSTER [--deep] [--json]` and `launcher top CLUSTER` (docs/health.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from launcher.cli.app import app, print_json
from launcher.cli.completion import complete_cluster_name

if TYPE_CHECKING:
    from launcher.cli.table import Table
    from launcher.provisioning.health_gate import NodeSample


@app.command("health")
def health_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    deep: Annotated[bool, typer.Option("--deep", help="Also run DCGM diagnostics level 2 (`dcgmi diag -r 2`, minutes) where dcgmi is installed.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    history: Annotated[bool, typer.Option("--history", help="Instead of checking now: what the health watch kept for a job (its findings and per-node metrics over time).")] = False,
    job: Annotated[int | None, typer.Option("--job", help="With --history: the cluster job (default: the running or last one).")] = None,
) -> int:
    """Check every node's GPUs now (count, model, ECC, XIDs, PCIe, NVLink, InfiniBand).
    Exit code 1 when a node fails. With --history, show what the watch recorded while a
    job ran instead."""
    from launcher.api.node_health import DEEP_GATE, check

    if history:
        return _history(cluster, job, json_out)

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


def _history(cluster: str, job: int | None, json_out: bool) -> int:
    import time

    from launcher.api.node_health import watch_history

    view = watch_history(cluster, job)
    if json_out:
        print_json(view.to_json())
        return 0
    from launcher.cli.table import Table, print_table

    def when(ts: object) -> str:
        return time.strftime("%H:%M:%S", time.localtime(float(ts))) if isinstance(
            ts, int | float) else "-"

    if view.job_id is None:
        print(f"No job has run on {cluster} yet.")
        return 0
    print(f"Job {view.job_id} on {cluster}: " + (
        f"DEGRADED ({view.degraded.get('summary')}, node {view.degraded.get('rank')})"
        if view.degraded else "no failing finding standing"))
    for e in view.events:
        print(f"  {when(e.get('ts'))} {e.get('kind')}: {e.get('detail')}")
    table = Table()
    for col in ("TIME", "NODE", "UTIL", "UTIL MIN", "MEM GiB", "POWER", "TEMP", "THROTTLE",
                "PROGRESS", "LOG"):
        table.add_column(col)
    for r in view.rows:
        mem = r.get("mem_used")
        table.add_row(when(r.get("t")), str(r.get("rank")), _unit(r.get("util"), "%"),
                      _unit(r.get("util_min"), "%"),
                      "-" if mem is None else f"{float(mem) / 1024:.1f}",
                      _unit(r.get("power"), " W"), _unit(r.get("temp"), " C"),
                      ", ".join(r.get("throttle") or []) or "-",
                      "-" if r.get("progress") is None else f"{r['progress']:g}",
                      f"{r.get('log_bytes') or 0} B")
    print_table(table)
    return 0


@app.command("top")
def top_cmd(
    cluster: Annotated[str, typer.Argument(help="Cluster name.", autocompletion=complete_cluster_name)],
    interval: Annotated[float, typer.Option("--interval", "-n", min=0.5, help="Seconds between samples.")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Print one sample and exit.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One sample, machine-readable.")] = False,
) -> int:
    """Live GPU utilization, memory, power and throttling per node and GPU (Ctrl-C ends)."""
    from launcher.api.node_health import sample

    if json_out:
        print_json({"cluster": cluster, "nodes": [n.to_json() for n in sample(cluster)]})
        return 0
    if once:
        from launcher.cli.table import print_table

        print_table(_top_table(sample(cluster)))
        return 0
    import time

    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    try:
        with Live(console=console, auto_refresh=False) as live:
            while True:
                started = time.monotonic()
                body = _top_table(sample(cluster)).render(color=False, width=console.width)
                head = f"{cluster} at {time.strftime('%H:%M:%S')} (every {interval:g} s, Ctrl-C ends)"
                live.update(Text(f"{head}\n{body}"), refresh=True)
                time.sleep(max(0.0, interval - (time.monotonic() - started)))  # the refresh period
    except KeyboardInterrupt:
        pass
    return 0


def _top_table(nodes: list[NodeSample]) -> Table:
    from launcher.cli.table import Table

    table = Table()
    for col in ("NODE", "HOST", "GPU", "UTIL", "MEMORY", "POWER", "TEMP", "THROTTLE"):
        table.add_column(col)
    for n in nodes:
        if n.error or not n.gpus:
            table.add_row(str(n.rank), n.host, "-", "-", "-", "-", "-", n.error or "no GPUs")
        for g in n.gpus:
            mem = ("-" if g.mem_used is None or g.mem_total is None
                   else f"{g.mem_used / 1024:.1f}/{g.mem_total / 1024:.0f} GiB")
            table.add_row(str(n.rank), n.host, str(g.index), _unit(g.util, "%"), mem,
                          _unit(g.power, " W"), _unit(g.temp, " C"),
                          ", ".join(g.throttle) or "-")
    return table


def _unit(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.0f}{unit}"
