"""Spot interruption rates: how often a spot node is expected to be reclaimed, per hour.

    from launcher.catalog import interruption
    table = interruption.load_table()            # parsed once per process
    table.rate("aws", "us-east-1", "p5.48xlarge") -> InterruptionRate(per_hour, source)

Data (facts only, in `data/`):
- `aws_spot_interruption.csv` (region, instance_type, band): the AWS Spot Instance
  Advisor's interruption band per region and type, Linux, for the instance types of
  the bundled AWS rows (built by `launcher.catalog.fetchers.aws_spot_advisor` from a
  copy of the feed). `launcher catalog refresh --cloud aws` fetches the live feed into
  `$LAUNCHER_HOME/catalog/aws_spot_interruption.csv`, which then wins.
- `spot_interruption_defaults.csv`: one documented rate per cloud for rows without
  data (GCP, Azure, RunPod, ... and AWS types missing from the table), each with its
  source or "assumption"; `*` is the fallback for any other cloud.

The rule from a band to a rate (docs/spot.md, "Expected cost"): a band is the share of
instances Spot reclaimed over the trailing month; its midpoint (`>20%`: 30%, an
assumption) is read as the probability p that one instance is interrupted within a
month (730 h) of running, and the per-hour hazard of a Poisson process with that
monthly probability is -ln(1 - p) / 730.

Standard library only, cheap to import; no network.
"""

from __future__ import annotations

import csv
import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

HOURS_PER_MONTH = 730.0
BAND_LABELS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
# Each band's midpoint as a monthly fraction; >20% is open-ended: 30% is an assumption.
BAND_MONTHLY_FRACTION = (0.025, 0.075, 0.125, 0.175, 0.30)
AWS_TABLE = "aws_spot_interruption.csv"
DEFAULTS_TABLE = "spot_interruption_defaults.csv"
FALLBACK_CLOUD = "*"


@dataclass(frozen=True, slots=True)
class InterruptionRate:
    """Expected interruptions of one spot node per running hour, and where the number
    comes from ("aws spot advisor band 5-10%", "default for gcp (5-15% a day)")."""

    per_hour: float
    source: str


