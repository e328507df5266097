"""Deleting a cluster's resource group, and waiting until ARM says it is gone.

Deleting the group deletes every VM, disk, NIC, public IP, vnet, NSG and placement group
in it (ARM orders the deletes). A group that does not exist is already deleted
(idempotent). Raises a typed CloudError when ARM refuses or the wait times out.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.azure.errors import azure_errors, is_not_found, retry_conflicts, wait_lro


def delete_group(resource: Any, group: str, location: str | None, timeout: float) -> None:
    """Delete `group` and wait for the long-running operation. Idempotent."""
    def run() -> None:
        try:
            wait_lro(resource.resource_groups.begin_delete(group), timeout)
        except Exception as exc:
            if not is_not_found(exc):
                raise

    with azure_errors(region=location, action=f"delete resource group {group}"):
        retry_conflicts(run)
        if group_exists(resource, group):
            from launcher.clouds.base import CloudError

            raise CloudError(f"resource group {group} still exists after its deletion "
                             f"(waited {timeout:.0f}s)", cloud="azure", region=location)


def group_exists(resource: Any, group: str) -> bool:
    try:
        resource.resource_groups.get(group)
    except Exception as exc:
        if is_not_found(exc):
            return False
        raise
    return True
