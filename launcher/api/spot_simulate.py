"""Spot simulation API: replay spot availability traces through a deadline policy for a task.

`simulate_task` is what `launcher jobs simulate` calls. The task gives the gang size and the
resources; the prices come from the task's catalog placement that a trace records (its cloud,
zone and machine, from the trace's metadata or file name: launcher.spot.trace_origin), else
from its cheapest placement, among those that list both an on-demand and a spot price (the spot
price per tick from the trace instead, when the trace has prices); `placement_matches_trace`
says which. The policy code is launcher.spot.policy, the same the managed-jobs controller runs.

Without a deadline the deadline is infinite: every policy then waits for spot (never needs
on-demand; the "on_demand" policy still runs on-demand), and a job the traces never let finish
within ten times its work (replayed cyclically) is reported as not finished.

Errors are LauncherError subclasses naming the option: a missing or bad trace file (`--trace`),
traces with different tick lengths, a deadline shorter than the work plus one restart overhead
(`--deadline`), a non-positive `--hours`, an unknown `--policy`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.errors import LauncherError, UsageError
from launcher.spot.policy import DEFAULT_POLICY, policy_by_name
from launcher.spot.simulate import Prices, SimulationResult, simulate
from launcher.spot.trace_origin import TraceOrigin
from launcher.spot.traces import SpotTrace, TraceError, load_traces


class SpotTraceError(LauncherError):
    """A trace file given with --trace is missing or unusable."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class PricedPlacement:
    """Where the prices came from."""

    description: str  # "aws us-east-1 p3.2xlarge x1"
    on_demand_h: float  # per node
    spot_h: float  # per node (used where the trace has no prices)
    matches_trace: bool = False  # the placement a trace records (else: the cheapest)


@dataclass(frozen=True, slots=True)
class TaskSimulation:
    result: SimulationResult
    placement: PricedPlacement
    n_nodes: int
    work_h: float
    restart_overhead_h: float
    traces: tuple[str, ...]
    trace_prices: bool  # the spot price came from the traces
    origins: tuple[TraceOrigin, ...] = ()  # what each trace records (same order as `traces`)

    def to_json(self) -> dict[str, object]:
        """The `--json` document: plain names (see docs/spot.md)."""
        r = self.result
        return {
            "policy": r.policy,
            "cost": round(r.cost, 6),
            "on_demand_cost": round(r.on_demand_cost, 6),
            "savings": round(r.savings, 6),
            "finished": r.finished,
            "finish_hours": None if r.finish_h is None else round(r.finish_h, 6),
            "deadline_hours": r.deadline_h,
            "deadline_met": r.deadline_met,
            "preemptions": r.preemptions,
            "restarts": r.restarts,
            "spot_hours": round(r.spot_hours, 6),
            "on_demand_hours": round(r.on_demand_hours, 6),
            "idle_hours": round(r.idle_hours, 6),
            "work_hours": self.work_h,
            "restart_overhead_hours": self.restart_overhead_h,
            "num_nodes": self.n_nodes,
            "placement": self.placement.description,
            "placement_matches_trace": self.placement.matches_trace,
            "trace_origins": [_origin_json(o) for o in self.origins],
            "on_demand_price_per_node_hour": self.placement.on_demand_h,
            "spot_price_per_node_hour": None if self.trace_prices else self.placement.spot_h,
            "spot_price_source": "trace" if self.trace_prices else "catalog",
            "traces": list(self.traces),
            "decisions": [
                {"tick": d.tick, "elapsed_hours": round(d.elapsed_s / 3600, 6), "mode": d.mode.value,
                 "reason": d.reason}
                for d in r.decisions
            ],
        }


def load_trace_files(paths: Sequence[str]) -> tuple[SpotTrace, ...]:
    """Load --trace files, turning TraceError into a user-facing error naming the option."""
    if not paths:
        raise UsageError("--trace is required: one or more spot trace JSON files (comma-separated).")
    try:
        return load_traces(paths)
    except TraceError as e:
        raise SpotTraceError(f"--trace: {e}.") from None


def _origin_json(o: TraceOrigin) -> dict[str, object]:
    return {"file": o.file, "cloud": o.cloud, "region": o.region, "zone": o.zone,
            "instance_type": o.instance_type, "accelerator": o.accelerator, "nodes": o.nodes,
            "synthetic": o.synthetic, "from_file_name": o.from_file_name}


