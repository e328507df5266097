"""GPU listings for `launcher gpus` and the catalog's status (split from planning.py,
which re-exports everything public here).

`gpus`, `gpu_summary`, `price_dates`, `catalog_status`, `parse_accelerator_spec`.
Read-only, no credentials, nothing printed. Raises `InvalidQueryError` /
`UnknownLocationError` (both exit code 2) for bad query arguments.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.catalog.locations import (
    LIVE_CLOUDS,
    canonical_cloud,
    canonical_region,
    catalog_locations,
)
from launcher.catalog.offer import FABRICS, LOCAL_CLOUD, Offer, fabric_satisfies
from launcher.catalog.query_args import InvalidQueryError, _catalog_clouds, json_number
from launcher.provisioning.offers import SSH_CLOUD, catalog_offers, pool_regions

if TYPE_CHECKING:
    from datetime import datetime

    from launcher.catalog.status import CatalogStatus

__all__ = [
    "GpuListing",
    "GpuRow",
    "GpuSummaryRow",
    "InvalidQueryError",
    "PriceDates",
    "catalog_age_days",
    "catalog_status",
    "gpu_summary",
    "gpus",
    "json_number",
    "parse_accelerator_spec",
    "price_dates",
]


# ---------------------------------------------------------------- gpus


@dataclass(frozen=True)
class GpuRow:
    """One row of `launcher gpus`: an offer (the cheapest region's, unless all regions
    were asked for) with its $/GPU-h; `regions` = how many regions offer the same
    (cloud, instance type)."""

    offer: Offer
    price_per_gpu: float | None  # on-demand $/GPU-h
    spot_price_per_gpu: float | None
    regions: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = self.offer.to_dict()
        d["accelerator_count"] = json_number(self.offer.accelerator_count)
        d["price_per_gpu_hour"] = self.price_per_gpu
        d["spot_price_per_gpu_hour"] = self.spot_price_per_gpu
        d["regions"] = self.regions
        return d


@dataclass(frozen=True)
class GpuListing:
    """`gpus(...)` result: rows sorted by price; `fetched_at` range of the rows shown;
    `unpriced_hidden`: the clouds of the rows left out for having no price at all (one
    entry per row; empty when `unpriced` was asked for)."""

    rows: list[GpuRow]
    oldest_fetched_at: str | None
    newest_fetched_at: str | None
    unpriced_hidden: tuple[str, ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.rows]

    to_dict = to_json

    def age_days(self, now: datetime | None = None) -> float | None:
        """Age of the oldest row shown, in days (None when the date cannot be read)."""
        return catalog_age_days(self.oldest_fetched_at, now)


@dataclass(frozen=True)
class PriceDates:
    """How old some prices are, honestly: `oldest_exact` is the oldest fetched_at whose
    upstream date is known; `oldest_copied` the oldest date a reference copy was made
    for a source whose upstream date is unknown (its prices may be older than that)."""

    oldest_exact: str | None
    oldest_copied: str | None


def price_dates(stamps: Iterable[str] | None = None) -> PriceDates:
    """Split `stamps` (rows' fetched_at; None = every catalog cloud's) into exact
    dates and copy dates, using the snapshot's per-cloud `fetched_at_exact`."""
    from launcher.catalog import query

    metas = query.cloud_metas()
    copied = {m.fetched_at for m in metas if not m.fetched_at_exact}
    copied.update(d for m in metas for d in m.copied_dates)
    shown = {m.fetched_at for m in metas} if stamps is None else {s for s in stamps if s}
    exact = sorted(shown - copied)
    inexact = sorted(shown & copied)
    return PriceDates(exact[0] if exact else None, inexact[0] if inexact else None)


def catalog_age_days(fetched_at: str | None, now: datetime | None = None) -> float | None:
    """Days since an ISO-8601 timestamp (naive = UTC). None if missing/unparseable."""
    from datetime import UTC, datetime

    if not fetched_at:
        return None
    try:
        when = datetime.fromisoformat(fetched_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - when).total_seconds() / 86400.0


def parse_accelerator_spec(spec: str, known_names: Collection[str]) -> tuple[str, float | None]:
    """ "h100:8" -> ("H100", 8.0); "H100" -> ("H100", None). Names are matched to the
    catalog's case-insensitively. Raises InvalidQueryError (close matches suggested)."""
    text = spec.strip()
    name, sep, count_text = text.partition(":")
    name = name.strip()
    count: float | None = None
    if sep:
        try:
            count = float(count_text)
        except ValueError:
            raise InvalidQueryError(
                f"Bad accelerator '{spec}': the count after ':' must be a number (e.g. H100:8)."
            ) from None
        if not count > 0 or count != count or count == float("inf"):
            raise InvalidQueryError(f"Bad accelerator '{spec}': the count must be a positive number.")
        if count > 1 and count != int(count):  # as in a task: fractions are shares of one GPU
            raise InvalidQueryError(
                f"Bad accelerator '{spec}': a fractional count must be below 1 (a share of one GPU)."
            )
    if not name:
        raise InvalidQueryError(f"Bad accelerator '{spec}': expected NAME or NAME:COUNT (e.g. H100:8).")
    return canonical_accelerator(name, known_names), count


