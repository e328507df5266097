"""A task's `volumes:` section: SkyPilot volumes (pre-created network volumes).

CONTRACT:
    parse_volumes(value, origin, substitute) -> tuple[VolumeMount, ...]
    VOLUMES_NOT_LAUNCHABLE   -- why a real launch refuses a task with volumes

SkyPilot's forms, per mount path on the node:
    /mnt/data: my-volume                      # a volume created with `sky volumes apply`
    /mnt/data: {name: my-volume, sub_path: d} # a sub-directory of it
    /mnt/scratch: {size: 100Gi, labels: {...}}  # an ephemeral volume made for the cluster

They are validated and shown by dry runs and cost queries (placement does not depend
on them); launcher cannot create or attach volumes yet, so `Task.check_values()` (every
real launch) refuses such a task, naming `volumes` and saying why. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.task.fields import (
    Origin,
    Path,
    check_keys,
    describe,
    expect_mapping,
    expect_str,
    node_path_problem,
    string_map,
)

VOLUMES_NOT_LAUNCHABLE = (
    "SkyPilot volumes are planned only: launcher cannot create or attach volumes yet, so "
    "it does not launch this task. Use a bucket in file_mounts, or a directory on the "
    "nodes' disk (resources.disk_size), instead."
)
_SIZE_RE = re.compile(r"\d+(\.\d+)?\s*([KMGTP]i?B?|[kmgtp]i?b?)?\Z")


@dataclass(frozen=True)
class VolumeMount:
    """One entry of `volumes`: a named volume (optionally a `sub_path` of it) or an
    ephemeral one (`size`, no name) at `path` on every node."""

    path: str
    name: str | None = None
    sub_path: str | None = None
    size: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def to_yaml_value(self) -> object:
        if self.name is not None and self.sub_path is None and self.size is None:
            return self.name
        out: dict[str, object] = {}
        for key in ("name", "sub_path", "size"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.labels:
            out["labels"] = dict(self.labels)
        return out

    def describe(self) -> str:
        if self.name is None:
            return f"{self.path}: an ephemeral volume of {self.size}"
        sub = f" (sub-path {self.sub_path})" if self.sub_path else ""
        return f"{self.path}: volume '{self.name}'{sub}"


def parse_volumes(
    value: object, origin: Origin, substitute: Callable[[str], str]
) -> tuple[VolumeMount, ...]:
    """Validate `volumes:` (empty when absent). Raises TaskValidationError naming the
    entry (`volumes./mnt/data.size`) for a malformed one."""
    if value is None:
        return ()
    mapping = expect_mapping(value, ("volumes",), origin, "a mapping of node path -> volume")
    out: list[VolumeMount] = []
    for raw_path, entry in mapping.items():
        where: Path = ("volumes", raw_path)
        path = substitute(raw_path.strip())
        if not path.startswith("/"):
            raise origin.error(where, f"the mount path '{path}' must be absolute (/...).")
        problem = node_path_problem(path)
        if problem:
            raise origin.error(where, problem)
        if isinstance(entry, str):
            out.append(VolumeMount(path, name=_name(entry, where, origin, substitute)))
            continue
        body = expect_mapping(entry, where, origin, "a volume name or {name, sub_path} / {size}")
        check_keys(body, where, origin, ("name", "sub_path", "size", "labels"))
        name = None
        if body.get("name") is not None:
            name = _name(body["name"], where + ("name",), origin, substitute)
        size = None
        if body.get("size") is not None:
            size = str(body["size"]).strip()
            if isinstance(body["size"], bool) or not _SIZE_RE.match(size):
                raise origin.error(
                    where + ("size",),
                    f"expected a size such as '100Gi', got {describe(body['size'])}.",
                )
        if name is None and size is None:
            raise origin.error(where, "give the volume's 'name', or a 'size' for an ephemeral one.")
        if name is not None and size is not None:
            raise origin.error(
                where + ("size",), "'size' makes a new ephemeral volume; a named one has its own."
            )
        sub_path = None
        if body.get("sub_path") is not None:
            sub_path = substitute(expect_str(body["sub_path"], where + ("sub_path",), origin).strip())
        labels = {k: v or "" for k, v in string_map(body.get("labels"), where + ("labels",), origin).items()}
        out.append(VolumeMount(path, name, sub_path, size, labels))
    return tuple(out)


def _name(value: object, path: Path, origin: Origin, substitute: Callable[[str], str]) -> str:
    return substitute(expect_str(value, path, origin).strip())
