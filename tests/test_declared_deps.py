"""Every third-party import in launcher/ comes from a declared dependency.

A module may import a distribution that `[project] dependencies` declares, or that one of
them requires (transitively); a module of `launcher/clouds/NAME/` may also import what the
`NAME` extra declares. Anything else works only on a machine that happens to have the package
(numpy once hid in launcher/spot that way). Imports are read with `ast`, at module level and
inside functions; import names are mapped to distributions with importlib.metadata, so the
test needs the `.[test]` environment installed (it declares every extra's SDK).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "launcher"

# (module, import name): optional imports a module guards itself, with the reason.
OPTIONAL: dict[tuple[str, str], str] = {
    # the checkpoint sync on nodes uses boto3 when the node has it, else its stdlib client
    ("launcher.runtime.bucket_sync", "boto3"): "guarded by `except ImportError`",
    ("launcher.runtime.bucket_sync", "botocore"): "only after boto3 imported",
    # a PostgreSQL state DB needs the [server] extra: without it, one clear StoreError
    ("launcher.state.engine", "psycopg"): "guarded by `except ImportError`",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def _closure(requirements: list[str]) -> frozenset[str]:
    """The distributions `requirements` name, and all they require, with the extras asked for
    (launcher's own extras, as in `launcher[aws]`, expand to their requirements)."""
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name == "launcher":
            todo += [Requirement(r) for extra in req.extras for r in extras[extra]]
            continue
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        try:
            requires = md.requires(req.name) or []
        except md.PackageNotFoundError:
            continue  # declared but not installed: its imports are reported below
        for raw in requires:
            sub = Requirement(raw)
            wanted = [""] + sorted(req.extras)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(sub)
    return frozenset(n for n in seen if "[" not in n)


@cache
def allowed(module: str) -> frozenset[str]:
    """The distributions `module` (a dotted name under launcher) may import."""
    deps = _project()["dependencies"]
    extras = _project()["optional-dependencies"]
    assert isinstance(deps, list) and isinstance(extras, dict)
    parts = module.split(".")
    if parts[:2] == ["launcher", "clouds"] and len(parts) > 2 and parts[2] in extras:
        return _closure([*deps, *extras[parts[2]]])
    for package, extra in PACKAGE_EXTRAS.items():
        if module == package or module.startswith(package + "."):
            return _closure([*deps, *extras[extra]])
    return _closure(list(deps))


# Packages that run only with an extra installed (besides each cloud's own extra): the
# control-plane server and its remote client need `launcher[server]`.
PACKAGE_EXTRAS = {"launcher.server": "server", "launcher.client": "server"}


def third_party_imports(source: str, path: Path) -> list[tuple[int, str]]:
    """(line, top-level name) of each import of a module that is neither stdlib, launcher,
    relative, nor a sibling file (launcher/runtime's agent modules import each other by
    bare name on the nodes)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "launcher" or top == "__future__":
                continue
            if (path.parent / f"{top}.py").exists() or (path.parent / top).is_dir():
                continue
            out.append((node.lineno, top))
    return out


def violations(module: str, source: str, path: Path) -> list[str]:
    dists = md.packages_distributions()
    bad = []
    for line, top in third_party_imports(source, path):
        if (module, top) in OPTIONAL:
            continue
        providers = {_norm(d) for d in dists.get(top, [])}
        if not providers & allowed(module):
            where = "dependencies" + (
                f" or the [{module.split('.')[2]}] extra"
                if module.startswith("launcher.clouds.") and module.count(".") >= 2 else ""
            )
            bad.append(
                f"{module}:{line} imports {top} (from {sorted(providers) or 'nothing installed'}),"
                f" which no {where} entry declares or requires"
            )
    return bad


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def test_launcher_imports_only_declared_distributions() -> None:
    found = [v for module, path in _modules() for v in violations(module, path.read_text(), path)]
    assert found == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("launcher.spot.optimum", "def f():\n    import numpy as np\n"),  # what issue 16 found
        ("launcher.clouds.gcp.provision", "import boto3\n"),  # another cloud's SDK
        ("launcher.optimizer", "from google.cloud import compute_v1\n"),  # an extra, not core
        ("launcher.clouds.local", "import boto3\n"),  # launcher/clouds itself has no extra
    ],
)
def test_the_checker_sees_an_undeclared_import(module: str, source: str) -> None:
    assert violations(module, source, ROOT / "x.py")


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("launcher.task", "import yaml\n"),  # declared
        ("launcher.runtime.keys", "from cryptography.hazmat import x\n"),  # paramiko requires it
        ("launcher.clouds.aws.provision", "import boto3\nfrom botocore import config\n"),
        ("launcher.clouds.gcp.provision", "from google.cloud import compute_v1\n"),
        ("launcher.clouds.runpod.api", "import requests\n"),
    ],
)
def test_the_checker_allows_declared_imports(module: str, source: str) -> None:
    assert violations(module, source, ROOT / "x.py") == []