def canonical_accelerator(name: str, known_names: Collection[str]) -> str:
    """The catalog's spelling of `name` (ignoring case, then '-', '_' and spaces; then
    the other names users write, e.g. 'A100-40GB'). Raises InvalidQueryError with close
    names suggested."""
    from launcher.catalog.aliases import user_aliases
    from launcher.task.fields import canonical_accelerator_name, unknown_accelerator_message

    hit = canonical_accelerator_name(name, known_names, user_aliases())
    if hit is None:
        message = unknown_accelerator_message(name, known_names)
        raise InvalidQueryError(message[0].upper() + message[1:])
    return hit


def _check_fabric(fabric: str | None) -> str | None:
    if fabric is None:
        return None
    f = fabric.strip().lower()
    from launcher.task.resources import REQUESTABLE_FABRICS

    if f not in REQUESTABLE_FABRICS:
        raise InvalidQueryError(
            f"Unknown fabric '{fabric}': use one of {', '.join(REQUESTABLE_FABRICS)}."
        )
    return None if f == "any" else f


def _fabric_ok(o: Offer, fabric: str | None, min_gbps: float | None) -> bool:
    if fabric is not None and not fabric_satisfies(o.fabric, fabric):
        return False
    return min_gbps is None or (o.fabric_gbps is not None and o.fabric_gbps >= min_gbps)


def _per_gpu(price: float | None, count: float) -> float | None:
    return price / count if price is not None and count > 0 else None


_INF = float("inf")


def gpus(
    accelerator: str | None = None,
    count: float | None = None,
    *,
    cloud: str | None = None,
    region: str | None = None,
    spot: bool = False,
    fabric: str | None = None,
    min_gbps: float | None = None,
    all_regions: bool = False,
    unpriced: bool = False,
) -> GpuListing:
    """GPU offers, one row per (cloud, instance type) in its cheapest region unless
    `all_regions`. `accelerator` is matched case-insensitively (None = every GPU model);
    `count` = GPUs per node (exact); `spot` keeps rows with a spot price and sorts by it;
    `fabric` / `min_gbps` as in `resources.network`. The `local` cloud is listed only
    when asked for by `cloud`. Rows with neither an on-demand nor a spot price (a
    catalog that lists an instance but not what it costs) are left out unless
    `unpriced` (then last); `unpriced_hidden` says which were. Sorted by $/GPU-h, then
    $/h, then cloud/type/region.
    Raises InvalidQueryError / UnknownLocationError (exit code 2) for an unknown
    accelerator, cloud, region or fabric, or a bad number.
    """
    from launcher.catalog import query

    fab = _check_fabric(fabric)
    if min_gbps is not None and not min_gbps >= 0:
        raise InvalidQueryError(f"--min-gbps must be a non-negative number, got {min_gbps:g}.")
    if count is not None and not count > 0:
        raise InvalidQueryError(f"The accelerator count must be positive, got {count:g}.")
    names = query.accelerator_names()
    accs = [canonical_accelerator(accelerator, names)] if accelerator is not None else list(names)
    clouds = None
    # every cloud the listing can show: the catalog's, local, ssh (the user's pools) and
    # kubernetes (its contexts' nodes, read only when asked for by `cloud`)
    known_clouds = list(dict.fromkeys([*_catalog_clouds(query), SSH_CLOUD, "kubernetes"]))
    if cloud is not None:
        cloud = "kubernetes" if cloud.lower() == "k8s" else cloud
        cloud = canonical_cloud(cloud, known_clouds)
        clouds = [cloud]
    if region is not None and cloud != LOCAL_CLOUD:
        pools = pool_regions() if cloud in (None, SSH_CLOUD) else []

        def locations_of(c: str) -> Mapping[str, Sequence[str | None]]:
            # a pool is the ssh cloud's region (no zones)
            return {p: (None,) for p in pools} if c == SSH_CLOUD else catalog_locations(c)

        region = canonical_region(
            region,
            clouds or [c for c in known_clouds if c not in LIVE_CLOUDS or c == SSH_CLOUD],
            locations_of,
        )
    def row_of(o: Offer) -> tuple[Any, ...]:
        key: tuple[Any, ...] = (o.cloud, o.instance_type, o.accelerator, o.accelerator_count)
        return key + (o.region,) if all_regions else key

    rows: list[Offer] = []
    unpriced_rows: dict[tuple[Any, ...], str] = {}  # left out: row -> its cloud
    for o in catalog_offers(accs, clouds):
        if o.accelerator is None:
            continue
        if o.cloud == LOCAL_CLOUD and cloud != LOCAL_CLOUD:
            continue
        if count is not None and abs(o.accelerator_count - count) > 1e-9:
            continue
        if region is not None and o.region != region:
            continue
        if spot and o.spot_price is None:
            continue
        if not _fabric_ok(o, fab, min_gbps):
            continue
        if not unpriced and o.price is None and o.spot_price is None:
            unpriced_rows[row_of(o)] = o.cloud
            continue
        rows.append(o)

    def market_price(o: Offer) -> float:
        p = o.spot_price if spot else o.price
        return _INF if p is None else p

    def region_key(o: Offer) -> tuple[float, float, str, str]:
        other = o.price if spot else o.spot_price
        return (market_price(o), _INF if other is None else other, o.region, o.zone or "")

    groups: dict[tuple[Any, ...], list[Offer]] = {}
    for o in rows:
        groups.setdefault(row_of(o), []).append(o)
    out: list[GpuRow] = []
    for members in groups.values():
        best = min(members, key=region_key)
        regions = len({m.region for m in members})
        out.append(
            GpuRow(
                best,
                _per_gpu(best.price, best.accelerator_count),
                _per_gpu(best.spot_price, best.accelerator_count),
                regions,
            )
        )

    def row_key(r: GpuRow) -> tuple[float, float, str, str, str]:
        mp = market_price(r.offer)
        per_gpu = (
            mp / r.offer.accelerator_count if mp != _INF and r.offer.accelerator_count else _INF
        )
        return (per_gpu, mp, r.offer.cloud, r.offer.instance_type, r.offer.region)

    out.sort(key=row_key)
    stamps = sorted({r.offer.fetched_at for r in out if r.offer.fetched_at})
    hidden = tuple(sorted(c for key, c in unpriced_rows.items() if key not in groups))
    return GpuListing(out, stamps[0] if stamps else None, stamps[-1] if stamps else None, hidden)


