"""The package layers import only downwards (docs: DESIGN "Layout").

Every `import` / `from ... import` in launcher/, at module level or inside a
function, is read with `ast` (no module is executed), and checked against the rules:
- nothing below the API (everything but launcher/api and launcher/cli) imports
  `launcher.api` or `launcher.cli`: the managed-jobs layer and the provisioning
  layer sit under the Python API, which calls down into them;
- the provisioning layer never imports the managed-jobs layer;
- the catalog never imports a cloud module (the SSH pools' offers are handed in).

No two modules import each other, directly or around a circle, counting imports inside
functions (a lazy import that only dodges a circle is still a circle).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
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
    ("launcher.task.resources", "launcher.api"),
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


def import_graph(modules: list[tuple[str, str]]) -> dict[str, set[str]]:
    """module -> the launcher modules it imports, from (module, source) pairs: an import
    of a name defined in a module counts as an import of that module, and
    `from package import submodule` as an import of the submodule only (as Python and
    import-linter see it: the package's __init__ runs first, but nothing in it is used)."""
    known = {m for m, _ in modules}
    packages = {m.rpartition(".")[0] for m in known}
    graph: dict[str, set[str]] = {}
    for module, source in modules:
        # a package's relative imports resolve against the package itself
        anchor = f"{module}.__init__" if module in packages else module
        out = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(source)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                (_, base), *_ = imported_modules(ast.unparse(node), anchor)
                subs = [f"{base}.{a.name}" for a in node.names]
                names = [n for n in subs if n in known] or [base]
                if len(names) < len(subs):  # names defined in `base` itself, too
                    names.append(base)
            for name in names:
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    out.add(name)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another around a circle (strongly connected
    components of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circles() -> None:
    graph = import_graph([(m, p.read_text()) for m, p in _modules()])
    assert import_circles(graph) == []


def test_the_circle_finder_sees_a_lazy_circle() -> None:
    """A circle closed by an import inside a function, or through a third module, counts."""
    graph = import_graph([
        ("launcher.a", "from launcher.b import f\n"),
        ("launcher.b", "def f():\n    from launcher.c import g\n"),
        ("launcher.c", "from launcher import a\n"),
        ("launcher.d", "from launcher.a import x\n"),
    ])
    assert import_circles(graph) == [["launcher.a", "launcher.b", "launcher.c"]]


def test_a_sibling_import_through_the_package_is_no_circle() -> None:
    """`from launcher.p import sub` in a module of p imports sub, not p's __init__ (which
    re-exports p's names); a name of the __init__ itself does close a circle."""
    modules = [
        ("launcher.p", "from launcher.p.model import Task\n"),
        ("launcher.p.model", "from launcher.p import fields\n"),
        ("launcher.p.fields", ""),
    ]
    assert import_circles(import_graph(modules)) == []
    modules[2] = ("launcher.p.fields", "from launcher.p import Task\n")
    assert import_circles(import_graph(modules)) == [
        ["launcher.p", "launcher.p.fields", "launcher.p.model"]]


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


# ---- the import-linter contracts ([tool.importlinter] in pyproject.toml; .ci/run) ----

LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the launcher package under `root`, with the repo's contracts."""
    pytest.importorskip("importlinter")
    return subprocess.run([sys.executable, "-c", LINT, str(root / "pyproject.toml")],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_import_linter_contracts_are_kept() -> None:
    proc = _lint_imports(ROOT.parent)
    assert proc.returncode == 0 and "BROKEN" not in proc.stdout, proc.stdout + proc.stderr


def test_import_linter_fails_on_a_seeded_violation(tmp_path: Path) -> None:
    """The contracts are not blind: a copy of the package with rich imported by the API,
    boto3 by the runtime and the API by managed jobs breaks those rules (and the layers
    and the no-circles contract, for jobs -> api), and keeps the others."""
    shutil.copytree(ROOT, tmp_path / "launcher",
                    ignore=lambda d, names: [n for n in names if not (
                        n.endswith(".py") or (Path(d) / n).is_dir()) or n == "__pycache__"])
    shutil.copy(ROOT.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "launcher" / "api" / "seeded.py").write_text("import rich\n")
    (tmp_path / "launcher" / "runtime" / "seeded.py").write_text("import boto3\n")
    (tmp_path / "launcher" / "jobs" / "seeded.py").write_text(
        "def f():\n    from launcher.api import clusters\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdicts = dict(re.findall(r"^(.+?) (KEPT|BROKEN)", proc.stdout, re.M))
    assert {k for k, v in verdicts.items() if v == "BROKEN"} == {
        "The CLI is the only user of rich", "boto3 / botocore only inside launcher.clouds.aws",
        "Managed jobs never import the API or the CLI",
        "Each layer imports only the layers below it",
        "No import circles between sibling packages or modules"}, proc.stdout
    assert len(verdicts) == 12, verdicts
    for line in ("launcher.api.seeded -> rich", "launcher.runtime.seeded -> boto3",
                 "launcher.jobs.seeded -> launcher.api.clusters"):
        assert line in proc.stdout, proc.stdout
