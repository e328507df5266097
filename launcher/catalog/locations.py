"""Task locations (cloud / region / zone) checked and spelled as the catalog spells them.

    resolve_task_locations(task, offers, catalog_clouds, locations_of) -> (Task, offers)
    catalog_locations(cloud) -> {region: (zone, ...)}     (query.locations, memoized)
    canonical_cloud(name, known) / canonical_region(region, cloud, ...) for `launcher gpus`

Region and zone names match case-insensitively (`US-EAST-1` is `us-east-1`, Azure's
`EastUS` is `eastus`). An unknown name is a TaskValidationError at the field that
gave it (`resources.infra`, `resources.region`, `resources.zone`, with its YAML line),
with close names suggested.

AWS zones: the catalog lists AWS zone *IDs* (`use1-az1`), which are the same for
every account; zone *names* (`us-east-1a`) map to IDs differently per account. A zone
name is accepted: its region must exist, and the placement keeps the name as its
zone. The planner then considers every instance type sold anywhere in the region
(one row per type, the highest listed prices of the region: an honest upper bound).

Cheap on the common path: a location is first looked up in the offers the planner
already read; the catalog's location list (one indexed query per cloud, memoized per
process) is read only when that misses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from launcher.catalog.offer import Offer
from launcher.errors import LauncherError
from launcher.task.fields import close_matches

if TYPE_CHECKING:
    from launcher.task.model import Task
    from launcher.task.resources import Resources

__all__ = [
    "AWS_ZONE_NAME_RE",
    "LIVE_CLOUDS",
    "UnknownLocationError",
    "canonical_cloud",
    "canonical_region",
    "catalog_locations",
    "resolve_task_locations",
]

# `us-east-1a`, `us-gov-west-1b`, `ap-southeast-2c` (not the ID form `use1-az1`).
AWS_ZONE_NAME_RE = re.compile(r"([a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d+)([a-z])\Z")
# Clouds whose offers are computed live (no catalog rows, no region list to check).
LIVE_CLOUDS = ("local", "ssh", "kubernetes", "slurm")
_LIST_AT_MOST = 12  # list every known name in an error when there are at most this many

LocationsOf = Callable[[str], Mapping[str, Sequence[str | None]]]


class UnknownLocationError(LauncherError):
    """A command-line cloud/region that the catalog does not know (exit code 2)."""

    exit_code = 2


def catalog_locations(cloud: str) -> Mapping[str, Sequence[str | None]]:
    """{region: zones} of `cloud` in the installed catalog (`query.locations`)."""
    from launcher.catalog import query

    return query.locations(cloud)


def _names(items: Collection[str]) -> str:
    # vast's regions read 'Ontario, CA, NA' (or ', CN, AS'): quote names holding a comma
    # so the list stays readable, and sort them by their first real character
    ordered = [
        f"'{n}'" if "," in n else n
        for n in sorted(items, key=lambda n: (n.lstrip(", ").lower(), n))
    ]
    if len(ordered) <= _LIST_AT_MOST:
        return ", ".join(ordered)
    return ", ".join(ordered[:_LIST_AT_MOST]) + f", ... ({len(ordered)} in all)"


def _fold(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _suggest(word: str, choices: Collection[str]) -> str:
    same = [c for c in choices if _fold(c) == _fold(word)]
    if len(same) == 1:  # `us-east1`, `US_EAST_1`: only punctuation differs
        return f"; did you mean {same[0]}?"
    close = close_matches(word, choices)
    if not close:
        close = close_matches(word.lower(), [c.lower() for c in choices])
        lowered = {c.lower(): c for c in choices}
        close = [lowered[c] for c in close]
    return f"; did you mean {' or '.join(close)}?" if close else ""


# SkyPilot clouds with neither catalog rows nor a provisioner here (issue 12): a task
# naming one is refused by that name, with that reason.
SKYPILOT_ONLY_CLOUDS = frozenset({
    "fluidstack", "cudo", "paperspace", "ibm", "scp", "do", "primeintellect", "shadeform",
    "vsphere", "coreweave",
})


def canonical_cloud(name: str, known: Collection[str]) -> str:
    """`name` as the catalog spells it (case-insensitive). Raises UnknownLocationError
    listing the known clouds, with a suggestion."""
    lowered = {k.lower(): k for k in known}
    found = lowered.get(name.strip().lower())
    if found is None:
        from launcher.task.cloud_names import cloud_suggestions

        hits = cloud_suggestions(name, known)
        suggest = f"; did you mean {' or '.join(hits)}?" if hits else ""
        raise UnknownLocationError(
            f"Unknown cloud '{name}'{suggest} (the catalog has {', '.join(sorted(known))})."
        )
    return found


def canonical_region(
    region: str, clouds: Collection[str], locations_of: LocationsOf = catalog_locations
) -> str:
    """`region` as the catalog spells it in one of `clouds`. Raises UnknownLocationError
    with a suggestion (the command-line form of the task check)."""
    found, known = _find_region(region, clouds, locations_of)
    if found is None:
        where = f" for {next(iter(clouds))}" if len(clouds) == 1 else ""
        raise UnknownLocationError(
            f"Unknown region '{region}'{where}{_suggest(region, known)} "
            f"(known regions{where}: {_names(known)})."
        )
    return found


def _find_region(
    region: str, clouds: Collection[str], locations_of: LocationsOf
) -> tuple[str | None, set[str]]:
    known: set[str] = set()
    for cloud in clouds:
        known.update(locations_of(cloud))
    if region in known:
        return region, known
    lowered = {k.lower(): k for k in known}
    return lowered.get(region.lower()), known


def resolve_task_locations(
    task: Task,
    offers: Sequence[Offer],
    catalog_clouds: Collection[str],
    locations_of: LocationsOf = catalog_locations,
) -> tuple[Task, list[Offer]]:
    """Check every cloud/region/zone the task names against the catalog and return the
    task with catalog spellings, plus `offers` with one row per instance type added
    under each AWS zone *name* the task pins (see the module doc). Returns the same
    task object when nothing changes. Raises TaskValidationError at the field."""
    spec = task.resources
    written = spec.all_written()
    pinned: set[tuple[str, str, str]] = set()
    new_written: list[Resources] = []
    skipped: list[str] = []
    first_skip: Exception | None = None
    for index, res in enumerate(written):
        cloud = res.cloud if res.cloud is not None or index == 0 else spec.base.cloud
        try:
            region, zone, aws_name = _resolve_one(
                task, res, cloud, offers, catalog_clouds, locations_of
            )
        except Exception as exc:
            if index == 0 or cloud not in SKYPILOT_ONLY_CLOUDS:
                raise
            # an alternative on a cloud launcher knows nothing of is dropped with a note
            # while other alternatives remain (like a Kubernetes one)
            first_skip = first_skip or exc
            from launcher.task.fields import format_path

            skipped.append(f"{format_path(res.path)} ({cloud}) is skipped: launcher has no "
                           f"prices and no provisioner for {cloud}.")
            continue
        if aws_name is not None:
            pinned.add(aws_name)
        if (region, zone) != (res.region, res.zone):
            res = replace(res, region=region, zone=zone)
        new_written.append(res)
    out_offers = list(offers)
    for cloud, region, zone in sorted(pinned):
        out_offers.extend(_zone_name_offers(offers, cloud, region, zone))
    if first_skip is not None and len(new_written) == 1 and len(written) > 1:
        raise first_skip  # every alternative was on such a cloud
    new_spec = replace(spec, base=new_written[0], alternatives=tuple(new_written[1:]))
    if new_spec != spec:
        task = replace(task, resources=new_spec)
    if skipped:
        task = replace(task, notes=(*task.notes, *skipped))
    return task, out_offers


def _resolve_one(
    task: Task,
    res: Resources,
    cloud: str | None,
    offers: Sequence[Offer],
    catalog_clouds: Collection[str],
    locations_of: LocationsOf,
) -> tuple[str | None, str | None, tuple[str, str, str] | None]:
    """(region, zone, AWS zone-name pin or None) for one written resources entry."""
    infra_path = (*res.path, "infra")
    via_infra = infra_path in task.origin.lines and task.origin.overridden_by(infra_path) is None

    def error(part: str, message: str) -> Exception:
        return task.error(_dotted(res.path, "infra" if via_infra else part), message)

    if cloud is not None and cloud not in LIVE_CLOUDS and cloud not in catalog_clouds:
        raise error(
            "cloud",
            f"{cloud}: launcher has no prices (no catalog rows) and no provisioner for this "
            "SkyPilot cloud, so it can neither plan nor launch there; name another cloud, or "
            "leave the cloud out to run on the cheapest one."
            if cloud in SKYPILOT_ONLY_CLOUDS else
            f"the catalog has no cloud '{cloud}'{_suggest(cloud, catalog_clouds)} (it has "
            f"{', '.join(sorted(set(catalog_clouds) - set(LIVE_CLOUDS)))}; "
            "local and ssh run on your own machines).",
        )
    region, zone = res.region, res.zone
    if (region is None and zone is None) or cloud in LIVE_CLOUDS:
        return region, zone, None
    if any(
        (cloud is None or o.cloud == cloud)
        and (region is None or o.region == region)
        and (zone is None or o.zone == zone)
        for o in offers
    ):
        return region, zone, None  # spelled as the catalog spells it
    clouds = [cloud] if cloud is not None else sorted(catalog_clouds)
    where = f" for {cloud}" if cloud is not None else ""
    if region is not None:
        found, known = _find_region(region, clouds, locations_of)
        if found is None:
            if cloud == "aws" and AWS_ZONE_NAME_RE.match(region.lower()):
                hint = f"; '{region}' looks like a zone: write infra: aws/{region[:-1]}/{region}"
            else:
                hint = _suggest(region, known)
            raise error(
                "region",
                f"unknown region '{region}'{where}{hint} (known regions{where}: {_names(known)}).",
            )
        region = found
    if zone is None:
        return region, None, None
    return _resolve_zone(zone, region, cloud, clouds, locations_of, error)


def _resolve_zone(
    zone: str,
    region: str | None,
    cloud: str | None,
    clouds: Sequence[str],
    locations_of: LocationsOf,
    error: Callable[[str, str], Exception],
) -> tuple[str | None, str | None, tuple[str, str, str] | None]:
    zones: dict[str, tuple[str, str]] = {}  # lower-case zone -> (region, zone)
    for c in clouds:
        for r, zs in locations_of(c).items():
            if region is None or r == region:
                zones.update({z.lower(): (r, z) for z in zs if z is not None})
    hit = zones.get(zone.lower())
    if hit is None and ":" in zone and cloud in ("oci", None):
        # OCI availability domains are shown with a tenancy prefix ("bxtG:AP-SEOUL-1-AD-1");
        # the catalog lists them without it.
        hit = zones.get(zone.split(":", 1)[1].lower())
    if hit is not None:
        return hit[0], hit[1], None
    place = "/".join(x for x in (cloud, region) if x) or "the catalog"
    name = AWS_ZONE_NAME_RE.match(zone.lower())
    if name is not None and cloud in ("aws", None):
        zone_region = name.group(1)
        if region is not None and zone_region != region:
            raise error("zone", f"zone '{zone}' is in region {zone_region}, not {region}.")
        if zone_region in locations_of("aws"):
            return zone_region, zone.lower(), ("aws", zone_region, zone.lower())
    ids = sorted(z for _, z in zones.values())
    if not ids:
        raise error(
            "zone",
            f"the catalog lists no zones for {place}: give the region only "
            f"(zone '{zone}' cannot be checked or priced).",
        )
    explain = ""
    if cloud == "aws":
        explain = (
            " The catalog lists AWS zone IDs (the same in every account); a zone name "
            "like us-east-1a is accepted too."
        )
    raise error(
        "zone",
        f"unknown zone '{zone}' for {place}{_suggest(zone, ids)} "
        f"(its zones: {_names(ids)}).{explain}",
    )


def _zone_name_offers(offers: Sequence[Offer], cloud: str, region: str, zone: str) -> list[Offer]:
    """One offer per instance type of `cloud`/`region`, under the zone name `zone`: the
    region's highest listed prices (which zone ID the name is varies by account)."""
    best: dict[str, Offer] = {}
    for o in offers:
        if o.cloud != cloud or o.region != region:
            continue
        seen = best.get(o.instance_type)
        if seen is None or _price_key(o) > _price_key(seen):
            best[o.instance_type] = o
    return [replace(o, zone=zone) for o in best.values()]


def _price_key(o: Offer) -> tuple[float, float, str]:
    return (o.price or 0.0, o.spot_price or 0.0, o.zone or "")


def _dotted(path: tuple[str | int, ...], part: str) -> str:
    from launcher.task.fields import format_path

    return format_path((*path, part))
