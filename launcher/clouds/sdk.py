"""Cloud SDKs are optional extras: which cloud needs which, and the one error a missing
one becomes.

`pip install launcher` brings no cloud SDK; `pip install 'launcher[aws]'` (gcp, azure,
nebius) adds one. A command that needs an SDK that is not installed must say so in one
line naming the extra, never end in an import traceback:

- `missing_sdk(cloud)` answers "is this cloud's SDK importable?" without importing it
  (`importlib.util.find_spec` on the modules the extra provides): `launcher check`,
  planning and dry runs ask it, through launcher.clouds.presence.
- `as_missing_sdk(exc, cloud)` turns a `ModuleNotFoundError` raised while a cloud's code
  ran into a `MissingSDKError`: the cloud is the one given, else the deepest
  `launcher.clouds.<cloud>` frame of the traceback, else the SDK the module belongs to.
  A missing `launcher.*` module is a bug, never mapped.
- `sdk_boundary(cloud)` applies it around a block (catalog refresh runs each cloud's
  fetcher inside one); `error_text(exc, cloud)` is the same for a message that collects
  several clouds' errors (teardown, the orphan scan, a managed job's launch error); the
  CLI's `main()` maps whatever reaches it the same way.

Cheap to import: stdlib only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

from launcher.errors import LauncherError

__all__ = ["SDKS", "MissingSDKError", "SDKInfo", "as_missing_sdk", "error_text", "missing_sdk",
           "sdk_boundary"]


@dataclass(frozen=True)
class SDKInfo:
    """A cloud's SDK: the pip extra that installs it, the modules that extra provides
    (each checked by `missing_sdk`), and the top-level import names that belong to it."""

    cloud: str
    label: str  # how the docs name the cloud: "AWS", "GCP"
    extra: str
    modules: tuple[str, ...]
    roots: tuple[str, ...]


SDKS: dict[str, SDKInfo] = {
    s.cloud: s
    for s in (
        SDKInfo("aws", "AWS", "aws", ("boto3", "botocore"), ("boto3", "botocore", "s3transfer")),
        SDKInfo("gcp", "GCP", "gcp", ("google.cloud.compute_v1", "google.auth", "google.api_core"),
                ("google",)),
        SDKInfo("azure", "Azure", "azure",
                ("azure.mgmt.compute", "azure.mgmt.network", "azure.mgmt.resource",
                 "azure.identity"),
                ("azure", "msal")),
        SDKInfo("nebius", "Nebius", "nebius", ("nebius",), ("nebius", "grpc")),
        SDKInfo("kubernetes", "Kubernetes", "kubernetes", ("kubernetes",), ("kubernetes",)),
    )
}

# launcher/clouds/<package> -> cloud name, for the clouds with an SDK extra
_PACKAGES = {f"launcher.clouds.{name}": name for name in SDKS}


class MissingSDKError(LauncherError):
    """A cloud's SDK (an optional extra) is not installed. `str()` is one line naming
    the extra to install."""

    exit_code = 1

    def __init__(self, cloud: str, module: str) -> None:
        self.cloud = cloud
        self.module = module
        info = SDKS[cloud]
        self.extra = info.extra
        super().__init__(
            f"the {info.label} SDK is not installed (no module '{module}'); "
            f"install it with: pip install 'launcher[{info.extra}]'"
        )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except Exception:  # a parent package missing, blocked or broken: not importable either
        return False


def missing_sdk(cloud: str) -> MissingSDKError | None:
    """The error for `cloud`'s SDK when one of its modules cannot be found, else None
    (also for a cloud without an SDK extra). Imports none of them (a namespace parent
    such as `google` may be located); no network."""
    info = SDKS.get(cloud)
    if info is None:
        return None
    for module in info.modules:
        if not _importable(module):
            return MissingSDKError(cloud, module)
    return None


def _cloud_in_traceback(exc: BaseException) -> str | None:
    """The cloud package deepest in the traceback (the code that did the import)."""
    found = None
    for frame, _line in traceback.walk_tb(exc.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        for package, cloud in _PACKAGES.items():
            if module == package or module.startswith(package + "."):
                found = cloud
    return found


def _cloud_of_module(module: str) -> str | None:
    root = module.split(".")[0]
    for info in SDKS.values():
        if root in info.roots:
            return info.cloud
    return None


def as_missing_sdk(exc: BaseException, cloud: str | None = None) -> MissingSDKError | None:
    """`exc` (or an exception it was raised from) as a MissingSDKError, when it is a
    ModuleNotFoundError of a cloud with an SDK extra; None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MissingSDKError):
            return current
        if isinstance(current, ModuleNotFoundError):
            module = current.name
            if not module or module.split(".")[0] == "launcher":
                return None
            owner = (cloud if cloud in SDKS else None) or _cloud_in_traceback(current) \
                or _cloud_of_module(module)
            return MissingSDKError(owner, module) if owner is not None else None
        current = current.__cause__ or current.__context__
    return None


def error_text(exc: BaseException, cloud: str | None = None) -> str:
    """How an error from `cloud`'s code reads in a message or an event: the missing-SDK
    line when it is one, else "Type: message"."""
    missing = as_missing_sdk(exc, cloud)
    return str(missing) if missing is not None else f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def sdk_boundary(cloud: str) -> Iterator[None]:
    """Run a block of `cloud`'s code: a missing module of its SDK leaves as
    MissingSDKError (from None: the import traceback is not the user's business)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = as_missing_sdk(exc, cloud)
        if missing is None:
            raise
        raise missing from None
