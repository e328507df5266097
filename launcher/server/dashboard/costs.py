"""The cost page's figures, all from `launcher.api.cost_report` (the ledger, launch-time
prices): the window's lines, totals per cloud and per user, and per day for the last
days (the ledger's cost inside each one-day window, `window_costs`), stacked by cloud.

An admin sees every line; a user the lines of their own managed jobs and clusters,
including clusters already taken down: the server keeps who launched each cluster
(`ServerStore.cluster_launches`), and a ledger interval belongs to the launch of that
name that came last before it started (a name reused by another user later is theirs
from then on; the report splits the lines so).

Speed: the ledger comes from the process's cache (`launcher.api.ledger_cache`, refreshed
with what changed on each view), the lines are summed as `cost_report.Group`s and only
the shown page's `CostLine`s are built (`CostView.page_lines`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from launcher.api import ledger_cache
from launcher.api.cost_report import (
    DAY_S,
    CostLine,
    Group,
    check_days,
    groups,
    job_of,
    window_costs,
)
from launcher.api.server_store import ServerStore, User
from launcher.state.db import UsageEntry

PALETTE = ("#5b8def", "#2e9d52", "#e0a526", "#c0392b", "#8e5bd0", "#1aa3a3", "#8a93a3")
MAX_DAYS = 14
TOP_JOBS = 10


@dataclass(frozen=True)
class DayBar:
    label: str  # MM-DD
    total: float
    parts: list[tuple[str, float, float, float]]  # cloud, cost, y, height (chart units)


@dataclass(frozen=True)
class CostView:
    groups: list[Group]  # the lines, most expensive first, not built yet
    attempts: dict[str, tuple[int, int]]
    total: float
    node_hours: float
    by_cloud: list[tuple[str, float]]
    by_user: list[tuple[str, float]]
    days: list[DayBar]
    colors: dict[str, str]
    by_job: list[tuple[int, float]]  # managed jobs, most expensive first (at most TOP_JOBS)

    @property
    def count(self) -> int:
        return len(self.groups)

    @property
    def top(self) -> float:
        """The most expensive line's cost (0 without lines)."""
        return self.groups[0].cost if self.groups else 0.0

    @property
    def lines(self) -> list[CostLine]:
        """Every line, most expensive first (as `launcher cost-report` lists them)."""
        return self.page_lines(0, len(self.groups))

    def page_lines(self, start: int, stop: int) -> list[CostLine]:
        """Lines [start, stop) of `lines`, building only those."""
        return [g.line(self.attempts) for g in self.groups[start:stop]]


class Owners:
    """Who a ledger interval, or a cost line, belongs to (a user name, or None when the
    server did not record one)."""

    def __init__(self, store: ServerStore) -> None:
        self.jobs = store.job_owners()
        self.current = store.cluster_owners(self.jobs)
        self.launches = store.cluster_launches()
        # a managed job's ledger owner -> who launched the job (of_entry, per interval)
        self.by_owner = {f"managed-job:{j}": who for j, who in self.jobs.items()}

    def launcher(self, cluster: str, at: float) -> str | None:
        """Who launched `cluster` last before `at` (its current owner without records)."""
        launches = self.launches.get(cluster)
        if not launches:
            return self.current.get(cluster)
        who = None
        for launched_at, user in launches:  # oldest first
            if launched_at <= at + 1e-3:
                who = user
        return who

    def of_entry(self, e: UsageEntry) -> str | None:
        if e.owner in self.by_owner:
            return self.by_owner[e.owner]
        if e.owner and e.owner.startswith("managed-job:"):
            tail = e.owner.split(":", 1)[1]
            return self.jobs.get(int(tail)) if tail.isdigit() else None
        return self.launcher(e.cluster, e.started_at)

    def of_line(self, line: CostLine) -> str | None:
        if line.job_id is not None:
            return self.jobs.get(line.job_id)
        return self.launcher(line.cluster, line.first_start)


def _sorted(d: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))


def view(user: User, days: float, now: float | None = None,
         chart_h: float = 110.0) -> CostView:
    """Raises UsageError for a bad `days` (as `launcher cost-report --days` does)."""
    check_days(days)
    now = time.time() if now is None else now
    with ServerStore() as store:
        owners = Owners(store)

    ledger = ledger_cache.read()  # once, for the window and each day
    attempts = ledger.attempts
    shown: list[Group] = []
    by_cloud: dict[str, float] = {}
    by_user: dict[str, float] = {}
    by_job: dict[int, float] = {}
    for g in groups(ledger.entries, since=now - days * DAY_S, until=now,
                    split=owners.of_entry):
        found = attempts.get(g.cluster) if g.owner else None  # = g.job_attempt(attempts)
        job_id = found[0] if found else job_of(g.owner)
        who = (owners.jobs.get(job_id) if job_id is not None
               else owners.launcher(g.cluster, g.first_start))
        if not (user.is_admin or who == user.name):
            continue
        shown.append(g)
        if job_id is not None:
            by_job[job_id] = by_job.get(job_id, 0.0) + g.cost
        cloud = g.cloud
        by_cloud[cloud] = by_cloud.get(cloud, 0.0) + g.cost
        who = who or "(not recorded)"
        by_user[who] = by_user.get(who, 0.0) + g.cost
    midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    windows, labels = [], []
    for k in reversed(range(min(MAX_DAYS, math.ceil(days)))):
        start = midnight - timedelta(days=k)
        windows.append((start.timestamp(), min(now, (start + timedelta(days=1)).timestamp())))
        labels.append(start.strftime("%m-%d"))

    def cloud_if_mine(e: UsageEntry) -> str | None:
        return e.cloud if user.is_admin or owners.of_entry(e) == user.name else None

    per_day = list(zip(labels, window_costs(ledger.entries, windows, cloud_if_mine),
                       strict=True))
    top = max([sum(c.values()) for _, c in per_day] + [0.0])
    colors = {cloud: PALETTE[i % len(PALETTE)] for i, cloud in enumerate(
        sorted({c for _, d in per_day for c in d} | set(by_cloud)))}
    bars = []
    for label, clouds in per_day:
        y, parts = chart_h, []
        for cloud, cost in sorted(clouds.items()):
            h = cost / top * chart_h if top else 0.0
            y -= h
            parts.append((cloud, cost, y, h))
        bars.append(DayBar(label, sum(clouds.values()), parts))
    return CostView(shown, attempts, sum(g.cost for g in shown),
                    sum(g.node_hours for g in shown), _sorted(by_cloud),
                    _sorted(by_user) if user.is_admin else [], bars, colors,
                    sorted(by_job.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_JOBS])


def by_user(days: float, now: float | None = None) -> dict[str, float]:
    """Each user's cost in the last `days` days (clusters taken down included; managed
    jobs' attempts count for who launched the job). For the admins' users page."""
    now = time.time() if now is None else now
    with ServerStore() as store:
        owners = Owners(store)
    (out,) = window_costs(ledger_cache.read(attempts=False).entries, [(now - days * 86400.0, now)],
                          lambda e: owners.of_entry(e) or "(not recorded)")
    return out
