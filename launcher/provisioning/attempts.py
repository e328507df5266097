"""Every provisioning attempt, recorded in the state DB before the cloud is called.

One table of the state DB (launcher/state/schema.py):
`provision_attempts(cluster, attempt, token, cloud, region, zone, instance_type,
started_at, outcome, error_class, message, ended_at)`.

The idempotency token of an attempt is derived from the cluster name and the
attempt number (`idempotency_token`), so it is stable for that attempt and
different for every other one. Rules:
- `begin` writes the row (outcome NULL = pending) before the cloud call. If the
  newest row of the cluster is still pending for the same placement (a process
  killed during the call, or a retried call) and began after the cluster's row was
  created, it is reused with its token, so the cloud can answer "already created"
  instead of creating a second gang.
- `finish` records the outcome (`ok`, `failed`); `abandon_pending` (called by
  teardown) closes pending rows, so a token is never reused after the cluster's
  nodes were terminated.
Attempt numbers grow per cluster name for the life of the DB: a cluster launched
again under the same name gets new tokens.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from launcher.state.db import StateDB


def idempotency_token(cluster_name: str, attempt: int) -> str:
    """`lc-<24 hex>`: a hash of (cluster name, attempt number). 27 ASCII characters, so
    it fits every provider's limit (EC2 ClientToken: 64)."""
    digest = hashlib.sha256(f"{cluster_name}\0{attempt}".encode()).hexdigest()
    return f"lc-{digest[:24]}"


@dataclass(frozen=True)
class AttemptRow:
    cluster: str
    attempt: int
    token: str
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    started_at: float
    outcome: str | None  # None = pending (the cloud call has not returned)
    error_class: str | None
    message: str | None


_COLUMNS = ("cluster, attempt, token, cloud, region, zone, instance_type, started_at, "
            "outcome, error_class, message")


def begin(db: StateDB, cluster: str, cloud: str, region: str, zone: str | None,
          instance_type: str, *, not_before: float | None = None) -> AttemptRow:
    """Record an attempt about to call the cloud (or reuse the pending one for the same
    placement, if it started at or after `not_before`: the cluster row's launch time, so
    a cluster forgotten and launched again under its name never gets an old token).
    Returns the row whose `token` goes into the ProvisionRequest."""
    with db.transaction() as conn:
        last = conn.execute(
            f"SELECT {_COLUMNS} FROM provision_attempts WHERE cluster=? "
            "ORDER BY attempt DESC LIMIT 1", (cluster,)).fetchone()
        if last is not None:
            row = AttemptRow(*last)
            same = (row.cloud, row.region, row.zone, row.instance_type) == (
                cloud, region, zone, instance_type)
            fresh = not_before is None or row.started_at >= not_before
            if row.outcome is None and same and fresh:
                return row
            if row.outcome is None:  # pending for another placement: it never returned
                conn.execute(
                    "UPDATE provision_attempts SET outcome='abandoned', ended_at=? "
                    "WHERE cluster=? AND attempt=?", (time.time(), cluster, row.attempt))
        number = (last[1] if last else 0) + 1
        token = idempotency_token(cluster, number)
        now = time.time()
        conn.execute(
            f"INSERT INTO provision_attempts ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (cluster, number, token, cloud, region, zone, instance_type, now, None, None, None))
    return AttemptRow(cluster, number, token, cloud, region, zone, instance_type, now,
                      None, None, None)


def finish(db: StateDB, row: AttemptRow, outcome: str, error_class: str | None = None,
           message: str | None = None) -> None:
    """Record how the attempt ended (`ok`, `failed`). Idempotent."""
    with db.transaction() as conn:
        conn.execute(
            "UPDATE provision_attempts SET outcome=?, error_class=?, message=?, ended_at=? "
            "WHERE cluster=? AND attempt=?",
            (outcome, error_class, message, time.time(), row.cluster, row.attempt))


def abandon_pending(db: StateDB, cluster: str) -> None:
    """Close every pending attempt of `cluster` (its nodes were terminated): their
    tokens are never reused. Idempotent."""
    with db.transaction() as conn:
        conn.execute(
            "UPDATE provision_attempts SET outcome='abandoned', ended_at=? "
            "WHERE cluster=? AND outcome IS NULL", (time.time(), cluster))


def history(db: StateDB, cluster: str) -> list[AttemptRow]:
    """Every attempt of `cluster`, oldest first."""
    with db.transaction() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM provision_attempts WHERE cluster=? ORDER BY attempt",
            (cluster,)).fetchall()
    return [AttemptRow(*r) for r in rows]
