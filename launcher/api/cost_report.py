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


def _attempts(path: str) -> dict[str, tuple[int, int]]:
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


def _job_of(owner: str | None) -> int | None:
    if owner and owner.startswith("managed-job:"):
        try:
            return int(owner.split(":", 1)[1])
        except ValueError:
            return None
    return None


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
    groups: dict[tuple[str, str | None, object], list[UsageEntry]] = {}
    for e in entries:
        if e.started_at > until or (e.ended_at is not None and e.ended_at <= since):
            continue  # (the common case when one ledger is reported per day: cheap)
        if _overlap(e, since, until) > 0 or (e.ended_at is None and e.started_at <= until):
            groups.setdefault((e.cluster, e.owner, split(e) if split else None), []).append(e)
    lines = []
    for (cluster, owner, _), es in groups.items():
        es.sort(key=lambda e: (e.started_at, e.id))
        last = es[-1]
        secs = [_overlap(e, since, until) for e in es]
        hours = sum(secs) / 3600.0
        node_hours = sum(s / 3600.0 * e.num_nodes for s, e in zip(secs, es, strict=True))
        cost = sum(s / 3600.0 * e.hourly_cost for s, e in zip(secs, es, strict=True))
        running = any(e.ended_at is None for e in es)
        job_attempt = (attempts or {}).get(cluster) if owner else None
        lines.append(
            CostLine(
                cluster=cluster,
                owner=owner,
                job_id=job_attempt[0] if job_attempt else _job_of(owner),
                attempt=job_attempt[1] if job_attempt else None,
                cloud=last.cloud,
                region=last.region,
                zone=last.zone,
                instance_type=last.instance_type,
                num_nodes=last.num_nodes,
                use_spot=last.use_spot,
                hourly_cost=last.hourly_cost,
                intervals=len(es),
                first_start=es[0].started_at,
                last_end=None if running else max(e.ended_at or 0.0 for e in es),
                hours=round(hours, 6),
                node_hours=round(node_hours, 6),
                cost=round(cost, 6),
                running=running,
            )
        )
    lines.sort(key=lambda ln: (-ln.cost, ln.first_start, ln.cluster))
    return tuple(lines)


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
    return Ledger(tuple(entries), _attempts(str(db.path)) if attempts else {})


def window_costs(entries: Iterable[UsageEntry], windows: Sequence[tuple[float, float]],
                 key: Callable[[UsageEntry], str | None]) -> list[dict[str, float]]:
    """For each window (since, until): the cost of the ledger intervals inside it, summed
    per `key(entry)` (None: left out); the same clipping and prices as the report's lines,
    without building them (a chart's bars, per-user totals). Pure."""
    out: list[dict[str, float]] = [{} for _ in windows]
    for e in entries:
        k = None
        start, end = e.started_at, e.ended_at
        for i, (since, until) in enumerate(windows):
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


def cost_report(days: float = 30.0, *, now: float | None = None,
                split: Split | None = None, ledger: Ledger | None = None) -> CostReport:
    """The cost of every cluster and managed-job attempt in the last `days` days, from
    the ledger (launch-time prices). Raises UsageError for a non-positive `days`.
    `split`: see `summarize` (None: one line per cluster and owner, as the CLI shows);
    `ledger`: what `read_ledger` read (None: read it now)."""
    if not days > 0 or days != days or days == float("inf"):
        raise UsageError(f"--days takes a positive number of days, got {days!r}.")
    got = read_ledger() if ledger is None else ledger
    return build_report(
        got.entries,
        days=days,
        now=time.time() if now is None else now,
        attempts=got.attempts,
        split=split,
    )
