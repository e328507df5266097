"""SkyPilot storage mounts in `file_mounts`: `{name, source, store, mode, persistent}`.

    file_mounts:
      /data:   {source: s3://my-bucket/train, mode: COPY}   # an existing bucket
      ~/ckpt:  {name: my-out-bucket, mode: COPY}             # a bucket, created if missing
      /code:   {name: my-code, source: ./src, mode: COPY}    # local dir uploaded to `name`

Semantics follow SkyPilot's "Cloud Buckets" page: `source` is an existing bucket URI
or a local directory (uploaded to the bucket `name`); `name` alone is a bucket
created empty when missing; `store` (s3, gcs, azure, r2, ibm, oci, nebius, coreweave)
is inferred from a URI source (`nebius://`, `cw://` for the last two) and defaults to
s3; `mode` is MOUNT (the default), COPY or MOUNT_CACHED; `persistent` (default true)
keeps the bucket after the task.

A `name` that is a placeholder the user fills in (empty, missing, an unset `$VAR`,
`YOUR_OWN_BUCKET_NAME`) is accepted with a note for planning (`placeholder_notes`);
every real launch refuses it naming the field (`placeholder_refusal`).

Parsing only (stdlib, no I/O): what a launch can really do with a mount is decided
by `launcher.runtime.storage_nodes`. Errors are TaskValidationError with the
field path (`file_mounts./data.mode`) and line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from launcher.task.fields import (
    Origin,
    Path,
    check_keys,
    did_you_mean,
    expect_bool,
    expect_mapping,
    expect_str,
)

STORE_TYPES = ("s3", "gcs", "azure", "r2", "ibm", "oci", "nebius", "coreweave")
MODES = ("MOUNT", "COPY", "MOUNT_CACHED")
DEFAULT_MODE = "MOUNT"  # SkyPilot's default
STORAGE_KEYS = ("name", "source", "store", "mode", "persistent")

# URI scheme -> store type (Azure is https://<account>.blob.core.windows.net/<container>)
_SCHEME_STORE = {
    "s3": "s3", "gs": "gcs", "r2": "r2", "cos": "ibm", "oci": "oci", "nebius": "nebius",
    "cw": "coreweave",
}
_URI_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://([^/]*)(/.*)?\Z", re.DOTALL)
# S3's bucket naming rules (the strictest of the stores; GCS/R2 names fit them too)
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]\Z")


@dataclass(frozen=True, slots=True)
class StorageMount:
    """One storage mount, validated.

    `name`: the bucket to create/reuse (None when `source` is a bucket URI).
    `source`: a bucket URI as written, or an absolute local directory, or None.
    `store`: one of STORE_TYPES. `mode`: one of MODES. `persistent`: keep the bucket.
    `placeholder`: why `name` is not a real bucket name yet (see `parse_storage_mount`).
    """

    name: str | None
    source: str | None
    store: str
    mode: str
    persistent: bool = True
    # Why `name` is a placeholder the user still has to fill in (empty, an unset
    # `$VAR`, `YOUR_OWN_BUCKET_NAME`, missing): planned, refused at launch. None = real.
    placeholder: str | None = None
    # `source` given as a list of local paths (absolute): SkyPilot uploads each into the
    # bucket (a directory as a folder of its name). Planned only: refused at launch.
    source_list: tuple[str, ...] = ()

    @property
    def source_is_local(self) -> bool:
        return self.source is not None and "://" not in self.source

    @property
    def bucket_uri(self) -> str:
        """The URI the nodes read: `source` when it is a URI, else `<store>://<name>`."""
        if self.source is not None and not self.source_is_local:
            return self.source
        scheme = {"gcs": "gs", "ibm": "cos", "coreweave": "cw"}.get(self.store, self.store)
        return f"{scheme}://{self.name}"

    def to_yaml_value(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.name is not None:
            out["name"] = self.name
        if self.source is not None:
            out["source"] = self.source
        elif self.source_list:
            out["source"] = list(self.source_list)
        out["store"] = self.store
        out["mode"] = self.mode
        out["persistent"] = self.persistent
        return out


def store_of_uri(uri: str) -> str | None:
    """The store type a bucket URI belongs to, or None for an unknown scheme."""
    m = _URI_RE.match(uri)
    if m is None:
        return None
    scheme, host = m.group(1).lower(), m.group(2).lower()
    if scheme == "https" and host.endswith(".blob.core.windows.net"):
        return "azure"
    return _SCHEME_STORE.get(scheme)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b/` -> ("bucket", "a/b/"). The caller checked the scheme."""
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix


