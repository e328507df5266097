"""The public EC2 price list (bulk API offer files): on-demand Linux prices per region.

One offer file per region, at `<base>/<region>/index.csv` or `index.json`, where the
base defaults to `DEFAULT_PRICE_LIST_URL` (AWS's public bulk price list, no
credentials needed) and is set by `catalog.aws.price_list_url` in config.yaml.

The rows kept are the plain on-demand price of an instance type: `TermType` OnDemand,
`Operating System` Linux, `Tenancy` Shared, `Pre Installed S/W` NA, `CapacityStatus`
Used, unit `Hrs`, currency USD, product family "Compute Instance" (or its bare-metal
variant), `Location Type` "AWS Region" (not a Local Zone), price > 0. Two different
such prices for one type make the file unusable (PriceListError), never a guess. Anything else (Windows, dedicated hosts, reservations, SQL Server
images, capacity reservations) is skipped.

File shapes (as AWS publishes them):
- CSV: five metadata lines (`"FormatVersion","v1.0"`, `"Disclaimer",...`,
  `"Publication Date","2025-09-12T22:53:08Z"`, `"Version",...`, `"OfferCode","AmazonEC2"`),
  then a header line (`"SKU","OfferTermCode","RateCode","TermType",...,"Instance Type",
  ...,"Tenancy",...,"Operating System",...,"CapacityStatus",...,"Pre Installed S/W",...`)
  and one line per price dimension. Streamed: the file is never held in memory.
- JSON: `{"formatVersion", "offerCode", "version", "publicationDate", "products":
  {sku: {"sku", "productFamily", "attributes": {"instanceType", "operatingSystem",
  "tenancy", "preInstalledSw", "capacitystatus", ...}}}, "terms": {"OnDemand": {sku:
  {term: {"priceDimensions": {rate: {"unit": "Hrs", "pricePerUnit": {"USD": "0.1"}}}}}}}}`.

`requests` is imported here, lazily (only when a refresh runs).
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_PRICE_LIST_URL = "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current"
FORMATS = ("csv", "json")
_FAMILIES = frozenset({"Compute Instance", "Compute Instance (bare metal)"})
_TIMEOUT = (10.0, 120.0)  # connect, read (seconds)


class PriceListError(Exception):
    """The offer file could not be fetched or is not in the expected shape."""


@dataclass(frozen=True)
class RegionPrices:
    region: str
    url: str
    publication_date: str | None  # as the file says, e.g. "2025-09-12T22:53:08Z"
    prices: dict[str, float]  # instance type -> on-demand $/h


def offer_file_url(base: str, region: str, fmt: str) -> str:
    return f"{base.rstrip('/')}/{region}/index.{fmt}"


def _keep(
    family: str, os_name: str, tenancy: str, software: str, capacity: str, unit: str
) -> bool:
    return (
        family in _FAMILIES
        and os_name == "Linux"
        and tenancy == "Shared"
        and software == "NA"
        and capacity == "Used"
        and unit == "Hrs"
    )


def _add(prices: dict[str, float], instance_type: str, text: str, where: str) -> None:
    try:
        price = float(text)
    except ValueError:
        raise PriceListError(f"{where}: price {text!r} for {instance_type} is not a number") from None
    if price <= 0 or not instance_type:
        return
    old = prices.get(instance_type)
    if old is not None and old != price:
        raise PriceListError(
            f"{where}: two on-demand Linux prices for {instance_type} ({old} and {price})"
        )
    prices[instance_type] = price


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Decoded lines (line ends kept, so quoted newlines survive) of a byte stream."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        parts = pending.splitlines(keepends=True)
        pending = parts.pop() if parts and not parts[-1].endswith(("\n", "\r")) else ""
        yield from parts
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def parse_csv(stream: Iterable[str], where: str) -> tuple[str | None, dict[str, float]]:
    """(publication date, {instance type: price}) from a CSV offer file. Raises PriceListError."""
    reader = csv.reader(stream)
    meta: dict[str, str] = {}
    header: list[str] | None = None
    for row in reader:
        if row and row[0] == "SKU":
            header = row
            break
        if len(row) >= 2:
            meta[row[0]] = row[1]
        if len(meta) > 20:
            break
    if header is None:
        raise PriceListError(f"{where}: no header line (is this an EC2 offer file?)")
    need = (
        "TermType", "Product Family", "Instance Type", "Operating System", "Tenancy",
        "Pre Installed S/W", "CapacityStatus", "Unit", "PricePerUnit", "Currency",
    )  # fmt: skip
    missing = [c for c in need if c not in header]
    if missing:
        raise PriceListError(f"{where}: columns missing: {', '.join(missing)}")
    i = {c: header.index(c) for c in need}
    width = max(i.values()) + 1
    # Local Zones / Wavelength rows (their own prices) never count as the region's
    loc = header.index("Location Type") if "Location Type" in header else None
    prices: dict[str, float] = {}
    for row in reader:
        if len(row) < width or row[i["TermType"]] != "OnDemand" or row[i["Currency"]] != "USD":
            continue
        if loc is not None and len(row) > loc and row[loc] not in ("AWS Region", ""):
            continue
        if _keep(
            row[i["Product Family"]],
            row[i["Operating System"]],
            row[i["Tenancy"]],
            row[i["Pre Installed S/W"]],
            row[i["CapacityStatus"]],
            row[i["Unit"]],
        ):
            _add(prices, row[i["Instance Type"]], row[i["PricePerUnit"]], where)
    return meta.get("Publication Date"), prices


def parse_json(doc: Any, where: str) -> tuple[str | None, dict[str, float]]:
    """(publication date, {instance type: price}) from a parsed JSON offer file."""
    if not isinstance(doc, dict) or not isinstance(doc.get("products"), dict):
        raise PriceListError(f"{where}: no 'products' (is this an EC2 offer file?)")
    on_demand = (doc.get("terms") or {}).get("OnDemand") or {}
    prices: dict[str, float] = {}
    for sku, product in doc["products"].items():
        attrs = product.get("attributes") or {}
        if attrs.get("locationType", "AWS Region") != "AWS Region":
            continue
        if not _keep(
            str(product.get("productFamily", "")),
            str(attrs.get("operatingSystem", "")),
            str(attrs.get("tenancy", "")),
            str(attrs.get("preInstalledSw", "")),
            str(attrs.get("capacitystatus", "")),
            "Hrs",
        ):
            continue
        for term in (on_demand.get(sku) or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                if dim.get("unit") == "Hrs" and usd is not None:
                    _add(prices, str(attrs.get("instanceType", "")), str(usd), where)
    return doc.get("publicationDate"), prices


def fetch_region(base: str, region: str, fmt: str = "csv") -> RegionPrices:
    """Download and parse one region's offer file. Blocking (a real CSV is ~100+ MB,
    streamed). Raises PriceListError (HTTP error, timeout, bad shape)."""
    import requests

    if fmt not in FORMATS:
        raise PriceListError(f"price list format {fmt!r} is not one of {', '.join(FORMATS)}")
    url = offer_file_url(base, region, fmt)
    try:
        with requests.get(url, stream=True, timeout=_TIMEOUT) as resp:
            if resp.status_code != 200:
                raise PriceListError(f"{url}: HTTP {resp.status_code}")
            if fmt == "json":
                date, prices = parse_json(resp.json(), url)
            else:
                date, prices = parse_csv(_lines(resp.iter_content(1 << 20)), url)
    except requests.RequestException as e:
        raise PriceListError(f"{url}: {type(e).__name__}: {e}") from None
    except (ValueError, UnicodeDecodeError, csv.Error) as e:
        raise PriceListError(f"{url}: unreadable offer file ({e})") from None
    return RegionPrices(region=region, url=url, publication_date=date, prices=prices)
