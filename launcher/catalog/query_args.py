"""Small pieces shared by the planning code and the GPU listings (kept apart so each of those
imports only what its command needs): the bad-argument error, JSON numbers, and
the list of catalog clouds."""

from __future__ import annotations

from typing import Any

from launcher.catalog.offer import LOCAL_CLOUD
from launcher.errors import LauncherError

__all__ = ["InvalidQueryError", "json_number"]


class InvalidQueryError(LauncherError):
    """A malformed query argument (accelerator spec, filter, hours): exit code 2, as
    for every bad command-line input."""

    exit_code = 2


def json_number(x: float) -> float | int:
    """A count for JSON: 8.0 -> 8 (whole numbers print as integers), 0.5 stays 0.5."""
    return int(x) if float(x).is_integer() else x


def _catalog_clouds(query: Any) -> list[str]:
    """Every cloud the catalog has rows for, and `local` (from its metadata; no row is read)."""
    return [*(c.cloud for c in query.cloud_metas()), LOCAL_CLOUD]