def parse_storage_mount(
    value: object, path: Path, origin: Origin, base: str,
    substitute: Callable[[str], str] | None = None,
) -> StorageMount:
    """Validate one storage-mount mapping at `path` (e.g. ("file_mounts", "/data")).

    `base` anchors a relative local `source`; `substitute` (str -> str) expands task
    envs in string fields. Raises TaskValidationError naming the field.
    """
    def sub(text: str) -> str:
        return substitute(text) if substitute is not None else text

    mapping = expect_mapping(value, path, origin, "a storage mount {name, source, store, mode}")
    check_keys(mapping, path, origin, STORAGE_KEYS)

    name = None
    placeholder = None
    if "name" in mapping:
        raw = mapping["name"]
        name = "" if raw is None else sub(
            expect_str(raw, path + ("name",), origin, allow_empty=True).strip())
        if "://" in name:
            raise origin.error(path + ("name",), f"'{name}' is a URI; 'name' is a bare bucket "
                               "name (put an existing bucket's URI in 'source').")
        placeholder = _placeholder_problem(name)
    source = None
    source_store = None
    source_list: tuple[str, ...] = ()
    if isinstance(mapping.get("source"), list):
        source_list = _local_source_list(mapping["source"], path + ("source",), origin, base, sub)
        if name is None:
            placeholder = "no 'name' given (local sources are uploaded to a bucket)"
    elif mapping.get("source") is not None:
        where = path + ("source",)
        text = sub(expect_str(mapping["source"], where, origin).strip())
        if "://" in text:
            source_store = store_of_uri(text)
            if source_store is None:
                raise origin.error(where, f"'{text}' is not a bucket URI launcher knows (s3://, "
                                   "gs://, r2://, cos://, oci://, nebius://, cw://, https://"
                                   "<account>.blob.core.windows.net/<container>).")
            bucket = _URI_RE.match(text)
            if bucket is None or not bucket.group(2):
                raise origin.error(where, f"'{text}' names no bucket.")
            if name:
                raise origin.error(path + ("name",), "give either 'name' (a bucket to create, "
                                   "optionally filled from a local 'source') or a bucket URI "
                                   "in 'source', not both.")
            source = text
            name, placeholder = None, None  # an empty 'name' beside a bucket URI is moot
        else:
            source = os.path.normpath(os.path.join(base, os.path.expanduser(text)))
            if name is None:
                placeholder = "no 'name' given (a local 'source' is uploaded to a bucket)"
    if name is None and source is None and not source_list:
        placeholder = "no 'name' given (a bucket to create or reuse) and no bucket URI 'source'"

    store = source_store or "s3"
    if mapping.get("store") is not None:
        where = path + ("store",)
        given = sub(expect_str(mapping["store"], where, origin).strip()).lower()
        if given not in STORE_TYPES:
            raise origin.error(where, f"unknown store '{given}'{did_you_mean(given, STORE_TYPES)}"
                               f" (allowed: {', '.join(STORE_TYPES)}).")
        if source_store is not None and given != source_store:
            raise origin.error(where, f"store '{given}' does not match the source {source} "
                               f"(a {source_store} bucket).")
        store = given

    mode = DEFAULT_MODE
    if mapping.get("mode") is not None:
        where = path + ("mode",)
        mode = expect_str(mapping["mode"], where, origin).strip().upper()
        if mode not in MODES:
            raise origin.error(where, f"unknown mode '{mapping['mode']}'"
                               f"{did_you_mean(mode, MODES)} (allowed: {', '.join(MODES)}).")

    persistent = True
    if mapping.get("persistent") is not None:
        persistent = expect_bool(mapping["persistent"], path + ("persistent",), origin)
    return StorageMount(name=name, source=source, store=store, mode=mode, persistent=persistent,
                        placeholder=placeholder, source_list=source_list)


