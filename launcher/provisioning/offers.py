"""Offers = the catalog's rows plus the live offers of the user's SSH node pools.

The catalog never imports a cloud module: the pools' offers are read here (from
`launcher.clouds.ssh`, only when a config file exists) and handed to
`launcher.catalog.query.offers(..., live=...)`. Blocking only on local reads.
Raises ConfigError for a malformed config file.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.catalog.offer import Offer

SSH_CLOUD = "ssh"


def pool_offers() -> list[Offer]:
    """One offer per SSH node pool in `config.yaml` (none without a config file)."""
    from launcher.config import config_path

    if not config_path().exists():
        return []
    from launcher.clouds.ssh import ssh_offers

    return ssh_offers()


def pool_regions() -> list[str]:
    """The pool names (the ssh cloud's regions), sorted."""
    return sorted({o.region for o in pool_offers()})


def catalog_offers(
    accelerators: Collection[str] | None = None, clouds: Collection[str] | None = None
) -> list[Offer]:
    """`query.offers(accelerators, clouds)` with the SSH pools' offers handed in (read
    only when the clouds asked for include ssh)."""
    from launcher.catalog import query

    wanted = None if clouds is None else {c.lower() for c in clouds}
    live = pool_offers() if wanted is None or SSH_CLOUD in wanted else []
    return query.offers(accelerators=accelerators, clouds=clouds, live=live)
