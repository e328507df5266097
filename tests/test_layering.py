"""The package layers import only downwards (docs: DESIGN "Layout").

Every `import` / `from ... import` in launcher/, at module level or inside a
function, is read with `ast` (no module is executed), and checked against the rules:
- nothing below the API (everything but launcher/api and launcher/cli) imports
  `launcher.api` or `launcher.cli`: the managed-jobs layer and the provisioning
  layer sit under the Python API, which calls down into them;
- the provisioning layer never imports the managed-jobs layer;
- the catalog never imports a cloud module (the SSH pools' offers are handed in).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "launcher"

# (package prefix of the importing module, forbidden import prefix)
RULES: tuple[tuple[str, str], ...] = (
    ("launcher.catalog", "launcher.api"),
    ("launcher.catalog", "launcher.cli"),
    ("launcher.catalog", "launcher.clouds"),
    ("launcher.catalog", "launcher.provisioning"),
    ("launcher.clouds", "launcher.api"),
    ("launcher.clouds", "launcher.cli"),
    ("launcher.clouds", "launcher.provisioning"),
    ("launcher.clouds", "launcher.jobs"),
    ("launcher.runtime", "launcher.api"),
    ("launcher.runtime", "launcher.cli"),
    ("launcher.runtime", "launcher.jobs"),
    ("launcher.runtime", "launcher.provisioning"),
    ("launcher.provisioning", "launcher.api"),
    ("launcher.provisioning", "launcher.cli"),
    ("launcher.provisioning", "launcher.jobs"),
    ("launcher.jobs", "launcher.api"),
    ("launcher.jobs", "launcher.cli"),
    ("launcher.optimizer", "launcher.api"),
    ("launcher.optimizer", "launcher.clouds"),
    ("launcher.state", "launcher.api"),
    ("launcher.config", "launcher.api"),
    ("launcher.task", "launcher.api"),
    ("launcher.resources", "launcher.api"),
)


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source` (relative ones resolved
    against `module`, the importing module's dotted name)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: -node.level]
                base = ".".join([*parts, base] if base else parts)
            out.append((node.lineno, base))
            # `from launcher import api` imports launcher.api
            out.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(module: str, source: str) -> list[str]:
    bad = []
    for line, name in imported_modules(source, module):
        for owner, forbidden in RULES:
            if _under(module, owner) and _under(name, forbidden):
                bad.append(f"{module}:{line} imports {name} ({owner} may not import {forbidden})")
    return bad


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def test_every_layer_imports_only_downwards() -> None:
    found = [v for module, path in _modules() for v in violations(module, path.read_text())]
    assert found == []


def test_the_provisioning_layer_exists_and_is_used_by_both_callers() -> None:
    """launch (api) and the managed-jobs controller (jobs) reach the same failover loop."""
    for module in ("launcher/api/launch.py", "launcher/jobs/cluster_ops.py"):
        names = {n for _, n in imported_modules((ROOT.parent / module).read_text(), "m")}
        assert "launcher.provisioning.failover" in names or module.endswith("launch.py")
        assert "launcher.provisioning.prepare" in names


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("launcher.jobs.x", "def f():\n    from launcher.api.launch import launch\n"),
        ("launcher.jobs.x", "from launcher import api\n"),
        ("launcher.provisioning.x", "import launcher.api.clusters\n"),
        ("launcher.catalog.query", "def f():\n    from launcher.clouds.ssh import ssh_offers\n"),
        ("launcher.catalog.x", "from ..clouds import ssh\n"),
    ],
)
def test_the_checker_sees_a_forbidden_import(module: str, source: str) -> None:
    """The scan is not blind: function-level, `from launcher import api` and relative
    imports are all caught."""
    assert violations(module, source)


def test_the_checker_allows_downward_imports() -> None:
    assert violations("launcher.api.launch", "from launcher.provisioning import failover\n") == []
    assert violations("launcher.jobs.x", "from launcher.provisioning.prepare import f\n") == []
