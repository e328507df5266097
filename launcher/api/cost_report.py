"""`launcher cost-report`: what your clusters and managed jobs cost, from the cost ledger.

    from launcher import api
    api.cost_report(days=30) -> CostReport        # .to_json() for --json

The ledger (`cost_ledger` in the state DB) gets one interval per stretch of a cluster's
nodes being up: opened when a launch (or a managed job's attempt, or `start`) has its
nodes, closed by `down`, `stop`, a preemption or a managed job's teardown. Each interval
keeps the hourly price of the placement it was launched at (all nodes, $/h). The report
reads only that: it never re-prices with today's catalog, so a refresh or a price change
does not rewrite history.

Window: the last `days` days up to `now`. An interval that started before the window
counts only from the window's start; one still open counts until `now`. Rows: one per
(cluster, owner), i.e. per cluster you launched and per managed-job attempt (the
attempt's cluster, owner `managed-job:<id>`, its attempt number looked up from the
managed-job tables). Read-only; blocking; needs no credentials and no network.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from launcher.errors import UsageError
from launcher.state import store
from launcher.state.db import StateDB, UsageEntry

DAY_S = 86400.0
Split = Callable[[UsageEntry], object]


@dataclass(frozen=True)
class CostLine:
    """One cluster (or one managed-job attempt) within the window."""

    cluster: str
    owner: str | None  # None = launched by the user; "managed-job:<id>"
    job_id: int | None
    attempt: int | None
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    hourly_cost: float  # $/h of the whole cluster, as launched (last interval's)
    intervals: int  # ledger intervals in the window (stop/start makes several)
    first_start: float  # earliest interval start (unclipped)
    last_end: float | None  # None = still running
    hours: float  # wall hours inside the window
    node_hours: float
    cost: float
    running: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CostReport:
    since: float
    until: float
    days: float
    lines: tuple[CostLine, ...]  # most expensive first
    total_cost: float
    total_node_hours: float
    clusters_cost: float  # clusters you launched
    managed_jobs_cost: float  # managed jobs' attempts
    by_cloud: dict[str, float]
    by_job: dict[int, float]  # managed job id -> cost of its attempts in the window

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["by_job"] = {str(k): v for k, v in self.by_job.items()}
        out["lines"] = [line.to_json() for line in self.lines]
        return out


def _overlap(e: UsageEntry, since: float, until: float) -> float:
    """Seconds of `e` inside [since, until] (an open entry runs until `until`)."""
    end = e.ended_at if e.ended_at is not None else until
    return max(0.0, min(end, until) - max(e.started_at, since))


def read_attempts(path: str) -> dict[str, tuple[int, int]]:
    """cluster name -> (job id, attempt) from the managed-job tables, if there are any."""
    try:
        conn = store.connect_readonly(path, timeout=10.0)
    except store.STORE_ERRORS:
        return {}
    try:
        if not store.table_exists(conn, "managed_job_attempts"):
            return {}
        rows = conn.execute("SELECT cluster_name, job_id, attempt FROM managed_job_attempts")
        return {str(c): (int(j), int(a)) for c, j, a in rows.fetchall()}
    except store.STORE_ERRORS:
        return {}
    finally:
        conn.close()


def job_of(owner: str | None) -> int | None:
    """The managed job id in a ledger owner `managed-job:<id>` (None for any other)."""
    if owner and owner.startswith("managed-job:"):
        try:
            return int(owner.split(":", 1)[1])
        except ValueError:
            return None
    return None


class Group:
    """One report line's figures before the line is built: the ledger entries of one
    (cluster, owner[, split]) inside a window, clipped to it. Building a `CostLine` is
    most of a line's cost; a page that shows 100 of 4,000 lines sorts and sums groups
    and builds only the lines it shows (`line`)."""

    __slots__ = ("cluster", "owner", "entries", "hours", "node_hours", "cost", "running",
                 "first_start")

    def __init__(self, cluster: str, owner: str | None, entries: list[UsageEntry],
                 since: float, until: float) -> None:
        self.cluster, self.owner, self.entries = cluster, owner, entries
        if len(entries) == 1:  # the common case, kept cheap (same figures as below)
            e = entries[0]
            end = e.ended_at if e.ended_at is not None else until
            s = (end if end < until else until) - (
                e.started_at if e.started_at > since else since)
            s = s if s > 0.0 else 0.0  # = _overlap(e, since, until)
            self.hours = round(s / 3600.0, 6)
            self.node_hours = round(s / 3600.0 * e.num_nodes, 6)
            self.cost = round(s / 3600.0 * e.hourly_cost, 6)
            self.running = e.ended_at is None
        else:
            entries.sort(key=lambda e: (e.started_at, e.id))
            secs = [_overlap(e, since, until) for e in entries]
            self.hours = round(sum(secs) / 3600.0, 6)
            self.node_hours = round(sum(
                s / 3600.0 * e.num_nodes for s, e in zip(secs, entries, strict=True)), 6)
            self.cost = round(sum(
                s / 3600.0 * e.hourly_cost for s, e in zip(secs, entries, strict=True)), 6)
            self.running = any(e.ended_at is None for e in entries)
        self.first_start = entries[0].started_at

    @property
    def cloud(self) -> str:
        return self.entries[-1].cloud

    def job_attempt(self, attempts: dict[str, tuple[int, int]] | None
                    ) -> tuple[int | None, int | None]:
        """(managed job id, attempt) of this line, as its `CostLine` says."""
        found = (attempts or {}).get(self.cluster) if self.owner else None
        return (found[0], found[1]) if found else (job_of(self.owner), None)

    def line(self, attempts: dict[str, tuple[int, int]] | None = None) -> CostLine:
        last = self.entries[-1]
        job_id, attempt = self.job_attempt(attempts)
        return CostLine(
            cluster=self.cluster,
            owner=self.owner,
            job_id=job_id,
            attempt=attempt,
            cloud=last.cloud,
            region=last.region,
            zone=last.zone,
            instance_type=last.instance_type,
            num_nodes=last.num_nodes,
            use_spot=last.use_spot,
            hourly_cost=last.hourly_cost,
            intervals=len(self.entries),
            first_start=self.first_start,
            last_end=None if self.running else max(e.ended_at or 0.0 for e in self.entries),
            hours=self.hours,
            node_hours=self.node_hours,
            cost=self.cost,
            running=self.running,
        )


def groups(
    entries: Iterable[UsageEntry],
    *,
    since: float,
    until: float,
    split: Split | None = None,
) -> list[Group]:
    """The report's lines as groups (see `Group`), most expensive first. Pure."""
    by_key: dict[tuple[str, str | None, object], list[UsageEntry]] = {}
    for e in entries:
        start, end = e.started_at, e.ended_at
        if start > until or (end is not None and end <= since):
            continue  # (the common case when one ledger is reported per day: cheap)
        # an open entry that started counts; a closed one when _overlap(e, ...) > 0
        if end is None or (end if end < until else until) - (
                start if start > since else since) > 0:
            key = (e.cluster, e.owner, split(e) if split else None)
            got = by_key.get(key)
            if got is None:
                by_key[key] = [e]
            else:
                got.append(e)
    out = [Group(cluster, owner, es, since, until) for (cluster, owner, _), es in by_key.items()]
    out.sort(key=lambda g: (-g.cost, g.first_start, g.cluster))
    return out


