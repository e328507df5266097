"""Build the bundled catalog snapshot from the SkyPilot-v8 reference CSVs.

    python -m launcher.catalog.build [--reference DIR] [--interconnect CSV] [--out DIR]

Defaults: `../shared/catalog-reference` and `../shared/interconnect-reference.csv`
next to the repository (the directory holding pyproject.toml), written to
`launcher/catalog/data/` (`offers.sqlite.gz` + `meta.json`, see snapshot.py). The inputs that live in the
package (`data/provenance.csv`, `interconnect_extra.csv`, `max_nodes_rules.csv`,
`gcp_gpu_machines.csv`, `gcp_n1_gpu_hosts.csv`, `accelerator_aliases.csv`,
`accelerator_extra_names.csv`) are read
from the package's data directory. Deterministic: the same inputs give the same snapshot hash
(and, with the same SQLite version, the same bytes). Files are replaced atomically. Raises BuildError (exit 1 from the CLI) on bad input.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from launcher.catalog import cache, gcp_join, interconnect
from launcher.catalog.skypilot_csv import BuildError, Row, normalise_rows, read_csv
from launcher.catalog.snapshot import (
    COLUMNS,
    META_FILE,
    OFFERS_FILE,
    CloudMeta,
    SnapshotMeta,
    bundled_dir,
    canonical_csv,
)


@dataclass(frozen=True)
class Provenance:
    cloud: str
    file: str
    source: str
    upstream: str
    fetched_at: str
    fetched_at_exact: bool
    completeness: str
    note: str


# provenance.csv `completeness` value for sources whose prices are not real list prices
PLACEHOLDER_PRICES = "placeholder-prices"


def repo_root() -> str | None:
    """The directory holding pyproject.toml above this file (None when installed)."""
    d = os.path.dirname(os.path.abspath(__file__))
    while True:
        if os.path.isfile(os.path.join(d, "pyproject.toml")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def default_shared_dir() -> str | None:
    """`<parent of the repo>/shared`, or None when not running from a checkout."""
    root = repo_root()
    return None if root is None else os.path.join(os.path.dirname(root), "shared")


def _data_csv(name: str) -> list[dict[str, str]]:
    rows, _ = read_csv(os.path.join(bundled_dir(), name))
    return rows


def load_provenance() -> list[Provenance]:
    return [
        Provenance(
            cloud=r["cloud"],
            file=r["file"],
            source=r["source"],
            upstream=r["upstream"],
            fetched_at=r["fetched_at"],
            fetched_at_exact=r["fetched_at_exact"] == "true",
            completeness=r["completeness"],
            note=r["note"],
        )
        for r in _data_csv("provenance.csv")
    ]


def _sort_key(row: tuple[object, ...]) -> tuple[str, ...]:
    # cloud, instance_type, accelerator, count, region, zone: a stable, readable order
    return (
        str(row[0]),
        str(row[3]),
        str(row[4] or ""),
        f"{float(row[5]):012.3f}",  # type: ignore[arg-type]
        str(row[1]),
        str(row[2] or ""),
    )


def build_snapshot(
    reference_dir: str, interconnect_csv: str, *, pack: bool = True
) -> tuple[bytes, SnapshotMeta]:
    """Read and join every input; return the offers file bytes and its metadata.
    `pack=False` skips writing the database (bytes b"", offers_file_sha256 ""): enough
    to compare snapshot hashes."""
    aliases = {r["alias"]: r["canonical"] for r in _data_csv("accelerator_aliases.csv")}
    ref_rows, ref_sha = read_csv(interconnect_csv)
    extra_rows, extra_sha = read_csv(os.path.join(bundled_dir(), "interconnect_extra.csv"))
    facts = interconnect.load_interconnect(ref_rows, extra_rows)
    rules = interconnect.load_max_nodes_rules(_data_csv("max_nodes_rules.csv"))
    gpu_machines = gcp_join.load_gpu_machines(_data_csv("gcp_gpu_machines.csv"))
    n1_rules = gcp_join.load_n1_rules(_data_csv("gcp_n1_gpu_hosts.csv"))

    all_rows: list[tuple[object, ...]] = []
    clouds: list[CloudMeta] = []
    matched: set[tuple[str, str]] = set()
    names: set[str] = set()
    # A cloud may be built from several files (aws: vms.csv + vms-extra.csv): rows of a
    # later file never replace a row an earlier file already gave (first file wins).
    by_cloud: dict[str, list[Provenance]] = {}
    for prov in load_provenance():
        by_cloud.setdefault(prov.cloud, []).append(prov)
    for cloud, provs in by_cloud.items():
        dropped: Counter[str] = Counter()
        seen: set[tuple[object, ...]] = set()
        shas: list[str] = []
        kept = 0
        for prov in provs:
            raw, sha = read_csv(os.path.join(reference_dir, prov.file))
            shas.append(sha)
            if prov.cloud == "gcp":
                rows = gcp_join.join_gcp(raw, gpu_machines, n1_rules, aliases, dropped)
            else:
                rows = normalise_rows(prov.cloud, raw, aliases, dropped)
            for row in rows:
                ident = (
                    row.region,
                    row.zone,
                    row.instance_type,
                    row.accelerator,
                    row.accelerator_count,
                )
                if ident in seen:
                    dropped["duplicate row"] += 1
                    continue
                seen.add(ident)
                if prov.completeness == PLACEHOLDER_PRICES:
                    # Keep the hardware facts; never rank on a price nobody published.
                    row.price = row.spot_price = None
                    dropped["placeholder price blanked"] += 1
                all_rows.append(_offer_values(row, prov, facts, rules, matched))
                if row.accelerator:
                    names.add(row.accelerator)
                kept += 1
        clouds.append(_cloud_meta(cloud, provs, kept, shas, dropped))

    common, _ = read_csv(os.path.join(reference_dir, "common", "accelerators.csv"))
    names.update(aliases.get(r["AcceleratorName"], r["AcceleratorName"]) for r in common)
    # names SkyPilot tasks use that no reference file lists (known, with no offer)
    names.update(r["name"] for r in _data_csv("accelerator_extra_names.csv"))
    return pack_snapshot(
        all_rows,
        clouds,
        names,
        interconnect_sha256=ref_sha,
        interconnect_extra_sha256=extra_sha,
        unmatched_interconnect=[f"{c}/{it}" for (c, it) in facts if (c, it) not in matched],
        pack=pack,
    )


def _cloud_meta(
    cloud: str, provs: Sequence[Provenance], rows: int, shas: Sequence[str], dropped: Counter[str]
) -> CloudMeta:
    """One cloud's provenance; several input files are listed together (" + "), the
    oldest fetch date is the cloud's, exact only if every file's date is, and the input
    hash is that of the one file or of the files' hashes joined by commas."""
    def joined(attr: str) -> str:
        return " + ".join(dict.fromkeys(str(getattr(p, attr)) for p in provs if getattr(p, attr)))

    oldest = min(provs, key=lambda p: p.fetched_at)
    return CloudMeta(
        cloud=cloud,
        rows=rows,
        source=joined("source"),
        upstream=joined("upstream"),
        fetched_at=oldest.fetched_at,
        fetched_at_exact=all(p.fetched_at_exact for p in provs),
        completeness=provs[0].completeness
        if len({p.completeness for p in provs}) == 1
        else "subset",
        input_sha256=shas[0]
        if len(shas) == 1
        else hashlib.sha256(",".join(shas).encode()).hexdigest(),
        note=" ".join(dict.fromkeys(p.note for p in provs if p.note)),
        dropped=dict(sorted(dropped.items())),
        copied_dates=tuple(sorted({p.fetched_at for p in provs if not p.fetched_at_exact})),
    )