def cheapest_priced_placement(
    task: object, origins: Sequence[TraceOrigin] = ()
) -> tuple[PricedPlacement, int]:
    """The placement of `task` whose prices the simulation uses, and its gang size: among
    the placements listing both market prices (catalog order, cheapest first), the first
    that a trace records (same cloud, zone, machine: TraceOrigin.matches), else the first.
    Raises NoPlacementError (from planning) or UsageError when none lists both."""
    from launcher.api import planning

    plan = planning.cost(task)  # type: ignore[arg-type]
    priced = [p for p in plan.placements if p.offer.price and p.offer.spot_price]
    if not priced:
        raise UsageError(
            "no catalog placement of this task lists both an on-demand and a spot price, so "
            "the simulation has no prices; pick resources that are offered on spot."
        )
    matched = [p for p in priced if any(
        o.matches(p.cloud, p.region, p.zone, p.instance_type, p.accelerator) for o in origins)]
    p = (matched or priced)[0]
    where = p.zone or p.region
    desc = f"{p.cloud} {where} {p.instance_type} x{p.num_nodes}"
    assert p.offer.price and p.offer.spot_price
    return (PricedPlacement(desc, float(p.offer.price), float(p.offer.spot_price),
                            matches_trace=bool(matched)), p.num_nodes)


def simulate_task(
    task_path: str,
    *,
    hours: float | None,
    traces: Sequence[str],
    deadline_h: float | None = None,
    policy: str | None = None,
    restart_overhead_min: float | None = None,
) -> TaskSimulation:
    """Replay `traces` (one file per zone) for `hours` of work of the task in `task_path`.

    `hours`, `deadline_h`, `policy` and `restart_overhead_min` default to the task's
    `job_recovery` (duration, deadline in hours, policy, restart_overhead) when it gives them;
    `hours` is required otherwise, the others default to no deadline, the "launcher" policy and
    the optimizer's default restart overhead."""
    from launcher.optimizer.ranking import DEFAULT_RESTART_OVERHEAD_HOURS
    from launcher.task.model import Task

    zones = load_trace_files(traces)
    task = Task.from_yaml(task_path, require_values=False)
    recovery = getattr(task, "job_recovery", None)
    if hours is None:
        hours = getattr(recovery, "duration_hours", None)
        if hours is None:
            raise UsageError("--hours is required: the work the job needs, in hours (the task's "
                             "job_recovery gives no duration).")
    if not (isinstance(hours, int | float) and math.isfinite(hours) and hours > 0):
        raise UsageError(f"--hours must be a positive number of hours (the work the job needs), got {hours}.")
    if deadline_h is None:
        deadline_h = getattr(recovery, "deadline_hours", None)
        deadline_at = getattr(recovery, "deadline_at", None)
        if deadline_h is None and deadline_at is not None:  # an absolute time: from now
            deadline_h = max(0.0, (deadline_at - time.time()) / 3600.0)
    if policy is None:
        policy = getattr(recovery, "policy", None) or DEFAULT_POLICY
    try:
        pol = policy_by_name(policy)
    except ValueError as e:
        raise UsageError(f"--policy: {e}.") from None
    if restart_overhead_min is not None:
        if not (math.isfinite(restart_overhead_min) and restart_overhead_min >= 0):
            raise UsageError(f"--restart-overhead must be minutes >= 0, got {restart_overhead_min}.")
        overhead_h = restart_overhead_min / 60.0
    else:
        minutes = getattr(recovery, "restart_overhead_minutes", None)
        overhead_h = minutes / 60.0 if minutes is not None else DEFAULT_RESTART_OVERHEAD_HOURS
    if deadline_h is not None:
        if not (math.isfinite(deadline_h) and deadline_h > 0):
            raise UsageError(f"--deadline must be a positive number of hours from the start, got {deadline_h}.")
        if hours + overhead_h > deadline_h + 1e-9:
            raise UsageError(
                f"--deadline {deadline_h:g} h is shorter than the work (--hours {hours:g} h) plus one "
                f"restart overhead ({overhead_h * 60:g} min): no policy can meet it, not even "
                "on-demand from the start. Give a later --deadline, less --hours, or a smaller "
                "--restart-overhead."
            )
    origins = tuple(z.origin for z in zones if z.origin is not None)
    placement, n_nodes = cheapest_priced_placement(task, origins)
    result = simulate(
        zones,
        pol,
        work_s=hours * 3600.0,
        deadline_s=deadline_h * 3600.0 if deadline_h is not None else math.inf,
        restart_overhead_s=overhead_h * 3600.0,
        prices=Prices(on_demand_h=placement.on_demand_h, spot_h=placement.spot_h),
        n_nodes=n_nodes,
    )
    return TaskSimulation(
        result=result,
        placement=placement,
        n_nodes=n_nodes,
        work_h=hours,
        restart_overhead_h=overhead_h,
        traces=tuple(z.source for z in zones),
        trace_prices=all(z.prices is not None for z in zones),
        origins=origins,
    )
