"""Catalog and cost commands: `gpus`, `cost`, `catalog status`, `check`. A thin skin:
the API computes, this renders; the plan table of `cost` and `launch --dryrun` is
launcher.cli.plan_render's (`plan_and_render` and `render_plan` are re-exported here).

`launcher.api` is imported inside command bodies only, so `launcher --help` stays
fast; tables are plain text (launcher.cli.table), not rich, on this hot path, and fit
the terminal's width: the `gpus` tables drop columns in a fixed order (VCPUS, MEM GiB,
MAX NODES, FABRIC, GPUS, then the $/H of the market not sorted on) and then cut
INSTANCE, region and CLOUD(S) cells. `catalog_app` is the `launcher catalog ...`
group; other command modules may add subcommands to it (e.g. `refresh`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.catalog.money import format_money
from launcher.cli.app import app, print_json
from launcher.cli.plan_render import fabric_text as _fabric
from launcher.cli.plan_render import num as _num
from launcher.cli.plan_render import plan_and_render, rejection_line, render_plan
from launcher.cli.table import Table, echo, print_table

if TYPE_CHECKING:
    from launcher.api.planning import GpuListing, GpuSummaryRow
    from launcher.catalog.status import CatalogStatus

__all__ = ["catalog_app", "plan_and_render", "rejection_line", "render_plan"]

catalog_app = typer.Typer(
    rich_markup_mode=None,
    help="The price catalog: where it came from, how fresh it is, and refreshing it from the clouds.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")


# ---------------------------------------------------------------- formatting helpers


def _add_column(table: Table, header: str, justify: str) -> None:
    table.add_column(header, justify="right" if justify == "right" else "left")


def _number(text: str | None, option: str) -> float | None:
    """Parse a numeric option here (not by typer) so a bad value is a LauncherError:
    one line, non-zero exit, no traceback."""
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


def _age(days: float | None) -> str:
    if days is None:
        return "age unknown"
    if days < 1:
        hours = max(days * 24, 0)
        return f"{hours:.0f} h old"
    return f"{days:.0f} day{'s' if round(days) != 1 else ''} old"


# ---------------------------------------------------------------- launcher gpus


@app.command("gpus")
def gpus_cmd(
    accelerator: Annotated[
        str | None,
        typer.Argument(metavar="[ACC[:N]]", help="GPU model, optionally :GPUs per node."),
    ] = None,
    cloud: Annotated[str | None, typer.Option("--cloud", help="Only this cloud.")] = None,
    region: Annotated[str | None, typer.Option("--region", help="Only this region.")] = None,
    spot: Annotated[
        bool, typer.Option("--spot", help="Only spot offers, sorted by spot price.")
    ] = False,
    fabric: Annotated[
        str | None, typer.Option("--fabric", help="infiniband | efa | roce | rdma | any.")
    ] = None,
    min_gbps: Annotated[
        str | None,
        typer.Option("--min-gbps", metavar="N", help="Minimum inter-node Gbps per node."),
    ] = None,
    all_regions: Annotated[
        bool, typer.Option("--all-regions", help="One row per region, not just the cheapest.")
    ] = False,
    summary: Annotated[
        bool, typer.Option("--summary", help="One row per GPU model (the default with no ACC).")
    ] = False,
    unpriced: Annotated[
        bool,
        typer.Option("--unpriced", help="Also list offers whose catalog gives no price (last)."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (a list of offer rows).")
    ] = False,
) -> None:
    """List GPU offers by price ($/GPU-h); with no ACC, one summary row per GPU model.

    `--json` always prints offer rows (the catalog row's fields plus $/GPU-h), also with
    no ACC; `--summary --json` prints the per-model summary instead.
    """
    from launcher.api import planning

    filtered = (any(v is not None for v in (cloud, region, fabric, min_gbps))
                or spot or all_regions or unpriced)
    if summary or (accelerator is None and not filtered and not as_json):
        if accelerator is not None or filtered:
            from launcher.cli.app import CliUsageError

            raise CliUsageError("--summary covers every GPU model: it takes no ACC or filters.")
        models = planning.gpu_summary()
        if as_json:
            print_json([row.to_dict() for row in models])
        else:
            _render_summary(models)
        return
    name: str | None = None
    count: float | None = None
    if accelerator is not None:
        from launcher.catalog import query

        name, count = planning.parse_accelerator_spec(accelerator, query.accelerator_names())
    listing = planning.gpus(
        name,
        count,
        cloud=cloud,
        region=region,
        spot=spot,
        fabric=fabric,
        min_gbps=_number(min_gbps, "--min-gbps"),
        all_regions=all_regions,
        unpriced=unpriced,
    )
    if as_json:
        print_json(listing.to_json())
    else:
        _render_gpus(listing, spot=spot, all_regions=all_regions)
        if cloud is not None and cloud.lower() in ("kubernetes", "k8s"):
            _render_k8s_nodes(name)


def _render_k8s_nodes(accelerator: str | None) -> None:
    """Free and total GPUs per node type of each Kubernetes context (asked live)."""
    from launcher.provisioning.offers import kubernetes_gpu_nodes

    rows = [r for r in kubernetes_gpu_nodes()
            if accelerator is None or str(r["accelerator"]).lower() == accelerator.lower()]
    if not rows:
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("CONTEXT", "GPU", "PER NODE", "NODES", "FREE GPUS", "TOTAL GPUS"):
        table.add_column(col, "right" if col not in ("CONTEXT", "GPU") else "left")
    for r in rows:
        table.add_row(str(r["context"]), str(r["accelerator"]), str(r["gpus_per_node"]),
                      str(r["nodes"]), str(r["free"]), str(r["total"]))
    echo("")
    echo("Kubernetes GPU nodes (free = not requested by a running pod):")
    print_table(table)


def _render_gpus(listing: GpuListing, *, spot: bool, all_regions: bool) -> None:
    """The offer table. Every price column names its market: OD (on-demand) or SPOT;
    $/GPU-H is in the market listed (SPOT with --spot)."""
    if not listing.rows:
        echo("No GPU offer matches these filters.")
        _echo_unpriced(listing.unpriced_hidden)
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("CLOUD", min_width=6)
    table.add_column("INSTANCE", min_width=14)
    table.add_column("GPUS", drop=5)
    table.add_column("VCPUS", "right", drop=1)
    table.add_column("MEM GiB", "right", drop=2)
    table.add_column("FABRIC", drop=4)
    table.add_column("MAX NODES", "right", drop=3)
    table.add_column("OD $/H", "right", drop=6 if spot else None)
    table.add_column("SPOT $/H", "right", drop=None if spot else 6)
    table.add_column("SPOT $/GPU-H" if spot else "OD $/GPU-H", "right")
    table.add_column("REGION" if all_regions else "CHEAPEST REGION", min_width=10)
    for r in listing.rows:
        o = r.offer
        per_gpu = r.spot_price_per_gpu if spot else r.price_per_gpu
        where = o.region if all_regions or r.regions == 1 else f"{o.region} (+{r.regions - 1})"
        table.add_row(
            o.cloud,
            o.instance_type,
            f"{o.accelerator}:{_num(o.accelerator_count)}",
            _num(o.vcpus),
            _num(o.memory_gib),
            _fabric(o.fabric, o.fabric_gbps),
            "-" if o.max_nodes is None else str(o.max_nodes),
            format_money(o.price),
            format_money(o.spot_price),
            format_money(per_gpu),
            where,
        )
    hidden = print_table(table)
    if hidden:
        echo(f"(not shown, to fit the terminal: {', '.join(hidden)})", style="dim", fit=True)
    _echo_unpriced(listing.unpriced_hidden)
    echo(_catalog_footer([r.offer.fetched_at for r in listing.rows]), style="dim", fit=True)


def _echo_unpriced(clouds: tuple[str, ...]) -> None:
    """Say which offers were left out for having no price (and how to see them)."""
    if not clouds:
        return
    n = len(clouds)
    echo(f"{n} offer{'s' if n != 1 else ''} without a price in the catalog not shown "
         f"({', '.join(dict.fromkeys(clouds))}); --unpriced lists {'them' if n != 1 else 'it'}.",
         style="dim", fit=True)


def _catalog_footer(stamps: list[str] | None) -> str:
    """The age line under a listing of rows with these fetched_at stamps (None: the
    whole catalog). Copied sources show their copy date, never as an upstream date."""
    from launcher.api.planning import catalog_age_days, price_dates

    dates = price_dates(stamps)
    parts = []
    if dates.oldest_exact is not None:
        parts.append(
            f"prices as of {dates.oldest_exact[:10]} "
            f"({_age(catalog_age_days(dates.oldest_exact))})"
        )
    if dates.oldest_copied is not None:
        parts.append(
            f"{'some ' if parts else ''}prices copied on {dates.oldest_copied[:10]} "
            "(upstream date unknown; may be older)"
        )
    if not parts:
        return "catalog: no dates"
    return f"catalog: {'; '.join(parts)}; `launcher catalog status` for sources"


def _render_summary(rows: list[GpuSummaryRow]) -> None:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("GPU", min_width=8)
    table.add_column("MEM GiB", "right", drop=2)
    table.add_column("PER NODE", drop=1, min_width=8)
    table.add_column("OD $/GPU-H", "right")
    table.add_column("SPOT $/GPU-H", "right")
    table.add_column("BEST FABRIC", drop=3)
    table.add_column("CLOUDS", min_width=10)
    for r in rows:
        table.add_row(
            r.accelerator,
            _num(r.accelerator_memory_gib),
            ",".join(_num(c) for c in r.counts),
            format_money(r.min_price_per_gpu),
            format_money(r.min_spot_price_per_gpu),
            _fabric(r.best_fabric, r.best_fabric_gbps),
            ", ".join(r.clouds),
        )
    hidden = print_table(table)
    if hidden:
        echo(f"(not shown, to fit the terminal: {', '.join(hidden)})", style="dim", fit=True)
    echo(_catalog_footer(None), style="dim", fit=True)
    echo("`launcher gpus H100:8` lists the offers of one model.", style="dim", fit=True)


# ---------------------------------------------------------------- launcher cost


@app.command("cost")
def cost_cmd(
    task_file: Annotated[str, typer.Argument(metavar="TASK.yaml", help="The task file.")],
    hours: Annotated[
        str | None, typer.Option("--hours", metavar="H", help="Estimated run time, for total cost.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="With --json: every placement, not the best 100.")
    ] = False,
) -> None:
    """Rank where TASK.yaml can run, cheapest first, with its hourly (and total) cost."""
    from launcher.api import planning
    from launcher.task.model import Task

    task = Task.from_yaml(task_file, require_values=False)  # costing needs no env values
    h = _number(hours, "--hours")
    plan_and_render(lambda: planning.cost(task, hours=h), as_json, show_all)


# ---------------------------------------------------------------- launcher catalog status


@catalog_app.command("status")
def catalog_status_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per cloud: rows, source and age of the prices in use."""
    from launcher.api import planning

    status = planning.catalog_status()
    if as_json:
        print_json(status.to_dict())
        return
    _render_status(status)


@catalog_app.command("refresh")
def catalog_refresh_cmd(
    cloud: Annotated[
        str | None, typer.Option("--cloud", help="Only this cloud (default: every cloud with a fetcher).")
    ] = None,
    region: Annotated[
        list[str] | None,
        typer.Option("--region", help="Only this region (repeatable; default: config, else the bundled catalog's)."),
    ] = None,
    forget: Annotated[
        bool, typer.Option("--forget", help="Drop the cloud's refreshed rows (back to the bundled snapshot).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rebuild a cloud's rows from its own pricing API (AWS: EC2 price list, spot price
    history, instance types and zone offerings). A failed refresh keeps the previous rows."""
    from launcher.api import catalog_refresh as refresh_api

    if forget:
        if cloud is None:
            from launcher.cli.app import CliUsageError

            raise CliUsageError("--forget needs --cloud.")
        done = refresh_api.catalog_forget(cloud)
        if as_json:
            print_json({"cloud": cloud, "forgotten": done})
        else:
            echo(f"{cloud}: " + ("refreshed rows dropped; using the bundled snapshot."
                                 if done else "nothing refreshed; using the bundled snapshot."))
        return
    progress = None if as_json else (lambda msg: echo(msg, style="dim"))
    results = refresh_api.catalog_refresh(cloud, region, on_progress=progress)
    if as_json:
        print_json([r.to_json() for r in results])
        return
    for r in results:
        echo(f"{r.cloud}: {r.rows} rows from {len(r.regions)} regions in {r.seconds:.1f} s "
             f"(fetched {r.fetched_at})")
        for note in r.notes:
            echo(f"  {note}", style="dim")


def _render_status(status: CatalogStatus) -> None:

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("CLOUD", "left"),
        ("ROWS", "right"),
        ("FROM", "left"),
        ("FETCHED", "left"),
        ("AGE", "right"),
        ("DATA", "left"),
        ("SOURCE", "left"),
    ):
        _add_column(table, col, justify)
    for c in status.clouds:
        fetched = c.fetched_at[:10] + ("" if c.fetched_at_exact else " (copied)")
        age = _age(c.age_days) + (" STALE" if c.stale else "")
        table.add_row(
            c.cloud,
            str(c.rows),
            {"snapshot": "bundled snapshot" if status.bundled else "snapshot"}.get(
                c.origin, c.origin
            ),
            fetched,
            age,
            c.completeness,
            c.source,
            style="yellow" if c.stale else None,
        )
    print_table(table)
    where = "bundled snapshot" if status.bundled else f"snapshot {status.snapshot_dir}"
    echo(
        f"{status.total_rows} rows; {where} {status.snapshot_hash[:12]}; "
        f"stale after {_num(status.stale_after_days)} days",
        style="dim",
    )
    rates = status.spot_interruption
    if rates is not None:
        when = f"{rates.fetched_at} ({_age(rates.age_days)})" if rates.fetched_at else "date unknown"
        echo(
            f"spot interruption rates: {rates.rows} AWS Spot Advisor bands, {rates.origin}, "
            f"{when}; other clouds: documented defaults (docs/spot.md)",
            style="yellow" if rates.stale else "dim",
        )
    if any(not c.fetched_at_exact for c in status.clouds):
        echo(
            "(copied): the upstream date is unknown; the date is when the reference copy was"
            " made, so prices may be older.",
            style="dim",
        )


# ---------------------------------------------------------------- check


@dataclass(frozen=True)
class _CloudRow:
    enabled: bool
    reason: str


@app.command("check")
def check_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Which clouds launches can use now (credentials found), and why the others can't."""
    from launcher.client import backend

    report = backend().check()  # the server's clouds when logged in to one
    state, pools = report.state, report.pools
    statuses = {n: _CloudRow(*v) for n, v in report.clouds.items()}
    if as_json:
        rows: list[dict[str, object]] = []
        for n, s in statuses.items():
            row: dict[str, object] = {"cloud": n, "enabled": s.enabled, "reason": s.reason}
            if n == "ssh":
                row["pools"] = [p.to_json() for p in pools]
            rows.append(row)
        print_json(rows)
        return
    table = Table()
    for col in ("CLOUD", "ENABLED", "DETAIL"):
        table.add_column(col)
    for name, s in statuses.items():
        table.add_row(name, "yes" if s.enabled else "no", s.reason, style=None if s.enabled else "dim")
    print_table(table)
    if pools:
        from launcher.cli.ssh_cmds import host_detail

        hosts = Table()
        for col in ("POOL", "HOST", "STATE", "DETAIL"):
            hosts.add_column(col)
        for p in pools:
            for h in p.hosts:
                hosts.add_row(p.name, h.address, h.state, host_detail(h),
                              style="yellow" if h.state == "quarantined" else None)
        echo("")
        print_table(hosts)
    echo("Cost queries and dry runs rank every cloud; launches use enabled ones.", style="dim")
    import time

    newest = state.newest_backup_at
    echo(f"State DB {state.path}: ok, {len(state.backups)} backup(s)"
         + (f", newest {int((time.time() - newest) // 60)} min old." if newest else "."),
         style="dim")
