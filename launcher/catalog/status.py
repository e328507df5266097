"""How fresh the catalog is: typed status per cloud (what `launcher catalog status` shows).

Staleness is never hidden: every cloud's `fetched_at` and its age in days are reported,
`stale` is set past `STALE_AFTER_DAYS`, and `fetched_at_exact` is False when the
upstream date is unknown (then `fetched_at` is when the reference copy was made, and
the prices may be older than the age suggests).
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from typing import Any

STALE_AFTER_DAYS = 30.0


@dataclass(frozen=True)
class CloudStatus:
    cloud: str
    rows: int
    source: str
    upstream: str
    fetched_at: str  # ISO-8601 UTC
    fetched_at_exact: bool
    age_days: float | None  # None when fetched_at cannot be parsed
    stale: bool
    completeness: str  # "complete", "subset", "refreshed" or "live" (the local cloud)
    note: str
    # where the rows in use come from: "snapshot" (bundled or $LAUNCHER_CATALOG_DIR),
    # "refreshed" (`launcher catalog refresh`, from the cloud's own API) or "live"
    origin: str = "snapshot"
    regions: tuple[str, ...] = ()  # a refreshed cloud's regions (empty for snapshot rows)


@dataclass(frozen=True)
class SpotRatesStatus:
    """The AWS Spot Advisor interruption bands in use (docs/spot.md, "Expected cost")."""

    origin: str  # "bundled" or "refreshed"
    rows: int
    source: str
    fetched_at: str  # "" when unknown
    age_days: float | None
    stale: bool


@dataclass(frozen=True)
class CatalogStatus:
    snapshot_hash: str
    snapshot_dir: str
    bundled: bool  # False when $LAUNCHER_CATALOG_DIR points elsewhere
    total_rows: int  # catalog rows, local offers excluded
    clouds: tuple[CloudStatus, ...]
    stale_after_days: float
    max_age_days: float | None  # age of the oldest cloud's data
    any_stale: bool
    spot_interruption: SpotRatesStatus | None = None  # the spot interruption bands in use

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_time(text: str) -> datetime.datetime | None:
    """ISO-8601 date or date-time ("Z" allowed) -> aware UTC datetime, or None."""
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def age_days(fetched_at: str, now: datetime.datetime) -> float | None:
    t = parse_time(fetched_at)
    return None if t is None else round((now - t).total_seconds() / 86400, 2)