# ---------------------------------------------------------------- gpu summary

# Best fabric first, for the summary's "best fabric" column.
_FABRIC_RANK = {f: i for i, f in enumerate(("infiniband", "efa", "roce", "tcpx", "ethernet"))}
assert set(_FABRIC_RANK) == set(FABRICS)


@dataclass(frozen=True)
class GpuSummaryRow:
    """One GPU model across the catalog (the `local` cloud excluded)."""

    accelerator: str
    accelerator_memory_gib: float | None
    counts: tuple[float, ...]  # GPUs per node on offer
    min_price_per_gpu: float | None  # cheapest on-demand $/GPU-h
    min_spot_price_per_gpu: float | None
    clouds: tuple[str, ...]
    best_fabric: str | None  # RDMA fabrics first, then by bandwidth
    best_fabric_gbps: float | None
    fetched_at: str | None  # oldest row of this model

    def to_dict(self) -> dict[str, Any]:
        return {
            "accelerator": self.accelerator,
            "accelerator_memory_gib": self.accelerator_memory_gib,
            "counts": [json_number(c) for c in self.counts],
            "min_price_per_gpu_hour": self.min_price_per_gpu,
            "min_spot_price_per_gpu_hour": self.min_spot_price_per_gpu,
            "clouds": list(self.clouds),
            "best_fabric": self.best_fabric,
            "best_fabric_gbps": self.best_fabric_gbps,
            "fetched_at": self.fetched_at,
        }


def gpu_summary() -> list[GpuSummaryRow]:
    """One row per GPU model: cheapest on-demand and spot $/GPU-h, clouds, best fabric.
    Sorted by model name (case-insensitive). Reads the catalog; never raises for data."""
    from launcher.catalog import query

    acc: dict[str, list[Offer]] = {}
    for o in catalog_offers(query.accelerator_names()):
        if o.accelerator is None or o.cloud == LOCAL_CLOUD:
            continue
        acc.setdefault(o.accelerator, []).append(o)
    out = []
    for name in sorted(acc, key=lambda n: (n.lower(), n)):
        rows = acc[name]
        od = [p for o in rows if (p := _per_gpu(o.price, o.accelerator_count)) is not None]
        sp = [p for o in rows if (p := _per_gpu(o.spot_price, o.accelerator_count)) is not None]
        with_fabric = [o for o in rows if o.fabric is not None]
        best = (
            min(
                with_fabric,
                key=lambda o: (_FABRIC_RANK.get(o.fabric or "", 99), -(o.fabric_gbps or 0)),
            )
            if with_fabric
            else None
        )
        mems = [o.accelerator_memory_gib for o in rows if o.accelerator_memory_gib is not None]
        stamps = [o.fetched_at for o in rows if o.fetched_at]
        out.append(
            GpuSummaryRow(
                accelerator=name,
                accelerator_memory_gib=max(set(mems), key=mems.count) if mems else None,
                counts=tuple(sorted({o.accelerator_count for o in rows})),
                min_price_per_gpu=min(od) if od else None,
                min_spot_price_per_gpu=min(sp) if sp else None,
                clouds=tuple(sorted({o.cloud for o in rows})),
                best_fabric=best.fabric if best else None,
                best_fabric_gbps=best.fabric_gbps if best else None,
                fetched_at=min(stamps) if stamps else None,
            )
        )
    return out


# ---------------------------------------------------------------- catalog status


def catalog_status() -> CatalogStatus:
    """The catalog's status: per cloud rows, source, fetched_at, age and staleness
    (`launcher.catalog.status.CatalogStatus`; `to_dict()` for JSON). Reads metadata only."""
    from launcher.catalog import query

    return query.status()
