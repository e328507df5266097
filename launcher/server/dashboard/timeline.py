"""A managed job's life as chart geometry: one row per attempt (provisioning, then
running), a mark where an attempt was preempted, and the recovery gap before the
next attempt ran split into deciding (old attempt ended -> new one asked for) and
provisioning + setup (asked for -> running). For a DEADLINE job, a vertical line where
its policy switched mode (spot / on-demand / idle) and the deadline and projected
finish (the time axis stretches to show them). The template draws it as SVG; all text
here is data, escaped when rendered."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

WIDTH = 1000.0
LEFT = 10.0
RIGHT = 10.0
ROW_H = 46.0
TOP = 8.0
AXIS_H = 26.0


@dataclass(frozen=True)
class Bar:
    attempt: int
    y: float
    x0: float  # asked for
    x_run: float | None  # running from here (None: never ran)
    x1: float  # ended, or now
    label: str
    outcome: str  # RUNNING while it runs
    title: str


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    label: str
    title: str


@dataclass(frozen=True)
class Phase:
    """One part of a recovery: detection, teardown, relaunch, setup (or "relaunch +
    setup" when the controller did not record where provisioning ended)."""

    name: str
    seconds: float
    x0: float
    x1: float
    color: str


@dataclass(frozen=True)
class Gap:
    x0: float
    x_ask: float
    x1: float
    y: float
    label: str
    title: str
    phases: tuple[Phase, ...] = ()  # from the RUNNING event's breakdown, when it has one


@dataclass(frozen=True)
class VLine:
    x: float
    label: str
    title: str
    kind: str  # switch | deadline | projected-ok | projected-late


@dataclass(frozen=True)
class Timeline:
    width: float
    height: float
    bars: list[Bar]
    preemptions: list[Mark]
    gaps: list[Gap]
    ticks: list[tuple[float, str]]
    axis_y: float
    lines: list[VLine]


def duration(s: float | None) -> str:
    """A short human duration: 0.4s, 12s, 5m, 1.5h, 3.2d ("-" for None)."""
    if s is None:
        return "-"
    s = max(0.0, float(s))
    if s < 10:
        return f"{s:.1f}s"
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.1f}h" if s < 172800 else f"{s / 86400:.1f}d"


_dur = duration


# The controller's RUNNING event after a recovery ends with its steps, e.g. "(detect 0.3
# s, decide 0.0 s, old cluster 1.2 s, record 0.0 s, provision 4.1 s, setup+submit 2.0 s,
# to running 0.0 s)" (RecoverySteps.breakdown in launcher/jobs/controller/context.py).
_STEP = re.compile(r"([a-z][a-z +]*?) (\d+(?:\.\d+)?) s(?:,|\)|$)")
_PHASE_OF = {"detect": "detection", "decide": "detection", "old cluster": "teardown",
             "record": "relaunch", "provision": "relaunch", "setup+submit": "setup",
             "to running": "setup"}
PHASE_COLORS = {"detection": "#e07b7b", "teardown": "#a77fd6", "relaunch": "#e8b53a",
                "setup": "#3fb39a", "relaunch + setup": "#e8b53a"}


def recovery_phases(reason: str) -> list[tuple[str, float]]:
    """The recovery's phases and their seconds from a RUNNING event's text, in order:
    detection (the loss -> the controller decided), teardown (-> the old cluster gone),
    relaunch (-> the new nodes provisioned), setup (-> the job running). [] when the text
    has no breakdown. Without a provision step the last two are one "relaunch + setup"."""
    at = reason.rfind("after the preemption (")
    if at < 0:
        return []
    steps = [(m.group(1).strip(), float(m.group(2)))
             for m in _STEP.finditer(reason, at + len("after the preemption ("))]
    steps = [(k, v) for k, v in steps if k in _PHASE_OF]
    if not steps:
        return []
    merge = all(k != "provision" for k, _ in steps)
    out: dict[str, float] = {}
    for k, v in steps:
        name = _PHASE_OF[k]
        if merge and name in ("relaunch", "setup"):
            name = "relaunch + setup"
        out[name] = out.get(name, 0.0) + v
    return list(out.items())


def _where(a: dict[str, Any]) -> str:
    market = "" if a.get("use_spot") is None else (" spot" if a["use_spot"] else " on-demand")
    nodes = f"{a['num_nodes']}x " if a.get("num_nodes") else ""
    price = f" ${a['node_price']:.2f}/h" if a.get("node_price") is not None else ""
    return f"#{a['attempt']} {a['where']} {nodes}{a.get('instance_type') or '?'}{market}{price}"


