"""Catalog and cost commands: `gpus`, `cost`, `catalog status`, and `render_plan`
(the table `launch --dryrun` prints). A thin skin: the API computes, this renders.

`launcher.api` is imported inside command bodies only, so `launcher --help` stays
fast; tables are plain text (launcher.cli.table), not rich, on this hot path. `catalog_app` is the `launcher catalog ...` group; other command
modules may add subcommands to it (e.g. `refresh`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.cli.app import app, print_json
from launcher.cli.table import Table, echo, print_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.api.planning import GpuListing, GpuSummaryRow, Plan
    from launcher.catalog.status import CatalogStatus
    from launcher.optimizer import Placement

catalog_app = typer.Typer(
    rich_markup_mode=None,
    help="The price catalog: where it came from, how fresh it is, and refreshing it from the clouds.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")

TOP_PLACEMENTS = 10  # rows of the plan table
TOP_REASONS = 6  # rejection reasons spelled out in the summary line


# ---------------------------------------------------------------- formatting helpers


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


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


def _money(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"${x:,.{digits}f}"


def _fabric(fabric: str | None, gbps: float | None) -> str:
    if fabric is None:
        return "?"
    return f"{fabric} {_num(gbps)}G" if gbps is not None else fabric


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
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (a list of offer rows).")
    ] = False,
) -> None:
    """List GPU offers by price ($/GPU-h); with no ACC, one summary row per GPU model.

    `--json` always prints offer rows (the catalog row's fields plus $/GPU-h), also with
    no ACC; `--summary --json` prints the per-model summary instead.
    """
    from launcher.api import planning

    filtered = any(v is not None for v in (cloud, region, fabric, min_gbps)) or spot or all_regions
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
    )
    if as_json:
        print_json(listing.to_json())
    else:
        _render_gpus(listing, spot=spot, all_regions=all_regions)


def _render_gpus(listing: GpuListing, *, spot: bool, all_regions: bool) -> None:

    if not listing.rows:
        echo("No GPU offer matches these filters.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("CLOUD", "left"),
        ("INSTANCE", "left"),
        ("GPUS", "left"),
        ("VCPUS", "right"),
        ("MEM GiB", "right"),
        ("FABRIC", "left"),
        ("MAX NODES", "right"),
        ("$/H", "right"),
        ("SPOT $/H", "right"),
        ("$/GPU-H", "right"),
        ("REGION" if all_regions else "CHEAPEST REGION", "left"),
    ):
        _add_column(table, col, justify)
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
            _money(o.price),
            _money(o.spot_price),
            _money(per_gpu, 3),
            where,
        )
    print_table(table)
    echo(_catalog_footer([r.offer.fetched_at for r in listing.rows]), style="dim")


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
    for col, justify in (
        ("GPU", "left"),
        ("MEM GiB", "right"),
        ("PER NODE", "left"),
        ("$/GPU-H", "right"),
        ("SPOT $/GPU-H", "right"),
        ("BEST FABRIC", "left"),
        ("CLOUDS", "left"),
    ):
        _add_column(table, col, justify)
    for r in rows:
        table.add_row(
            r.accelerator,
            _num(r.accelerator_memory_gib),
            ",".join(_num(c) for c in r.counts),
            _money(r.min_price_per_gpu, 3),
            _money(r.min_spot_price_per_gpu, 3),
            _fabric(r.best_fabric, r.best_fabric_gbps),
            ", ".join(r.clouds),
        )
    print_table(table)
    echo(_catalog_footer(None), style="dim")
    echo("`launcher gpus H100:8` lists the offers of one model.", style="dim")


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
    from launcher.task import Task

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


# ---------------------------------------------------------------- plan rendering


def plan_and_render(
    make_plan: Callable[[], Plan], as_json: bool, show_all: bool = False
) -> None:
    """Run `make_plan` and `render_plan` its result. For an unsatisfiable task with
    `as_json`, stdout still gets the plan's JSON shape (empty placements, the
    rejections, "error": the message) before the error propagates (message on
    stderr, exit 3)."""
    from launcher.api.planning import JSON_PLACEMENT_LIMIT, UnsatisfiableTaskError

    limit = None if show_all else JSON_PLACEMENT_LIMIT
    try:
        plan = make_plan()
    except UnsatisfiableTaskError as err:
        if as_json:
            print_json(err.to_json(limit))
        raise
    render_plan(plan, as_json, limit)


def render_plan(plan: Plan, as_json: bool, limit: int | None = None) -> None:
    """Print a plan: the pinned JSON object (its best `limit` rows; None = all), or a
    table of the top placements (the chosen one marked) followed by a one-line summary
    of rejected offers. Used by `launcher cost` and `launcher launch --dryrun`."""
    if as_json:
        print_json(plan.to_json(limit))
        return
    from launcher.api.planning import price_known

    with_total = plan.hours is not None
    # spot tasks: expected cost (list price x 1/(1 - rate x overhead)) and the rate used
    with_expected = plan.work_hours is not None
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("", "left"),
        ("CLOUD", "left"),
        ("REGION/ZONE", "left"),
        ("INSTANCE", "left"),
        ("GPUS", "left"),
        ("NODES", "right"),
        ("MARKET", "left"),
        ("FABRIC", "left"),
        ("$/NODE-H", "right"),
        ("$/H", "right"),
        *((("TOTAL", "right"),) if with_total else ()),
        *((("EXPECTED", "right"), ("INTERRUPTS/NODE-H", "left")) if with_expected else ()),
        ("ENABLED", "left"),
    ):
        _add_column(table, col, justify)
    groups = _zone_groups(plan)
    shown = groups[:TOP_PLACEMENTS]
    if plan.chosen is not None and not any(g[0] <= plan.chosen < g[1] for g in shown):
        shown += [g for g in groups if g[0] <= plan.chosen < g[1]]
    for start, end in shown:
        p = plan.placements[start]
        chosen_here = plan.chosen is not None and start <= plan.chosen < end
        mark = "->" if chosen_here else ""
        style = "bold green" if chosen_here else ("dim" if not plan.enabled[start] else None)
        gpus = f"{p.accelerator}:{_num(p.accelerator_count)}" if p.accelerator else "-"
        total = (_money(p.total_cost),) if with_total else ()
        where = p.region + (f"/{p.zone}" if p.zone else "")
        if end - start > 1:
            regions = len({q.region for q in plan.placements[start:end]})
            if regions > 1:
                where = f"{p.region} (+{regions - 1} region{'s' if regions > 2 else ''})"
            else:
                where += f" (+{end - start - 1} zone{'s' if end - start > 2 else ''})"
        table.add_row(
            mark,
            p.cloud,
            where,
            p.instance_type,
            gpus,
            str(p.num_nodes),
            "spot" if p.use_spot else "on-demand",
            _fabric(p.fabric, p.fabric_gbps),
            *((_money(None),) * (2 + with_total) if not price_known(p)
              else (_money(p.node_price), _money(p.hourly_cost), *total)),
            *(_expected_cells(p, price_known(p)) if with_expected else ()),
            "yes" if plan.enabled[start] else "no",
            style=style,
        )
    print_table(table)
    more = len(plan.placements) - sum(end - start for start, end in shown)
    if more > 0:
        echo(f"... and {more} more placement{'s' if more != 1 else ''} (--json lists all)")
    chosen = plan.chosen_placement
    if chosen is not None:
        where = "/".join(x for x in (chosen.cloud, chosen.region, chosen.zone) if x)
        what = f"{chosen.num_nodes} x {chosen.instance_type}"
        if chosen.accelerator:
            what += f" ({chosen.accelerator}:{_num(chosen.accelerator_count)})"
        cost = f"{_money(chosen.hourly_cost)}/h" + (
            f", {_money(chosen.total_cost)} for {_num(plan.hours)} h" if with_total else ""
        )
        market = "spot" if chosen.use_spot else "on-demand"
        if with_expected and chosen.use_spot and price_known(chosen):
            cost += f", expected {_expected_total(chosen.expected_cost)}"
            if not with_total:
                cost += " per hour of work"
            cost += f" ({_rate(chosen)})"
        echo(f"chosen: {where}, {what} {market}, {cost}", style="bold")
    if with_expected:
        overhead = plan.restart_overhead_hours or 0.0
        echo(f"EXPECTED: cost to finish {_num(plan.work_hours)} h of work, counting a "
             f"{overhead * 60:.0f}-min restart per expected interruption (docs/spot.md).",
             style="dim")
    else:
        echo("chosen: none (no placement is on an enabled cloud; `launcher check` shows why)")
    for note in plan.notes:
        echo(note, style="dim")
    echo(rejection_line(plan))


def _expected_total(x: float | None) -> str:
    return "never" if x is not None and x == float("inf") else _money(x)


def _rate(p: Placement) -> str:
    """ "0.00044/h, aws spot advisor band >20%" (on-demand: "-")."""
    if p.interruption_rate_per_hour is None:
        return "-"
    return f"{p.interruption_rate_per_hour:.2g}/h, {p.interruption_source}"


def _expected_cells(p: Placement, priced: bool) -> tuple[str, str]:
    if not priced:
        return (_money(None), _rate(p))
    return (_expected_total(p.expected_cost), _rate(p))


def _zone_groups(plan: Plan) -> list[tuple[int, int]]:
    """[start, end) runs of consecutive placements that differ only by region or zone
    (same cloud, instance type, market, price, candidate): one table row each."""
    groups: list[tuple[int, int]] = []
    prev_key: tuple[object, ...] | None = None
    for i, p in enumerate(plan.placements):
        key = (
            p.cloud,
            p.instance_type,
            p.use_spot,
            p.node_price,
            p.candidate.preference,
            p.accelerator,
            p.accelerator_count,
            plan.enabled[i],
            p.expected_hourly_cost,
        )
        if key == prev_key:
            groups[-1] = (groups[-1][0], i + 1)
        else:
            groups.append((i, i + 1))
        prev_key = key
    return groups


def rejection_line(plan: Plan) -> str:
    """ "rejected: 14 offers (max 1 node < 2: 9; fabric unknown (no source): 5)"."""
    n = len(plan.rejected)
    if n == 0:
        return "rejected: 0 offers"
    summary = plan.rejection_summary()
    parts = [f"{reason}: {count}" for reason, count in summary[:TOP_REASONS]]
    rest = sum(count for _, count in summary[TOP_REASONS:])
    if rest:
        parts.append(f"other reasons: {rest}")
    # "; " between entries: reasons themselves may contain commas
    return f"rejected: {n} offer{'s' if n != 1 else ''} ({'; '.join(parts)})"


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