def summarize(
    entries: Iterable[UsageEntry],
    *,
    since: float,
    until: float,
    attempts: dict[str, tuple[int, int]] | None = None,
    split: Split | None = None,
) -> tuple[CostLine, ...]:
    """Group ledger entries by (cluster, owner) and clip them to [since, until]. Pure.
    `split`: entries of one group for which it differs make separate lines (the API
    server: one line per user when a cluster name was used by several)."""
    return tuple(g.line(attempts) for g in groups(entries, since=since, until=until,
                                                    split=split))


def build_report(
    entries: Sequence[UsageEntry],
    *,
    days: float,
    now: float,
    attempts: dict[str, tuple[int, int]] | None = None,
    split: Split | None = None,
) -> CostReport:
    since = now - days * DAY_S
    lines = summarize(entries, since=since, until=now, attempts=attempts, split=split)
    by_cloud: dict[str, float] = {}
    by_job: dict[int, float] = {}
    for ln in lines:
        by_cloud[ln.cloud] = round(by_cloud.get(ln.cloud, 0.0) + ln.cost, 6)
        if ln.job_id is not None:
            by_job[ln.job_id] = round(by_job.get(ln.job_id, 0.0) + ln.cost, 6)
    return CostReport(
        since=since,
        until=now,
        days=days,
        lines=lines,
        total_cost=float(round(sum(ln.cost for ln in lines), 6)),
        total_node_hours=float(round(sum(ln.node_hours for ln in lines), 6)),
        clusters_cost=float(round(sum(ln.cost for ln in lines if ln.job_id is None), 6)),
        managed_jobs_cost=float(round(sum(ln.cost for ln in lines if ln.job_id is not None), 6)),
        by_cloud=dict(sorted(by_cloud.items())),
        by_job=dict(sorted(by_job.items())),
    )


