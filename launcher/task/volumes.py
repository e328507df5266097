"""A task's `volumes:` section: SkyPilot volumes (pre-created network volumes).

CONTRACT:
    parse_volumes(value, origin, substitute) -> tuple[VolumeMount, ...]
    volumes_launchable(clouds) -> bool  -- whether a task targeting these clouds may launch them
    VOLUMES_NOT_LAUNCHABLE   -- why a real launch refuses a task with volumes elsewhere
    ACCESS_MODES             -- the PersistentVolumeClaim access modes `config.access_mode` takes

SkyPilot's forms, per mount path on the node:
    /mnt/data: my-volume                      # a volume created with `sky volumes apply`
    /mnt/data: {name: my-volume, sub_path: d} # a sub-directory of it
    /mnt/scratch: {size: 100Gi, labels: {...}}  # an ephemeral volume made for the cluster
    /mnt/ckpt: {name: ckpt, size: 500Gi}      # the named volume, made with this size if missing
    any of them + config: {storage_class_name: fast-rwx, access_mode: ReadWriteMany}

Volumes are launched on Kubernetes only, as PersistentVolumeClaims
(launcher/clouds/kubernetes/volumes.py). A task with volumes whose every resources
alternative names kubernetes launches; otherwise they are validated and shown by dry
runs and cost queries (placement does not depend on them), and `Task.check_values()`
(every real launch) refuses the task, naming `volumes` and saying why. Pure: no I/O.
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
    "SkyPilot volumes launch on Kubernetes only (as PersistentVolumeClaims): launcher "
    "cannot create or attach volumes on other clouds, so it launches this task only when "
    "every resources alternative names Kubernetes (infra: k8s or k8s/CONTEXT). Elsewhere, "
    "use a bucket in file_mounts, or a directory on the nodes' disk (resources.disk_size)."
)
ACCESS_MODES = ("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany")
_CONFIG_KEYS = ("storage_class_name", "access_mode")
_SIZE_RE = re.compile(r"\d+(\.\d+)?\s*([KMGTP]i?B?|[kmgtp]i?b?)?\Z")


@dataclass(frozen=True)
class VolumeMount:
    """One entry of `volumes`: a named volume (optionally a `sub_path` of it; with a
    `size`, made when missing) or an ephemeral one (`size`, no name) at `path` on every
    node. `storage_class` / `access_mode`: for a volume the launch makes (None: the
    cluster's default class; ReadWriteOnce for one node, ReadWriteMany for more)."""

    path: str
    name: str | None = None
    sub_path: str | None = None
    size: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    storage_class: str | None = None
    access_mode: str | None = None

    def to_yaml_value(self) -> object:
        if self.name is not None and self.sub_path is None and self.size is None \
                and self.storage_class is None and self.access_mode is None:
            return self.name
        out: dict[str, object] = {}
        for key in ("name", "sub_path", "size"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.labels:
            out["labels"] = dict(self.labels)
        config = {k: v for k, v in (("storage_class_name", self.storage_class),
                                    ("access_mode", self.access_mode)) if v is not None}
        if config:
            out["config"] = config
        return out

    def describe(self) -> str:
        if self.name is None:
            return f"{self.path}: an ephemeral volume of {self.size}"
        sub = f" (sub-path {self.sub_path})" if self.sub_path else ""
        made = f", made with {self.size} if missing" if self.size else ""
        return f"{self.path}: volume '{self.name}'{sub}{made}"


def volumes_launchable(clouds: list[str | None]) -> bool:
    """Whether a task whose resources alternatives target `clouds` may launch volumes:
    every one names kubernetes."""
    return bool(clouds) and all(c == "kubernetes" for c in clouds)


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
        check_keys(body, where, origin, ("name", "sub_path", "size", "labels", "config"))
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
        sub_path = None
        if body.get("sub_path") is not None:
            sub_path = substitute(expect_str(body["sub_path"], where + ("sub_path",), origin).strip())
        labels = {k: v or "" for k, v in string_map(body.get("labels"), where + ("labels",), origin).items()}
        storage_class, access_mode = _config(body.get("config"), where + ("config",), origin)
        out.append(VolumeMount(path, name, sub_path, size, labels, storage_class, access_mode))
    return tuple(out)


def _config(value: object, where: Path, origin: Origin) -> tuple[str | None, str | None]:
    """SkyPilot's volume `config`: (storage_class_name, access_mode)."""
    if value is None:
        return None, None
    body = expect_mapping(value, where, origin, "a mapping (storage_class_name, access_mode)")
    check_keys(body, where, origin, _CONFIG_KEYS)
    sc = body.get("storage_class_name")
    storage_class = None if sc is None else expect_str(sc, where + ("storage_class_name",), origin).strip()
    mode = body.get("access_mode")
    if mode is not None and mode not in ACCESS_MODES:
        raise origin.error(where + ("access_mode",),
                           f"expected one of {', '.join(ACCESS_MODES)}, got {describe(mode)}.")
    return storage_class or None, mode


def _name(value: object, path: Path, origin: Origin, substitute: Callable[[str], str]) -> str:
    return substitute(expect_str(value, path, origin).strip())
