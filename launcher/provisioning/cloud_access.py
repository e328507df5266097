"""How provisioning code gets a cloud object: `CloudFn` (injectable in tests) and the
default, the registry's lazily loaded implementation. Cheap to import (no SDK)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.clouds.base import Cloud

CloudFn = Callable[[str], "Cloud"]


def default_cloud(name: str) -> Cloud:
    """The registered cloud object for `name` (KeyError when not implemented)."""
    from launcher.clouds.registry import get_cloud

    return get_cloud(name)