def monthly_to_hourly(fraction: float) -> float:
    """The per-hour hazard of a Poisson process that interrupts an instance within a
    month (730 h) with probability `fraction` (0 <= fraction < 1)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"a monthly interruption fraction must be in [0, 1), got {fraction}")
    return -math.log1p(-fraction) / HOURS_PER_MONTH


def band_rate(band: int) -> InterruptionRate:
    """The rate of a Spot Advisor band (0..4), by the rule in the module docstring."""
    if not 0 <= band < len(BAND_LABELS):
        raise ValueError(f"a Spot Advisor band is 0..4, got {band}")
    return InterruptionRate(
        monthly_to_hourly(BAND_MONTHLY_FRACTION[band]),
        f"aws spot advisor band {BAND_LABELS[band]}",
    )


_BAND_RATES = tuple(band_rate(b) for b in range(len(BAND_LABELS)))


@dataclass(frozen=True)
class DefaultRate:
    """A row of spot_interruption_defaults.csv: the rate and its basis (for docs)."""

    cloud: str
    rate: InterruptionRate
    basis: str


class InterruptionTable:
    """Rates by (cloud, region, instance type): AWS bands where the table has the row,
    else the cloud's default, else the `*` fallback. Immutable after construction;
    `rate` is a dict lookup."""

    def __init__(
        self, aws_bands: Mapping[tuple[str, str], int], defaults: Mapping[str, DefaultRate]
    ) -> None:
        if FALLBACK_CLOUD not in defaults:
            raise ValueError(f"the defaults need a {FALLBACK_CLOUD!r} row")
        self._aws = dict(aws_bands)
        self._defaults = dict(defaults)

    def __len__(self) -> int:
        return len(self._aws)

    def band(self, region: str, instance_type: str) -> int | None:
        """The AWS Spot Advisor band of (region, type), or None when the table lacks it."""
        return self._aws.get((region, instance_type))

    def defaults(self) -> list[DefaultRate]:
        return sorted(self._defaults.values(), key=lambda d: (d.cloud == FALLBACK_CLOUD, d.cloud))

    def rate(self, cloud: str, region: str, instance_type: str) -> InterruptionRate:
        if cloud == "aws":
            band = self._aws.get((region, instance_type))
            if band is not None:
                return _BAND_RATES[band]
        d = self._defaults.get(cloud) or self._defaults[FALLBACK_CLOUD]
        return d.rate


def read_aws_table(path: str) -> dict[tuple[str, str], int]:
    """(region, instance type) -> band from a `region,instance_type,band` CSV. Raises
    ValueError naming the line for a bad band."""
    out: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines or lines[0].split(",") != ["region", "instance_type", "band"]:
        raise ValueError(f"{path}:1: header is not region,instance_type,band")
    for n, line in enumerate(lines[1:], start=2):  # plain fields: no quoting to parse
        region, itype, b = line.split(",")
        band = int(b)
        if not 0 <= band < len(BAND_LABELS):
            raise ValueError(f"{path}:{n}: band {band} is not 0..4")
        out[(region, itype)] = band
    return out


def read_defaults(path: str) -> dict[str, DefaultRate]:
    """cloud -> DefaultRate from spot_interruption_defaults.csv (a row gives either a
    `monthly_fraction`, converted by monthly_to_hourly, or a `rate_per_hour`)."""
    out: dict[str, DefaultRate] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for n, row in enumerate(csv.DictReader(f), start=2):
            if row["monthly_fraction"]:
                per_hour = monthly_to_hourly(float(row["monthly_fraction"]))
            elif row["rate_per_hour"]:
                per_hour = float(row["rate_per_hour"])
            else:
                raise ValueError(f"{path}:{n}: neither monthly_fraction nor rate_per_hour")
            out[row["cloud"]] = DefaultRate(row["cloud"], InterruptionRate(per_hour, row["source"]),
                                            row["basis"])
    return out


def data_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def aws_table_path() -> str:
    """The per-user table a refresh wrote, when there is one; else the bundled table."""
    from launcher.config.settings import launcher_home

    user = os.path.join(str(launcher_home()), "catalog", AWS_TABLE)
    return user if os.path.exists(user) else os.path.join(data_dir(), AWS_TABLE)


_lock = threading.Lock()
_cached: tuple[str, InterruptionTable] | None = None


def load_table() -> InterruptionTable:
    """The process's table (parsed once per table file; ~2 ms). A broken per-user table
    falls back to the bundled one."""
    global _cached
    path = aws_table_path()
    with _lock:
        if _cached is not None and _cached[0] == path:
            return _cached[1]
        defaults = read_defaults(os.path.join(data_dir(), DEFAULTS_TABLE))
        try:
            bands = read_aws_table(path)
        except (OSError, ValueError, KeyError):
            path = os.path.join(data_dir(), AWS_TABLE)
            bands = read_aws_table(path)
        table = InterruptionTable(bands, defaults)
        _cached = (path, table)
        return table


@dataclass(frozen=True)
class TableInfo:
    """Where the AWS band table in use comes from (for `launcher catalog status`)."""

    origin: str  # "bundled" or "refreshed" (`launcher catalog refresh --cloud aws`)
    path: str
    rows: int
    source: str
    fetched_at: str  # ISO date/time the feed was published or fetched ("" = unknown)


def table_info() -> TableInfo:
    """The provenance of the table `load_table` reads (its JSON sidecar, written with it)."""
    import json

    path = aws_table_path()
    origin = "bundled" if os.path.dirname(path) == data_dir() else "refreshed"
    meta: dict[str, object] = {}
    try:
        with open(os.path.splitext(path)[0] + ".json", encoding="utf-8") as f:
            loaded = json.load(f)
        meta = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        pass
    rows = meta.get("rows")
    return TableInfo(origin, path, rows if isinstance(rows, int) else len(load_table()),
                     str(meta.get("source") or "AWS Spot Advisor feed"),
                     str(meta.get("fetched_at") or ""))


def clear_cache() -> None:
    """Forget the parsed table (after a refresh wrote a new one; tests)."""
    global _cached
    with _lock:
        _cached = None