def _local_source_list(
    value: list[object], where: Path, origin: Origin, base: str, sub: Callable[[str], str],
) -> tuple[str, ...]:
    """SkyPilot's `source: [path, ...]`: local files or directories only (absolute here)."""
    if not value:
        raise origin.error(where, "the list of local sources is empty; give one or more "
                           "local paths, or leave 'source' out.")
    out = []
    for i, item in enumerate(value):
        text = sub(expect_str(item, where + (i,), origin).strip())
        if "://" in text:
            raise origin.error(where + (i,), f"'{text}' is a bucket URI; a list 'source' holds "
                               "local paths only (give a bucket URI alone, not in a list).")
        out.append(os.path.normpath(os.path.join(base, os.path.expanduser(text))))
    return tuple(out)


LIST_SOURCE_NOT_LAUNCHABLE = (
    "a list of local sources is planned by `launcher cost` and `--dryrun`, but a launch "
    "cannot upload several paths into one bucket yet: give one local directory as 'source'."
)


def list_source_notes(mounts: Mapping[str, StorageMount]) -> tuple[str, ...]:
    """A note per storage mount whose `source` is a list of local paths (dry runs, `cost`)."""
    return tuple(
        f"file_mounts.{target}.source: {LIST_SOURCE_NOT_LAUNCHABLE}"
        for target, m in mounts.items()
        if m.source_list
    )


def list_source_refusal(mounts: Mapping[str, StorageMount]) -> tuple[Path, str] | None:
    """(field path, message) for the first storage mount whose `source` is a list; a
    launch refuses it. None when there is none."""
    for target, m in mounts.items():
        if m.source_list:
            return (("file_mounts", target, "source"), LIST_SOURCE_NOT_LAUNCHABLE)
    return None


# An unexpanded `$VAR` / `${VAR}` left in a name (the env has no value for it).
_UNSET_VAR_RE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


def _placeholder_problem(name: str) -> str | None:
    """Why `name` is a placeholder rather than a bucket name, or None when it is valid."""
    if not name:
        return "the bucket name is empty"
    if _UNSET_VAR_RE.search(name):
        return f"'{name}' holds a variable with no value"
    if not _BUCKET_RE.match(name) or ".." in name:
        return (f"'{name}' is not a valid bucket name (3-63 characters: lowercase letters, "
                "digits, '-' and '.')")
    return None


def placeholder_notes(mounts: Mapping[str, StorageMount]) -> tuple[str, ...]:
    """A note per storage mount whose bucket name is a placeholder (dry runs, `cost`)."""
    return tuple(
        f"file_mounts.{target}.name: {m.placeholder}; the mount is planned, but a launch "
        "needs a real bucket name there."
        for target, m in mounts.items()
        if m.placeholder is not None
    )


def placeholder_refusal(mounts: Mapping[str, StorageMount]) -> tuple[Path, str] | None:
    """(field path, message) for the first storage mount a launch cannot use because its
    bucket name is a placeholder; None when every name is real."""
    for target, m in mounts.items():
        if m.placeholder is not None:
            return (("file_mounts", target, "name"), f"{m.placeholder}: give the storage mount a "
                    "real bucket name (3-63 characters: lowercase letters, digits, '-' and "
                    "'.') before launching; dry runs and `cost` plan it as is.")
    return None
