"""The task's path fields: `workdir`, `file_mounts` and `checkpoint`.

Their text may name task envs as $NAME or ${NAME} (substituted; unknown names are left
as written). Local paths are made absolute against the task file's directory (`base`,
"~" expanded) and normalized; URIs ("scheme://...") are kept as written. Nothing here
touches the filesystem: `Task.check_local_paths()` checks that local sources exist.
Every malformed value raises TaskValidationError naming the field path and YAML line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from launcher.task.fields import Origin, Path, expect_mapping, expect_str, node_path_problem
from launcher.task.policies import CheckpointSpec, parse_checkpoint
from launcher.task.storage import StorageMount, parse_storage_mount

_ENV_REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def substitute_envs(text: str, envs: Mapping[str, str]) -> str:
    """Replace $NAME / ${NAME} with task envs (unknown names are left as written)."""
    return _ENV_REF_RE.sub(lambda m: envs.get(m.group(1) or m.group(2), m.group(0)), text)


def is_uri(text: str) -> bool:
    """True for a URI ("s3://bucket/key", "https://..."), False for a local path."""
    return "://" in text


def local_path(text: str, base: str) -> str:
    """`text` ("~" expanded) as a normalized path; a relative one is taken from `base`."""
    return os.path.normpath(os.path.join(base, os.path.expanduser(text)))


def parse_workdir(value: object, origin: Origin, base: str, envs: Mapping[str, str]) -> str | None:
    """The local directory of a text `workdir` (a git workdir mapping is parsed by
    git_workdir.py), or None when there is none. A URI is refused."""
    if value is None:
        return None
    text = substitute_envs(expect_str(value, ("workdir",), origin).strip(), envs)
    if is_uri(text):
        raise origin.error(("workdir",), f"'{text}' is a URI; workdir must be a local directory.")
    return local_path(text, base)


def parse_file_mounts(
    value: object, origin: Origin, base: str, envs: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, StorageMount]]:
    """(remote -> local path or URI, remote -> storage mount) of `file_mounts`."""
    if value is None:
        return {}, {}
    mounts = expect_mapping(
        value, ("file_mounts",), origin, "a mapping of remote path -> local path or URI"
    )
    out: dict[str, str] = {}
    storage: dict[str, StorageMount] = {}
    for remote, source in mounts.items():
        where: Path = ("file_mounts", remote)
        target = substitute_envs(remote.strip(), envs)
        if not target:
            raise origin.error(where, "the remote path is empty.")
        problem = node_path_problem(target)
        if problem:
            raise origin.error(where, problem)
        if isinstance(source, Mapping):
            storage[target] = parse_storage_mount(
                source, where, origin, base, lambda text: substitute_envs(text, envs))
            continue
        text = substitute_envs(expect_str(source, where, origin).strip(), envs)
        out[target] = text if is_uri(text) else local_path(text, base)
    return out, storage


def substituted_checkpoint(
    value: object, origin: Origin, envs: Mapping[str, str]
) -> CheckpointSpec | None:
    """The `checkpoint` section with task envs substituted into its path and store."""
    spec = parse_checkpoint(value, ("checkpoint",), origin)
    if spec is None:
        return None
    store = None if spec.store is None else substitute_envs(spec.store, envs)
    return CheckpointSpec(substitute_envs(spec.path, envs), store)
