"""A wheel of the launcher that is running now, for `launcher api deploy` to install on
the server's VM (so client and server run the same code and version).

Built directly (a wheel is a zip: the package's files, then `*.dist-info` with
METADATA, WHEEL, entry_points.txt and RECORD), offline and in well under a second:
`pip wheel` would need the build backend, and from a source tree without network it
cannot fetch it. The files are those of the imported `launcher` package (caches left
out). The metadata (its dependencies and extras, `[server]` among them) comes from the
`pyproject.toml` next to that package when it runs from a source tree, else from the
installed distribution's METADATA.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from email.message import Message
from pathlib import Path
from typing import Any

from launcher.errors import LauncherError

_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so.tmp")
_WHEEL = "Wheel-Version: 1.0\nGenerator: launcher-deploy\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def package_dir() -> Path:
    import launcher

    return Path(launcher.__file__).resolve().parent


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def metadata_text() -> str:
    """METADATA (core metadata 2.1) of the running launcher."""
    from launcher import __version__

    pyproject = package_dir().parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == "launcher":
            return _metadata_from_project(project, __version__)
    from importlib import metadata

    try:
        dist = metadata.distribution("launcher")
    except metadata.PackageNotFoundError:
        raise LauncherError("Cannot build a wheel of this launcher: it runs neither from a "
                            "source tree (no pyproject.toml next to the package) nor from "
                            "an installed distribution.") from None
    text = dist.read_text("METADATA") or ""
    if dist.version != __version__:
        raise LauncherError(f"Cannot build a wheel of this launcher: the running code is "
                            f"{__version__} but the installed metadata says {dist.version}; "
                            "reinstall launcher.")
    return text


def _metadata_from_project(project: dict[str, Any], version: str) -> str:
    msg = Message()
    msg["Metadata-Version"] = "2.1"
    msg["Name"] = "launcher"
    msg["Version"] = version
    if project.get("description"):
        msg["Summary"] = str(project["description"])
    if project.get("requires-python"):
        msg["Requires-Python"] = str(project["requires-python"])
    for dep in project.get("dependencies", []) or []:
        msg["Requires-Dist"] = str(dep)
    extras = project.get("optional-dependencies", {}) or {}
    for extra, deps in extras.items():
        msg["Provides-Extra"] = extra
        for dep in deps:
            msg["Requires-Dist"] = f'{dep}; extra == "{extra}"'
    return msg.as_string()


def _entry_points() -> str:
    return "[console_scripts]\nlauncher = launcher.cli:main\n"


def build_wheel(out_dir: Path) -> Path:
    """Write `launcher-<version>-py3-none-any.whl` of the running launcher into `out_dir`;
    its path. Raises LauncherError when neither a source tree nor an installed
    distribution says what its dependencies are."""
    from launcher import __version__

    meta = metadata_text()
    root = package_dir()
    dist_info = f"launcher-{__version__}.dist-info"
    path = out_dir / f"launcher-{__version__}-py3-none-any.whl"
    records: list[str] = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(_SKIP_SUFFIXES):
                    continue
                full = Path(dirpath) / name
                arc = "launcher/" + full.relative_to(root).as_posix()
                data = full.read_bytes()
                zf.writestr(arc, data)
                records.append(f"{arc},{_record_hash(data)},{len(data)}")
        for name, text in (("METADATA", meta), ("WHEEL", _WHEEL),
                           ("entry_points.txt", _entry_points()),
                           ("top_level.txt", "launcher\n")):
            data = text.encode()
            zf.writestr(f"{dist_info}/{name}", data)
            records.append(f"{dist_info}/{name},{_record_hash(data)},{len(data)}")
        records.append(f"{dist_info}/RECORD,,")
        zf.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return path
