"""EC2 placement groups for moto 5.2, which has none (every placement-group action
answers "not implemented").

`install()` adds CreatePlacementGroup, DescribePlacementGroups and DeletePlacementGroup
to moto's EC2 responder, in the real API's shapes and error codes
(`InvalidPlacementGroup.Duplicate` / `.Unknown`), with tags and the `group-name`,
`strategy`, `state`, `tag-key` and `tag:<key>` filters. Groups live on each region's
EC2 backend as `placement_groups` (name -> group), so they go with `moto_api_backend.reset()`
and `AWSFake.leaks()` sees them. Works for the in-process `mock_aws` and for the
ThreadedMotoServer alike (both dispatch to the same responder). Idempotent.
RunInstances keeps ignoring `Placement.GroupName`, as moto always has.
"""

from __future__ import annotations

from typing import Any

_ERRORS = {"duplicate": "InvalidPlacementGroup.Duplicate",
           "unknown": "InvalidPlacementGroup.Unknown"}


def _groups(self: Any) -> dict[str, dict[str, Any]]:
    backend = self.ec2_backend
    if not hasattr(backend, "placement_groups"):
        backend.placement_groups = {}
    groups: dict[str, dict[str, Any]] = backend.placement_groups
    return groups


def _create_placement_group(self: Any) -> Any:
    from moto.core.responses import ActionResult
    from moto.ec2.utils import random_id

    self.error_on_dryrun()
    name = self._get_param("GroupName")
    groups = _groups(self)
    if name in groups:
        self.ec2_backend.raise_error(_ERRORS["duplicate"],
                                     f"The Placement Group '{name}' already exists.")
    tags = self._parse_tag_specification().get("placement-group", {})
    group = {"GroupName": name, "GroupId": random_id(prefix="pg", size=17), "State": "available",
             "Strategy": self._get_param("Strategy") or "cluster",
             "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}
    groups[name] = group
    return ActionResult({"PlacementGroup": group})


def _matches(group: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    for key, values in filters.items():
        if key == "tag-key":
            ok = any(v in tags for v in values)
        elif key.startswith("tag:"):
            ok = tags.get(key[4:]) in values
        elif key in ("group-name", "strategy", "state"):
            field = {"group-name": "GroupName", "strategy": "Strategy", "state": "State"}[key]
            ok = group[field] in values
        else:
            ok = True  # a filter this fake does not know narrows nothing
        if not ok:
            return False
    return True


def _describe_placement_groups(self: Any) -> Any:
    from moto.core.responses import ActionResult

    names = self._get_param("GroupNames", [])
    groups = _groups(self)
    for name in names:
        if name not in groups:
            self.ec2_backend.raise_error(_ERRORS["unknown"],
                                         f"The Placement Group '{name}' is unknown.")
    filters = self._filters_from_querystring()
    found = [g for n, g in sorted(groups.items()) if (not names or n in names)
             and _matches(g, filters)]
    return ActionResult({"PlacementGroups": found})


def _delete_placement_group(self: Any) -> Any:
    from moto.core.responses import ActionResult

    self.error_on_dryrun()
    name = self._get_param("GroupName")
    if _groups(self).pop(name, None) is None:
        self.ec2_backend.raise_error(_ERRORS["unknown"],
                                     f"The Placement Group '{name}' is unknown.")
    return ActionResult({})


def install() -> None:
    """Teach moto's EC2 responder the three placement-group actions (idempotent)."""
    from moto.ec2.responses import EC2Response

    EC2Response.create_placement_group = _create_placement_group  # type: ignore[attr-defined]
    EC2Response.describe_placement_groups = _describe_placement_groups  # type: ignore[attr-defined]
    EC2Response.delete_placement_group = _delete_placement_group  # type: ignore[attr-defined]