@dataclass(frozen=True)
class Ledger:
    """The ledger's intervals and each cluster name's managed-job attempt, read once to
    report on several windows (`cost_report(..., ledger=)`)."""

    entries: tuple[UsageEntry, ...]
    attempts: dict[str, tuple[int, int]]


def read_ledger(clusters: Iterable[str] | None = None, *, attempts: bool = True) -> Ledger:
    """The whole ledger, or only the intervals of `clusters`; `attempts=False` skips the
    managed-job lookup (lines then carry job ids from their owner only)."""
    db = StateDB()
    try:
        entries = db.usage() if clusters is None else [e for c in clusters
                                                        for e in db.usage(c)]
    finally:
        db.close()
    return Ledger(tuple(entries), read_attempts(str(db.path)) if attempts else {})


def window_costs(entries: Iterable[UsageEntry], windows: Sequence[tuple[float, float]],
                 key: Callable[[UsageEntry], str | None]) -> list[dict[str, float]]:
    """For each window (since, until): the cost of the ledger intervals inside it, summed
    per `key(entry)` (None: left out); the same clipping and prices as the report's lines,
    without building them (a chart's bars, per-user totals). Pure. Windows in order and
    apart (a chart's days) are searched, not scanned: each entry visits only its own."""
    out: list[dict[str, float]] = [{} for _ in windows]
    untils = [u for _, u in windows]
    bounds = [t for w in windows for t in w]
    ordered = all(bounds[i] <= bounds[i + 1] for i in range(len(bounds) - 1))
    for e in entries:
        k = None
        start, end = e.started_at, e.ended_at
        # the windows before the first that ends after `start` are all skipped below
        first = bisect.bisect_right(untils, start) if ordered else 0
        for i in range(first, len(windows)):
            since, until = windows[i]
            if ordered and end is not None and end <= since:
                break  # so are all later ones
            if start >= until or (end is not None and end <= since):
                continue  # (most windows, for most entries: kept cheap)
            secs = _overlap(e, since, until)
            if secs <= 0:
                continue
            if k is None:
                k = key(e)
                if k is None:
                    break
            out[i][k] = out[i].get(k, 0.0) + secs / 3600.0 * e.hourly_cost
    return out


def check_days(days: float) -> None:
    """Raises UsageError unless `days` is a positive, finite number."""
    if not days > 0 or days != days or days == float("inf"):
        raise UsageError(f"--days takes a positive number of days, got {days!r}.")


def cost_report(days: float = 30.0, *, now: float | None = None,
                split: Split | None = None, ledger: Ledger | None = None) -> CostReport:
    """The cost of every cluster and managed-job attempt in the last `days` days, from
    the ledger (launch-time prices). Raises UsageError for a non-positive `days`.
    `split`: see `summarize` (None: one line per cluster and owner, as the CLI shows);
    `ledger`: what `read_ledger` read (None: read it now)."""
    check_days(days)
    got = read_ledger() if ledger is None else ledger
    return build_report(
        got.entries,
        days=days,
        now=time.time() if now is None else now,
        attempts=got.attempts,
        split=split,
    )