def pack_snapshot(
    rows: Sequence[tuple[object, ...]],
    clouds: Sequence[CloudMeta],
    accelerator_names: Iterable[str],
    *,
    interconnect_sha256: str = "",
    interconnect_extra_sha256: str = "",
    unmatched_interconnect: Iterable[str] = (),
    pack: bool = True,
) -> tuple[bytes, SnapshotMeta]:
    """Offer value tuples (COLUMNS order) -> (offers file bytes, meta). Sorts the rows."""
    ordered = sorted(rows, key=_sort_key)
    snapshot_hash = "sha256:" + hashlib.sha256(canonical_csv(ordered).encode("utf-8")).hexdigest()
    data = _packed_db(ordered, snapshot_hash) if pack else b""
    meta = SnapshotMeta(
        snapshot_hash=snapshot_hash,
        offers_file_sha256=hashlib.sha256(data).hexdigest() if pack else "",
        total_rows=len(ordered),
        clouds=tuple(clouds),
        accelerator_names=tuple(sorted({n for n in accelerator_names if n})),
        interconnect_sha256=interconnect_sha256,
        interconnect_extra_sha256=interconnect_extra_sha256,
        unmatched_interconnect=tuple(sorted(unmatched_interconnect)),
    )
    return data, meta


def _offer_values(
    row: Row,
    prov: Provenance,
    facts: dict[tuple[str, str], interconnect.Interconnect],
    rules: list[interconnect.MaxNodesRule],
    matched: set[tuple[str, str]],
) -> tuple[object, ...]:
    key = (row.cloud, row.instance_type)
    fact = facts.get(key)
    if fact is not None:
        matched.add(key)
        if row.accelerator is None and fact.accelerator and fact.accelerator_count:
            row.accelerator = fact.accelerator
            row.accelerator_count = fact.accelerator_count
    values = (
        row.cloud,
        row.region,
        row.zone,
        row.instance_type,
        row.accelerator,
        row.accelerator_count,
        row.accelerator_memory_gib,
        row.vcpus,
        row.memory_gib,
        row.price,
        row.spot_price,
        fact.fabric if fact else None,
        fact.fabric_gbps if fact else None,
        fact.nvlink if fact else None,
        interconnect.max_nodes_for(rules, row.cloud, row.instance_type),
        row.arch,
        prov.source,
        prov.fetched_at,
    )
    assert len(values) == len(COLUMNS)
    return values


