"""The plan table of `launcher cost` and `launch --dryrun` (also `jobs launch --dryrun`),
and the small cell formatters the catalog listings share.

What the table shows (docs/cost-queries.md):
- rows are the plan's rows (`Plan.rows()`: placements that differ only by zone folded
  together), launchable ones first; consecutive rows that differ only by region are
  one line ("us-east-1 (+2 regions)"). At most TOP_PLACEMENTS launchable lines, then
  the best non-launchable ones (up to TOP_PLACEMENTS lines in all, at least
  MIN_OTHERS), each with its short reason in LAUNCHABLE;
- "... and N more" counts the rows not shown, in the unit of `--json` (rows), and
  names the option that lists them;
- the table fits the terminal (launcher.cli.table): when too wide it drops columns
  in this order: INTERRUPTS/NODE-H, NODES, $/NODE-H, FABRIC, MARKET, GPUS, then $/H
  when TOTAL or EXPECTED is shown; then it cuts LAUNCHABLE, INSTANCE, REGION/ZONE and
  CLOUD cells, widest first. The lines under it wrap at the same width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.catalog.money import format_money
from launcher.cli.table import Table, echo, print_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.api.planning import Plan
    from launcher.optimizer.ranking import Placement
    from launcher.provisioning.planning_rows import PlanRow

TOP_PLACEMENTS = 10  # lines of the plan table
MIN_OTHERS = 3  # non-launchable lines shown even when TOP_PLACEMENTS launchable ones exist
TOP_REASONS = 6  # rejection reasons spelled out in the summary line


def num(x: float | None) -> str:
    """8.0 -> "8", 0.5 -> "0.5", None -> "-"."""
    if x is None:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def fabric_text(fabric: str | None, gbps: float | None) -> str:
    """ "efa 3200G"; "?" when no source says."""
    if fabric is None:
        return "?"
    return f"{fabric} {num(gbps)}G" if gbps is not None else fabric


def plan_and_render(
    make_plan: Callable[[], Plan], as_json: bool, show_all: bool = False
) -> None:
    """Run `make_plan` and `render_plan` its result. For an unsatisfiable task with
    `as_json`, stdout still gets the plan's JSON shape (empty placements, the
    rejections, "error": the message) before the error propagates (message on
    stderr, exit 3)."""
    from launcher.api.planning import JSON_PLACEMENT_LIMIT, UnsatisfiableTaskError
    from launcher.cli.app import print_json

    limit = None if show_all else JSON_PLACEMENT_LIMIT
    try:
        plan = make_plan()
    except UnsatisfiableTaskError as err:
        if as_json:
            print_json(err.to_json(limit))
        raise
    render_plan(plan, as_json, limit)


def _line_groups(plan: Plan, rows: list[PlanRow]) -> list[list[PlanRow]]:
    """Runs of consecutive rows that differ only by region: one table line each."""
    groups: list[list[PlanRow]] = []
    prev: tuple[object, ...] | None = None
    for r in rows:
        p = plan.placements[r.first]
        key = (p.cloud, p.instance_type, p.use_spot, p.node_price, p.candidate.preference,
               p.accelerator, p.accelerator_count, p.fabric, p.expected_hourly_cost, r.reason)
        if key == prev:
            groups[-1].append(r)
        else:
            groups.append([r])
        prev = key
    return groups


def _shown(groups: list[list[PlanRow]]) -> list[list[PlanRow]]:
    """Launchable lines first (at most TOP_PLACEMENTS), then the best others."""
    ok = [g for g in groups if g[0].launchable][:TOP_PLACEMENTS]
    others = [g for g in groups if not g[0].launchable]
    return ok + others[: max(TOP_PLACEMENTS - len(ok), MIN_OTHERS)]


def _where(plan: Plan, group: list[PlanRow]) -> str:
    p = plan.placements[group[0].first]
    if len(group) > 1:
        return f"{p.region} (+{len(group) - 1} region{'s' if len(group) > 2 else ''})"
    zones = group[0].zones
    where = p.region + (f"/{p.zone}" if p.zone else "")
    if len(zones) > 1:
        where += f" (+{len(zones) - 1} zone{'s' if len(zones) > 2 else ''})"
    return where


def render_plan(plan: Plan, as_json: bool, limit: int | None = None) -> None:
    """Print a plan: the pinned JSON object (its first `limit` rows; None = all), or the
    table described in this module's docstring, then the chosen placement, notes and a
    one-line summary of rejected offers. Used by `launcher cost` and `launch --dryrun`."""
    if as_json:
        from launcher.cli.app import print_json

        print_json(plan.to_json(limit))
        return
    from launcher.api.planning import JSON_PLACEMENT_LIMIT, NOTHING_LAUNCHABLE, price_known

    with_total = plan.hours is not None
    # spot tasks: expected cost (list price x 1/(1 - rate x overhead)) and the rate used
    with_expected = plan.work_hours is not None
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("")
    table.add_column("CLOUD", min_width=6)
    table.add_column("REGION/ZONE", min_width=12)
    table.add_column("INSTANCE", min_width=14)
    table.add_column("GPUS", drop=6)
    table.add_column("NODES", "right", drop=2)
    table.add_column("MARKET", drop=5)
    table.add_column("FABRIC", drop=4)
    table.add_column("$/NODE-H", "right", drop=3)
    table.add_column("$/H", "right", drop=7 if with_total or with_expected else None)
    if with_total:
        table.add_column("TOTAL", "right")
    if with_expected:
        table.add_column("EXPECTED", "right")
        table.add_column("INTERRUPTS/NODE-H", drop=1)
    table.add_column("LAUNCHABLE", min_width=10)
    rows = plan.rows()
    shown = _shown(_line_groups(plan, rows))
    for group in shown:
        p = plan.placements[group[0].first]
        chosen_here = plan.chosen is not None and plan.chosen in group[0].members
        reason = group[0].reason
        priced = price_known(p)
        money = (format_money(p.node_price), format_money(p.hourly_cost)) if priced else ("-", "-")
        table.add_row(
            "->" if chosen_here else "",
            p.cloud,
            _where(plan, group),
            p.instance_type,
            f"{p.accelerator}:{num(p.accelerator_count)}" if p.accelerator else "-",
            str(p.num_nodes),
            "spot" if p.use_spot else "on-demand",
            fabric_text(p.fabric, p.fabric_gbps),
            *money,
            *((format_money(p.total_cost) if priced else "-",) if with_total else ()),
            *(_expected_cells(p, priced) if with_expected else ()),
            "yes" if reason is None else reason,
            style="bold green" if chosen_here else ("dim" if reason is not None else None),
        )
    hidden = print_table(table)
    more = len(rows) - sum(len(group) for group in shown)
    if more > 0:
        option = "--json" if len(rows) <= JSON_PLACEMENT_LIMIT else "--json --all"
        echo(f"... and {more} more placement{'s' if more != 1 else ''} "
             f"(`{option}` lists all {len(rows)})", fit=True)
    if hidden:
        echo(f"(not shown, to fit the terminal: {', '.join(hidden)})", style="dim", fit=True)
    _echo_chosen(plan, with_total, with_expected)
    if with_expected:
        overhead = plan.restart_overhead_hours or 0.0
        echo(f"EXPECTED: cost to finish {num(plan.work_hours)} h of work, counting a "
             f"{overhead * 60:.0f}-min restart per expected interruption (docs/spot.md).",
             style="dim", fit=True)
    for note in plan.notes:
        if note != NOTHING_LAUNCHABLE:  # the `chosen: none` line says it
            echo(note, style="dim", fit=True)
    echo(rejection_line(plan), fit=True)


def _echo_chosen(plan: Plan, with_total: bool, with_expected: bool) -> None:
    """The `chosen:` line: the placement a launch would try first, or why there is none."""
    from launcher.api.planning import price_known

    chosen = plan.chosen_placement
    if chosen is None:
        echo("chosen: none (no placement is launchable here; LAUNCHABLE says why, "
             "`launcher check` shows each cloud's status)", fit=True)
        return
    where = "/".join(x for x in (chosen.cloud, chosen.region, chosen.zone) if x)
    what = f"{chosen.num_nodes} x {chosen.instance_type}"
    if chosen.accelerator:
        what += f" ({chosen.accelerator}:{num(chosen.accelerator_count)})"
    priced = price_known(chosen)
    cost = f"{format_money(chosen.hourly_cost) if priced else '-'}/h" + (
        f", {format_money(chosen.total_cost) if priced else '-'} for {num(plan.hours)} h"
        if with_total else ""
    )
    market = "spot" if chosen.use_spot else "on-demand"
    if with_expected and chosen.use_spot and priced:
        cost += f", expected {_expected_total(chosen.expected_cost)}"
        if not with_total:
            cost += " per hour of work"
        cost += f" ({_rate(chosen)})"
    echo(f"chosen: {where}, {what} {market}, {cost}", style="bold", fit=True)


def _expected_total(x: float | None) -> str:
    return "never" if x is not None and x == float("inf") else format_money(x)


def _rate(p: Placement) -> str:
    """ "0.00044/h, aws spot advisor band >20%" (on-demand: "-")."""
    if p.interruption_rate_per_hour is None:
        return "-"
    return f"{p.interruption_rate_per_hour:.2g}/h, {p.interruption_source}"


def _expected_cells(p: Placement, priced: bool) -> tuple[str, str]:
    if not priced:
        return ("-", _rate(p))
    return (_expected_total(p.expected_cost), _rate(p))


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


__all__ = [
    "MIN_OTHERS",
    "TOP_PLACEMENTS",
    "fabric_text",
    "num",
    "plan_and_render",
    "rejection_line",
    "render_plan",
]