def build(attempts: list[dict[str, Any]], submitted_at: float, now: float, *,
          switches: list[dict[str, Any]] | None = None, deadline_at: float | None = None,
          projected_at: float | None = None,
          events: list[dict[str, Any]] | None = None) -> Timeline:
    """`attempts`: the job detail's attempts (AttemptView as dicts), in order;
    `switches`: its policy switches (PolicySwitch as dicts: at, mode, reason); `events`:
    its controller events (EventRow as dicts), whose RUNNING event after a preemption
    splits that recovery's gap into its phases (`recovery_phases`)."""
    running_reason = {e["attempt"]: e["reason"] for e in events or []
                      if e["to_status"] == "RUNNING" and e.get("attempt") is not None}
    end = max([now if a["ended_at"] is None else a["ended_at"] for a in attempts] + [now
              if not attempts else submitted_at + 1.0]
              + [t for t in (deadline_at, projected_at) if t is not None])
    start = min([submitted_at] + [a["started_at"] for a in attempts])
    span = max(end - start, 1.0)

    def x(t: float) -> float:
        return LEFT + (t - start) / span * (WIDTH - LEFT - RIGHT)

    bars: list[Bar] = []
    marks: list[Mark] = []
    gaps: list[Gap] = []
    for i, a in enumerate(attempts):
        y = TOP + i * ROW_H
        ended = a["ended_at"] if a["ended_at"] is not None else now
        outcome = a["outcome"] or ("RUNNING" if a["running_at"] else "STARTING")
        ran = (ended - a["running_at"]) if a["running_at"] else 0.0
        title = (f"attempt {a['attempt']} ({a['cause']}) cluster {a['cluster']}: {outcome}"
                 f"{': ' + a['reason'] if a.get('reason') else ''}; ran {_dur(ran)}, "
                 f"cost ${a['cost']:.4f}")
        bars.append(Bar(a["attempt"], y, x(a["started_at"]),
                        x(a["running_at"]) if a["running_at"] else None, max(x(ended),
                        x(a["started_at"]) + 2), f"{_where(a)} · {outcome} · ${a['cost']:.4f}",
                        outcome, title))
        if a["outcome"] == "PREEMPTED" and a["ended_at"] is not None:
            # the controller's reason for a noticed one (watch.py): "interruption notice
            # for NODE (grace N s)"; otherwise the cloud reported the node gone
            noticed = "interruption notice" in (a.get("reason") or "")
            marks.append(Mark(x(a["ended_at"]), y,
                              "preempted, with notice" if noticed else "preempted, no notice",
                              f"preempted: {a.get('reason') or 'no reason given'}"))
        if i > 0 and attempts[i - 1]["ended_at"] is not None:
            prev_end = attempts[i - 1]["ended_at"]
            ran_at = a["running_at"] if a["running_at"] else now
            deciding, provisioning = a["started_at"] - prev_end, ran_at - a["started_at"]
            what = "recovery" if a["cause"] == "preemption" else "restart"
            took = a["recovery_s"] if a.get("recovery_s") is not None else ran_at - prev_end
            parts = recovery_phases(running_reason.get(a["attempt"], "")) if a[
                "running_at"] else []
            if parts:
                # drawn back from when it ran: the steps end there and add up to the recovery
                t1, phases = a["running_at"], []
                for name, secs in reversed(parts):
                    phases.append(Phase(name, secs, x(t1 - secs), x(t1),
                                        PHASE_COLORS.get(name, "#fde7a8")))
                    t1 -= secs
                phases.reverse()
                said = " · ".join(f"{p.name} {_dur(p.seconds)}" for p in phases)
                gaps.append(Gap(phases[0].x0, x(a["started_at"]), x(ran_at), y,
                                f"{what} {_dur(took)}: {said}", f"{what}: {said}",
                                tuple(phases)))
                continue
            gaps.append(Gap(x(prev_end), x(a["started_at"]), x(ran_at), y, f"{what} {_dur(took)}",
                            f"{what}: deciding {_dur(deciding)}, provisioning + setup "
                            f"{_dur(provisioning)}"))
    lines = [VLine(x(sw["at"]), "→ " + sw["mode"].replace("_", "-"),
                   f"policy: {sw['mode']}: {sw['reason']}", "switch") for sw in switches or []]
    if deadline_at is not None:
        lines.append(VLine(x(deadline_at), "deadline", "the deadline", "deadline"))
    if projected_at is not None:
        late = deadline_at is not None and projected_at > deadline_at
        lines.append(VLine(x(projected_at), "projected finish",
                           "projected finish" + (", after the deadline" if late else ""),
                           "projected-late" if late else "projected-ok"))
    axis_y = TOP + max(len(attempts), 1) * ROW_H + 4
    ticks = [(x(start + span * k / 4), "+" + _dur(span * k / 4)) for k in range(5)]
    return Timeline(WIDTH, axis_y + AXIS_H, bars, marks, gaps, ticks, axis_y, lines)
