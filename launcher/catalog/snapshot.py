"""The bundled snapshot's on-disk format, shared by the build step and the query side.

A snapshot is a directory holding:
- `offers.sqlite.gz`: the offers as a gzipped SQLite database in the cache's schema
  (cache.py), so a first query only decompresses it into the user cache instead of
  parsing ~90k rows.
- `meta.json`: `SnapshotMeta`: per-cloud provenance and row counts, the known
  accelerator names, `offers_file_sha256` (of the gz file, checked before use) and the
  snapshot hash = sha256 of the rows' canonical CSV text (`canonical_csv`), which does
  not depend on the SQLite version that wrote the file: rebuilding from the same
  inputs always gives the same hash.

The bundled snapshot is `launcher/catalog/data/`; `$LAUNCHER_CATALOG_DIR` points the
query API at another snapshot directory (a refreshed one, or a test fixture).
This module imports only the standard library and is cheap to import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

FORMAT_VERSION = 1
OFFERS_FILE = "offers.sqlite.gz"
META_FILE = "meta.json"
SNAPSHOT_DIR_ENV = "LAUNCHER_CATALOG_DIR"

# The Offer fields, in file order (tests check this equals Offer's own field order).
COLUMNS: tuple[str, ...] = (
    "cloud",
    "region",
    "zone",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "accelerator_memory_gib",
    "vcpus",
    "memory_gib",
    "price",
    "spot_price",
    "fabric",
    "fabric_gbps",
    "nvlink",
    "max_nodes",
    "arch",
    "source",
    "fetched_at",
)


def bundled_dir() -> str:
    """The snapshot shipped inside the package (`launcher/catalog/data`)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def snapshot_dir() -> str:
    """`$LAUNCHER_CATALOG_DIR` when set, else the bundled snapshot directory."""
    return os.environ.get(SNAPSHOT_DIR_ENV) or bundled_dir()


class SnapshotError(Exception):
    """The snapshot directory is missing a file or is inconsistent (a packaging bug)."""


@dataclass(frozen=True)
class CloudMeta:
    """Provenance of one cloud's rows in a snapshot."""

    cloud: str
    rows: int
    source: str  # what every row's `source` says, e.g. "skypilot-catalog v8 aws/vms.csv"
    upstream: str  # where the input file came from (repository, path, version)
    fetched_at: str  # ISO-8601 UTC; when the prices were read from the provider
    fetched_at_exact: bool  # False: upstream date unknown, fetched_at is when we copied it
    completeness: str  # "complete", "subset" or "placeholder-prices" (prices blanked)
    input_sha256: str  # of the input vms.csv
    note: str = ""
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> input rows not used
    # every row `fetched_at` of this cloud that is a copy date, not an upstream date (a
    # cloud built from several files has one per file)
    copied_dates: tuple[str, ...] = ()


@dataclass(frozen=True)
class SnapshotMeta:
    snapshot_hash: str  # "sha256:<hex>" of canonical_csv(rows)
    offers_file_sha256: str  # hex sha256 of the offers file bytes
    total_rows: int
    clouds: tuple[CloudMeta, ...]
    accelerator_names: tuple[str, ...]
    interconnect_sha256: str  # of interconnect-reference.csv
    interconnect_extra_sha256: str  # of data/interconnect_extra.csv
    unmatched_interconnect: tuple[str, ...]  # "cloud/instance_type" reference rows no offer has
    format: int = FORMAT_VERSION
    offers_file: str = OFFERS_FILE
    columns: tuple[str, ...] = COLUMNS

    def to_json(self) -> str:
        doc = asdict(self)
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    @staticmethod
    def from_json(text: str) -> SnapshotMeta:
        doc = json.loads(text)
        if doc.get("format") != FORMAT_VERSION:
            raise SnapshotError(f"unsupported catalog snapshot format {doc.get('format')!r}")
        if tuple(doc["columns"]) != COLUMNS:
            raise SnapshotError("catalog snapshot columns differ from this version's Offer")
        return SnapshotMeta(
            snapshot_hash=str(doc["snapshot_hash"]),
            offers_file_sha256=str(doc["offers_file_sha256"]),
            total_rows=int(doc["total_rows"]),
            clouds=tuple(
                CloudMeta(
                    cloud=str(c["cloud"]),
                    rows=int(c["rows"]),
                    source=str(c["source"]),
                    upstream=str(c["upstream"]),
                    fetched_at=str(c["fetched_at"]),
                    fetched_at_exact=bool(c["fetched_at_exact"]),
                    completeness=str(c["completeness"]),
                    input_sha256=str(c["input_sha256"]),
                    note=str(c.get("note", "")),
                    dropped={str(k): int(v) for k, v in c.get("dropped", {}).items()},
                    copied_dates=tuple(str(d) for d in c.get("copied_dates", ())),
                )
                for c in doc["clouds"]
            ),
            accelerator_names=tuple(str(n) for n in doc["accelerator_names"]),
            interconnect_sha256=str(doc["interconnect_sha256"]),
            interconnect_extra_sha256=str(doc["interconnect_extra_sha256"]),
            unmatched_interconnect=tuple(str(u) for u in doc["unmatched_interconnect"]),
            format=int(doc["format"]),
            offers_file=str(doc["offers_file"]),
            columns=tuple(doc["columns"]),
        )


def read_meta(directory: str) -> SnapshotMeta:
    """Parse `meta.json` of a snapshot directory. Raises SnapshotError if absent/invalid."""
    path = os.path.join(directory, META_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SnapshotError(f"catalog snapshot metadata missing: {path} ({e.strerror})") from e
    try:
        return SnapshotMeta.from_json(text)
    except (KeyError, TypeError, ValueError) as e:
        raise SnapshotError(f"catalog snapshot metadata unreadable: {path} ({e})") from e


# ---- canonical row text (what the snapshot hash covers) -------------------------------


def format_number(x: float | int | None) -> str:
    """Shortest text that round-trips a number ('' for None); integral floats without '.0'."""
    if x is None:
        return ""
    r = repr(x)
    return r[:-2] if r.endswith(".0") else r


def encode_row(values: tuple[object, ...]) -> list[str]:
    """One Offer's field values (COLUMNS order) -> CSV cells: None = empty, nvlink 1/0."""
    (cloud, region, zone, it, acc, count, acc_mem, vcpus, mem, price, spot, fabric, gbps,
     nvlink, max_nodes, arch, source, fetched_at) = values  # fmt: skip
    num = format_number
    return [
        str(cloud), str(region), str(zone or ""), str(it), str(acc or ""),
        num(count), num(acc_mem), num(vcpus), num(mem), num(price), num(spot),  # type: ignore[arg-type]
        str(fabric or ""), num(gbps), "" if nvlink is None else ("1" if nvlink else "0"),  # type: ignore[arg-type]
        num(max_nodes), str(arch), str(source), str(fetched_at),  # type: ignore[arg-type]
    ]  # fmt: skip


def canonical_csv(rows: Iterable[tuple[object, ...]]) -> str:
    """The rows as CSV text with a header line: the input of the snapshot hash."""
    import csv
    import io

    text = io.StringIO(newline="")
    w = csv.writer(text, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(encode_row(r))
    return text.getvalue()
