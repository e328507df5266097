"""`launcher catalog refresh`: rebuild a cloud's catalog rows from its own pricing API.

    from launcher import api
    api.catalog_refresh(cloud="aws", regions=None) -> list[RefreshResult]
    api.catalog_forget(cloud="aws") -> bool      # back to the snapshot's rows

The fetcher lives in the cloud's package (`launcher.clouds.<cloud>.catalog_fetcher`,
imported only here, only when a refresh runs); it returns every row or raises. This
layer picks the regions (argument, else `catalog.<cloud>.regions` in config.yaml, else
the cloud's regions in the bundled snapshot), fills facts the cloud's API does not
give (NVLink from the snapshot's sources, gang-size rules), and hands the rows to the
catalog store (launcher.catalog.refreshed), which swaps them in with one transaction.
A failed refresh raises `CatalogRefreshError` and changes nothing; a cloud SDK the
fetcher needs and that is not installed raises `MissingSDKError` (launcher.clouds.sdk)
naming the extra to install. Blocking.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from launcher.errors import LauncherError

# cloud -> module with `fetch(regions, *, price_list_url, price_list_format,
# regions_are_defaults, on_progress) -> FetchedCatalog`
FETCHERS: dict[str, str] = {"aws": "launcher.clouds.aws.catalog_fetcher",
                            "azure": "launcher.clouds.azure.catalog_fetcher",
                            "gcp": "launcher.clouds.gcp.catalog_fetcher",
                            "lambda": "launcher.clouds.lambda_.catalog_fetcher",
                            "runpod": "launcher.clouds.runpod.catalog_fetcher",
                            "vast": "launcher.clouds.vast.catalog_fetcher"}


class CatalogRefreshError(LauncherError):
    """A refresh failed (network, credentials, a bad response); the previous rows stay."""

    exit_code = 1


@dataclass(frozen=True)
class RefreshResult:
    cloud: str
    rows: int
    regions: tuple[str, ...]
    fetched_at: str
    source: str
    upstream: str
    notes: tuple[str, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def refreshable_clouds() -> list[str]:
    return sorted(FETCHERS)


def _regions_for(cloud: str, regions: Sequence[str] | None) -> tuple[tuple[str, ...], bool]:
    """(regions, whether they are the defaults rather than named by the user)."""
    from launcher.catalog import query
    from launcher.config.settings import load_config

    if regions:
        return tuple(dict.fromkeys(regions)), False
    configured = load_config().catalog.get(cloud)
    if configured is not None and configured.regions:
        return configured.regions, False
    return tuple(query.snapshot_regions(cloud)), True


def _enricher(cloud: str) -> Callable[[Any], Any]:
    """Facts for refreshed rows the API cannot give: NVLink (from the snapshot's
    interconnect sources) and max_nodes (the package's gang-size rules)."""
    import dataclasses
    import os

    from launcher.catalog import interconnect, query, refreshed
    from launcher.catalog.skypilot_csv import read_csv
    from launcher.catalog.snapshot import bundled_dir

    rules_rows, _ = read_csv(os.path.join(bundled_dir(), "max_nodes_rules.csv"))
    rules = interconnect.load_max_nodes_rules(rules_rows)

    def gang(o: Any) -> Any:
        limit = interconnect.max_nodes_for(rules, o.cloud, o.instance_type)
        return o if limit is None or o.max_nodes is not None else dataclasses.replace(
            o, max_nodes=limit
        )

    return refreshed.compose(refreshed.nvlink_filler(query.snapshot_nvlink(cloud)), gang)


def catalog_refresh(
    cloud: str | None = None,
    regions: Sequence[str] | None = None,
    *,
    on_progress: Callable[[str], None] | None = None,
) -> list[RefreshResult]:
    """Refresh `cloud` (None = every cloud with a fetcher). Raises CatalogRefreshError
    (nothing replaced for the cloud that failed), MissingSDKError (its SDK extra is not
    installed) or UsageError for an unknown cloud."""
    from launcher.catalog import query, refreshed
    from launcher.clouds.sdk import as_missing_sdk, sdk_boundary
    from launcher.config.settings import load_config
    from launcher.errors import UsageError

    if cloud is not None and cloud.lower() not in FETCHERS:
        from launcher.catalog.query_args import _catalog_clouds
        from launcher.task.resources_parser import KNOWN_CLOUDS

        known = sorted(set(_catalog_clouds(query)) | set(FETCHERS))
        if cloud.lower() not in known and cloud.lower() not in KNOWN_CLOUDS:
            from launcher.task.cloud_names import cloud_did_you_mean

            raise UsageError(
                f"--cloud {cloud}: unknown cloud{cloud_did_you_mean(cloud, known)} (known: "
                f"{', '.join(known)}; refreshable: {', '.join(refreshable_clouds())})."
            )
        raise UsageError(
            f"--cloud {cloud}: no price fetcher for this cloud yet (refreshable: "
            f"{', '.join(refreshable_clouds())}); its rows come from the bundled snapshot."
        )
    clouds = [cloud.lower()] if cloud else refreshable_clouds()
    results = []
    for name in clouds:
        started = time.monotonic()
        chosen, defaults = _regions_for(name, regions)
        source = load_config().catalog.get(name)
        try:
            # a cloud SDK the fetcher needs and that is not installed: MissingSDKError,
            # one line naming the extra (the Azure fetcher needs none: public prices)
            with sdk_boundary(name):
                fetcher = importlib.import_module(FETCHERS[name])
                fetched = fetcher.fetch(
                    chosen,
                    price_list_url=source.price_list_url if source else None,
                    price_list_format=source.price_list_format if source else None,
                    regions_are_defaults=defaults,
                    on_progress=on_progress,
                )
        except refreshed.CatalogFetchError as e:
            missing = as_missing_sdk(e, name)  # a fetcher that wrapped the import error
            if missing is not None:
                raise missing from None
            raise CatalogRefreshError(
                f"Refreshing {name} failed: {e}. The previous {name} rows are kept."
            ) from None
        if not fetched.offers:
            raise CatalogRefreshError(
                f"Refreshing {name} returned no rows for {', '.join(chosen)}; the previous "
                f"{name} rows are kept."
            )
        try:
            info = refreshed.replace_cloud(fetched, enrich=_enricher(name))
        except refreshed.WRITE_ERRORS as e:  # disk full, unwritable home: nothing changed
            raise CatalogRefreshError(
                f"Could not store the refreshed {name} rows ({type(e).__name__}: {e}); "
                "the previous rows are kept."
            ) from None
        query.clear_process_cache()
        notes = tuple(fetched.notes)
        if name == "aws":  # spot interruption bands (docs/spot.md); never fails the refresh
            from launcher.catalog.fetchers.aws_spot_advisor import refresh_for_catalog

            notes += refresh_for_catalog(source.price_list_url if source else None)
        results.append(
            RefreshResult(
                cloud=name,
                rows=info.rows,
                regions=info.regions,
                fetched_at=info.fetched_at,
                source=info.source,
                upstream=info.upstream,
                notes=notes,
                seconds=round(time.monotonic() - started, 3),
            )
        )
    return results


def catalog_forget(cloud: str) -> bool:
    """Drop `cloud`'s refreshed rows: its rows come from the snapshot again. True if
    there were any. Idempotent."""
    from launcher.catalog import query, refreshed

    done = refreshed.forget_cloud(cloud.lower())
    query.clear_process_cache()
    return done
