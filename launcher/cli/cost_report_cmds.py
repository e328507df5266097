"""`launcher cost-report [--days N] [--json]`: spending from the cost ledger (launch-time
prices, never re-priced). Thin: the API computes (launcher.api.cost_report), this renders."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.catalog.money import format_money
from launcher.cli.app import app, print_json
from launcher.cli.table import Table, echo, print_table

if TYPE_CHECKING:
    from launcher.api.cost_report import CostReport


def _when(ts: float | None) -> str:
    if ts is None:
        return "running"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


@app.command("cost-report")
def cost_report_cmd(
    days: Annotated[
        str, typer.Option("--days", metavar="N", help="Window: the last N days (default 30).")
    ] = "30",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """What clusters and managed jobs cost, per cluster / managed-job attempt, with totals.

    Read from the cost ledger at the prices each cluster was launched at (today's
    catalog is never used). Intervals crossing the window's start count from it."""
    from launcher.client import backend

    try:
        n = float(days)
    except ValueError:
        n = float("nan")
    report = backend().cost_report(n)
    if as_json:
        print_json(report.to_json())
    else:
        render(report)


def render(report: CostReport) -> None:
    if not report.lines:
        echo(f"No cluster ran in the last {report.days:g} days.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, right in (
        ("CLUSTER", False), ("OWNER", False), ("WHERE", False), ("INSTANCE", False),
        ("NODES", True), ("MARKET", False), ("$/H", True), ("STARTED", False),
        ("ENDED", False), ("HOURS", True), ("NODE-H", True), ("COST", True),
    ):  # fmt: skip
        table.add_column(col, justify="right" if right else "left")
    for ln in report.lines:
        owner = "you" if ln.owner is None else (
            f"job {ln.job_id} #{ln.attempt}" if ln.attempt is not None else ln.owner
        )
        where = "/".join(x for x in (ln.cloud, ln.region, ln.zone) if x)
        table.add_row(
            ln.cluster, owner, where, ln.instance_type, str(ln.num_nodes),
            "spot" if ln.use_spot else "on-demand", format_money(ln.hourly_cost),
            _when(ln.first_start), _when(ln.last_end), f"{ln.hours:.2f}",
            f"{ln.node_hours:.2f}", format_money(ln.cost),
        )  # fmt: skip
    print_table(table)
    clouds = ", ".join(f"{c} {format_money(v)}" for c, v in report.by_cloud.items())
    echo(
        f"total {format_money(report.total_cost)} over {report.total_node_hours:.2f} node-hours in the "
        f"last {report.days:g} days (clusters {format_money(report.clusters_cost)}, managed jobs "
        f"{format_money(report.managed_jobs_cost)}; {clouds})"
    )
    echo("Prices are those each cluster was launched at (from the cost ledger).", style="dim")
