"""The AWS Spot Instance Advisor feed -> the interruption-band table.

AWS publishes, per region and instance type, how often Spot reclaimed capacity
over the trailing month, as one of five bands, at
https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json (the data behind
https://aws.amazon.com/ec2/spot/instance-advisor/). Its shape:

    {"ranges": [{"index": 0, "label": "<5%", ...}, ...],
     "spot_advisor": {REGION: {"Linux": {TYPE: {"s": savings_pct, "r": band}}, "Windows": ...}},
     "instance_types": {...}, "global_rate": "<10%"}

`parse_feed` keeps the facts this project uses: (region, instance type, band) for
Linux. `write_table` writes them as the CSV that `launcher.catalog.interruption`
reads (`region,instance_type,band`, sorted). Both the bundled table
(`launcher/catalog/data/aws_spot_interruption.csv`) and the per-user refreshed one
(`$LAUNCHER_HOME/catalog/aws_spot_interruption.csv`, written by `refresh_table`
during `launcher catalog refresh --cloud aws`) are made this way.

Rebuild the bundled table from a saved copy of the feed (only the instance types the
bundled AWS catalog rows have, to keep it small):

    python -m launcher.catalog.fetchers.aws_spot_advisor FEED.json [--all-types]

Standard library only; network only in `fetch_feed` / `refresh_table`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import urllib.request
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

FEED_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
TABLE_FILE = "aws_spot_interruption.csv"
HEADER = ("region", "instance_type", "band")
# The feed's band labels, by index (checked against the feed's own "ranges").
BAND_LABELS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
FETCH_TIMEOUT_S = 10.0


class AdvisorFeedError(ValueError):
    """The feed is not in the Spot Advisor's shape (names what is wrong)."""


@dataclass(frozen=True, slots=True, order=True)
class AdvisorRow:
    """One fact of the feed: Spot in `region` reclaimed `instance_type` (Linux) at
    `band` (0..4, see BAND_LABELS) over the trailing month."""

    region: str
    instance_type: str
    band: int


def parse_feed(
    feed: Mapping[str, object], instance_types: Collection[str] | None = None
) -> list[AdvisorRow]:
    """The Linux (region, instance type, band) rows of a decoded feed, sorted; only the
    types in `instance_types` when given. Raises AdvisorFeedError on a foreign shape
    (missing `spot_advisor`, a band outside 0..4, ranges whose labels differ)."""
    ranges = feed.get("ranges")
    if isinstance(ranges, list) and ranges:
        labels = {}
        for r in ranges:
            if isinstance(r, Mapping) and isinstance(r.get("index"), int):
                labels[r["index"]] = r.get("label")
        for i, label in enumerate(BAND_LABELS):
            if i in labels and labels[i] != label:
                raise AdvisorFeedError(
                    f"ranges[{i}].label is {labels[i]!r}, expected {label!r}: the feed's "
                    "bands changed; update BAND_LABELS and the rate rule"
                )
    advisor = feed.get("spot_advisor")
    if not isinstance(advisor, Mapping) or not advisor:
        raise AdvisorFeedError("no 'spot_advisor' object: not a Spot Advisor feed")
    out: list[AdvisorRow] = []
    for region, systems in advisor.items():
        if not isinstance(systems, Mapping):
            raise AdvisorFeedError(f"spot_advisor.{region} is not an object")
        linux = systems.get("Linux") or {}
        if not isinstance(linux, Mapping):
            raise AdvisorFeedError(f"spot_advisor.{region}.Linux is not an object")
        for itype, entry in linux.items():
            if instance_types is not None and itype not in instance_types:
                continue
            band = entry.get("r") if isinstance(entry, Mapping) else None
            if not isinstance(band, int) or isinstance(band, bool) or not 0 <= band < len(BAND_LABELS):
                raise AdvisorFeedError(
                    f"spot_advisor.{region}.Linux.{itype}.r is {band!r}, expected 0..4"
                )
            out.append(AdvisorRow(str(region), str(itype), band))
    out.sort()
    return out


def table_text(rows: Iterable[AdvisorRow]) -> str:
    """The table's CSV text (header, then rows sorted by region and type)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    for r in sorted(rows):
        w.writerow((r.region, r.instance_type, r.band))
    return buf.getvalue()


def meta_path(table_path: str) -> str:
    """The table's provenance sidecar: `aws_spot_interruption.json` next to the CSV."""
    return os.path.splitext(table_path)[0] + ".json"