def _packed_db(rows: Sequence[tuple[object, ...]], snapshot_hash: str) -> bytes:
    """The offers database (cache.py schema), gzipped without a timestamp."""
    with tempfile.TemporaryDirectory(prefix="launcher-catalog-build-") as d:
        path = os.path.join(d, "offers.sqlite")
        cache.write_db(path, rows, snapshot_hash)
        with open(path, "rb") as f:
            raw = f.read()
    return gzip.compress(raw, compresslevel=9, mtime=0)


def _write_atomic(path: str, data: bytes) -> None:
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_snapshot(out_dir: str, data: bytes, meta: SnapshotMeta) -> None:
    """Write offers file then meta.json (meta last: a reader never sees a new hash first)."""
    os.makedirs(out_dir, exist_ok=True)
    _write_atomic(os.path.join(out_dir, OFFERS_FILE), data)
    _write_atomic(os.path.join(out_dir, META_FILE), meta.to_json().encode("utf-8"))


def main(argv: Sequence[str] | None = None) -> int:
    shared = default_shared_dir()
    p = argparse.ArgumentParser(
        prog="python -m launcher.catalog.build",
        description="Build launcher's bundled catalog snapshot from SkyPilot-v8 CSVs.",
    )
    p.add_argument(
        "--reference",
        default=os.path.join(shared, "catalog-reference") if shared else None,
        help="directory with <cloud>/vms.csv and common/accelerators.csv "
        "(default: ../shared/catalog-reference next to the repository)",
    )
    p.add_argument(
        "--interconnect",
        default=os.path.join(shared, "interconnect-reference.csv") if shared else None,
        help="interconnect reference CSV (default: ../shared/interconnect-reference.csv)",
    )
    p.add_argument(
        "--out", default=bundled_dir(), help="output directory (default: the package's data/)"
    )
    args = p.parse_args(argv)
    if not args.reference or not args.interconnect:
        p.error("not running from a checkout: pass --reference and --interconnect")
    try:
        data, meta = build_snapshot(args.reference, args.interconnect)
        write_snapshot(args.out, data, meta)
    except BuildError as e:
        print(f"catalog build failed: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {os.path.join(args.out, OFFERS_FILE)} ({len(data) / 1e6:.2f} MB, {meta.total_rows} rows)"
    )
    print(f"snapshot {meta.snapshot_hash}")
    for c in meta.clouds:
        drops = ", ".join(f"{k}: {v}" for k, v in c.dropped.items()) or "none"
        print(f"  {c.cloud:<11} {c.rows:>6} rows  fetched {c.fetched_at}  dropped: {drops}")
    if meta.unmatched_interconnect:
        print(
            "  interconnect facts for types not in the catalog: "
            + ", ".join(meta.unmatched_interconnect)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