def write_table(rows: Iterable[AdvisorRow], path: str, *, source: str = "",
                fetched_at: str = "") -> int:
    """Write the table atomically (temp file + rename), then its provenance sidecar
    ({"source", "fetched_at", "rows"}); returns the row count."""
    text = table_text(rows)
    n = text.count("\n") - 1
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    for target, body in ((path, text), (meta_path(path), json.dumps(
            {"source": source, "fetched_at": fetched_at, "rows": n}, indent=1) + "\n")):
        tmp = f"{target}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(body)
        os.replace(tmp, target)
    return n


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fetch_feed(url: str = FEED_URL, timeout: float = FETCH_TIMEOUT_S) -> Mapping[str, object]:
    """GET and decode the feed. Raises OSError (network) or AdvisorFeedError (not JSON)."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (https / test URL)
        body = resp.read()
    try:
        data = json.loads(body)
    except ValueError as e:
        raise AdvisorFeedError(f"the feed at {url} is not JSON ({e})") from None
    if not isinstance(data, Mapping):
        raise AdvisorFeedError(f"the feed at {url} is not a JSON object")
    return data


def refreshed_table_path() -> str:
    """`$LAUNCHER_HOME/catalog/aws_spot_interruption.csv`: the table a refresh writes."""
    from launcher.config.settings import launcher_home

    return os.path.join(str(launcher_home()), "catalog", TABLE_FILE)


def refresh_table(url: str | None = None, timeout: float = FETCH_TIMEOUT_S) -> str:
    """Fetch the feed and replace the per-user table with every Linux row. Never raises:
    returns a one-line note for the refresh's output ("... N rows" or why the bundled /
    previous table is kept). `url`: the feed (default FEED_URL, or
    `$LAUNCHER_SPOT_ADVISOR_URL`)."""
    url = url or os.environ.get("LAUNCHER_SPOT_ADVISOR_URL") or FEED_URL
    try:
        rows = parse_feed(fetch_feed(url, timeout))
        if not rows:
            raise AdvisorFeedError("no Linux rows")
        n = write_table(rows, refreshed_table_path(), source=url, fetched_at=_now())
    except (OSError, AdvisorFeedError) as e:
        return (f"spot interruption bands: {url} not usable ({type(e).__name__}: {e}); "
                "keeping the previous table")
    from launcher.catalog import interruption

    interruption.clear_cache()
    return f"spot interruption bands: {n} rows from the AWS Spot Advisor feed"


def refresh_for_catalog(price_list_url: str | None) -> tuple[str, ...]:
    """What `launcher catalog refresh --cloud aws` does after the prices: fetch the feed
    (`$LAUNCHER_SPOT_ADVISOR_URL`, else FEED_URL) into the per-user table and return its
    note. When the prices come from a mirror (`catalog.aws.price_list_url`) and no
    `$LAUNCHER_SPOT_ADVISOR_URL` is set, the public feed is not fetched (an offline
    mirror has no route to it): the previous table stays, and the note says so."""
    if price_list_url and not os.environ.get("LAUNCHER_SPOT_ADVISOR_URL"):
        return ("spot interruption bands: not fetched (prices from a mirror; set "
                "LAUNCHER_SPOT_ADVISOR_URL to fetch the Spot Advisor feed too); "
                "keeping the previous table",)
    return (refresh_table(),)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("feed", help="a saved copy of spot-advisor-data.json")
    parser.add_argument("--all-types", action="store_true",
                        help="every instance type (default: those of the bundled AWS rows)")
    parser.add_argument("--out", default=None, help="output CSV (default: the package's data/)")
    parser.add_argument("--source", default=None, help="where the copy came from (provenance)")
    parser.add_argument("--fetched-at", default=None,
                        help="when the feed was published/fetched (default: now)")
    args = parser.parse_args(argv)
    with open(args.feed, encoding="utf-8") as f:
        feed = json.load(f)
    types: set[str] | None = None
    if not args.all_types:
        from launcher.catalog import query

        types = {o.instance_type for o in query.offers(clouds=["aws"])}
    from launcher.catalog.snapshot import bundled_dir

    out = args.out or os.path.join(bundled_dir(), TABLE_FILE)
    n = write_table(parse_feed(feed, types), out,
                    source=args.source or f"AWS Spot Advisor feed (copy: {os.path.basename(args.feed)})",
                    fetched_at=args.fetched_at or _now())
    print(f"wrote {n} rows to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
