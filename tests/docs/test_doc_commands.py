"""Every shell command in README.md and docs/*.md runs as written on a fresh clone.

The commands are extracted from the documents themselves (any new doc is covered):
`console` blocks give the lines after `$ `, `bash`/`sh`/`shell` blocks every line (a
trailing backslash continues it). Each command line is split on `;`, `&&`, `||`, `|`.
Then, for every command:

- a file it names (`*.yaml`, `*.py`, `*.md`, ... or a path under a repo directory) exists
  in the repository, and a `python3 -m MODULE` module can be imported;
- a `launcher` command parses with the real CLI: the command is resolved through the
  real group and its arguments and options are parsed (types, counts, required ones)
  without running it;
- read-only `launcher` commands (gpus, cost, check, catalog status, launch --dryrun,
  jobs simulate, --help, --version) are run for real: exit 0, or, where the document shows an
  `Error:` line as their output, exactly that error;
- a short explicit list of stateful commands (the README quick start, the first
  managed-jobs command) is run for real on the local cloud, in order.

Commands that would need a real cloud's credentials or network are listed in
NEEDS_CLOUD (kept small and explicit): they are still parsed, never run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
OPERATORS = {";", "&&", "||", "|", "&"}
FILE_RE = re.compile(r"^[\w.][\w./-]*\.(ya?ml|py|md|sh|toml|json|csv)$")
REPO_DIRS = ("task_examples/", "docs/", "benchmarks/", "tests/", "launcher/")

# Read-only launcher commands that would still need a real cloud (network, credentials):
# parsed, never run. (pattern on the command text, why)
NEEDS_CLOUD: list[tuple[str, str]] = [
    (r"^launcher catalog refresh\b", "fetches prices from the clouds' APIs"),
]

# Stateful commands run for real on the local cloud, in order: (document, commands).
REAL_SEQUENCES: list[tuple[str, list[str]]] = [
    ("README.md", ["launcher launch task_examples/hello.yaml -c hello", "launcher status",
                   "launcher down hello -y"]),
    ("docs/managed-jobs.md", ["launcher jobs launch task_examples/train-resumable.yaml -y"]),
]


@dataclass
class DocCommand:
    doc: str
    line: int
    text: str
    output: list[str] = field(default_factory=list)  # what a console block shows after it

    def where(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def extract(path: Path) -> list[DocCommand]:
    """The shell commands of one Markdown file's code blocks."""
    rel = str(path.relative_to(REPO))
    out: list[DocCommand] = []
    lang: str | None = None
    pending = ""
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"^\s*```\s*([\w+-]*)", raw)
        if m:
            lang = None if lang is not None else (m.group(1).lower() or "")
            pending = ""
            continue
        if lang not in SHELL_LANGS:
            continue
        line = raw.strip()
        if lang == "console":
            if line.startswith("$ "):
                out.append(DocCommand(rel, no, line[2:]))
            elif out and out[-1].doc == rel and line:
                out[-1].output.append(line)
            continue
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(DocCommand(rel, no, pending + line))
        pending = ""
    return out


def split(text: str) -> list[list[str]]:
    """One command line -> the argv of each simple command in it (comments dropped)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    cmds: list[list[str]] = [[]]
    for tok in lex:
        if tok in OPERATORS:
            cmds.append([])
        else:
            cmds[-1].append(tok)
    return [c for c in cmds if c]


ALL = [c for doc in DOCS for c in extract(doc)]
SIMPLE = [(c, argv) for c in ALL for argv in split(c.text)]
LAUNCHER = [(c, argv) for c, argv in SIMPLE if argv[0] == "launcher"]


def test_the_documents_have_commands() -> None:
    """The extractor finds the known commands (guards against a silently empty test)."""
    texts = {c.text.split("  #")[0].strip() for c in ALL}
    assert "launcher gpus H100:8" in texts
    assert "launcher jobs launch task_examples/train-resumable.yaml -y" in texts
    assert len(LAUNCHER) > 30


@pytest.mark.parametrize(("cmd", "argv"), SIMPLE, ids=[f"{c.doc}:{c.line}" for c, _ in SIMPLE])
def test_files_and_modules_named_exist(cmd: DocCommand, argv: list[str]) -> None:
    for tok in argv[1:]:
        if tok.startswith(("-", "~", "/", "$")) or "=" in tok or "://" in tok:
            continue
        if FILE_RE.match(tok) or tok.startswith(REPO_DIRS):
            assert (REPO / tok).exists(), f"{cmd.where()}: no file {tok!r} in the repository"
    if argv[0].startswith("python") and "-m" in argv:
        module = argv[argv.index("-m") + 1]
        assert importlib.util.find_spec(module) is not None, f"{cmd.where()}: no module {module}"


def parse(argv: list[str]) -> click.Command:
    """Resolve and parse `launcher ARGS` with the real CLI, without running it. Raises
    click.ClickException on bad input. Returns the leaf command."""
    from launcher.cli.cli_index import _import_all
    from launcher.cli.lazy import root_group

    _import_all()  # commands register in the CLI's own order, whatever the docs' order
    cmd: click.Command = root_group()
    args = list(argv[1:])
    if args in (["--version"], ["-V"], ["--help"], ["-h"]):
        return cmd
    ctx = click.Context(cmd, info_name="launcher")
    while isinstance(cmd, click.Group):
        if not args or args[0] in ("--help", "-h"):
            return cmd
        name, sub, args = cmd.resolve_command(ctx, args)
        assert sub is not None and name is not None
        cmd, ctx = sub, click.Context(sub, info_name=name, parent=ctx)
    if "--help" in args or "-h" in args:
        return cmd
    cmd.make_context(ctx.info_name, args, parent=ctx.parent)
    return cmd


@pytest.mark.parametrize(("cmd", "argv"), LAUNCHER, ids=[f"{c.doc}:{c.line}" for c, _ in LAUNCHER])
def test_launcher_command_parses(cmd: DocCommand, argv: list[str]) -> None:
    try:
        parse(argv)
    except click.ClickException as exc:
        pytest.fail(f"{cmd.where()}: {exc.format_message()}")


def test_parse_rejects_what_the_cli_rejects() -> None:
    """The parse check can fail: unknown commands, options and bad values are caught."""
    for bad in ("launcher nosuch", "launcher queue", "launcher gpus --nosuch",
                "launcher logs demo notanumber", "launcher jobs nosuch"):
        with pytest.raises(click.ClickException):
            parse(shlex.split(bad))


def _read_only(argv: list[str]) -> bool:
    args = argv[1:]
    if args in (["--version"], ["--help"]) or "--help" in args:
        return True
    if not args:
        return False
    if args[0] in ("gpus", "cost", "check"):
        return True
    if args[:2] in (["catalog", "status"], ["jobs", "simulate"]):  # simulate reads files only
        return True
    return args[0] == "launch" and "--dryrun" in args


READ_ONLY = [(c, a) for c, a in LAUNCHER if _read_only(a)
             and not any(re.search(p, shlex.join(a)) for p, _ in NEEDS_CLOUD)]


@pytest.mark.parametrize(("cmd", "argv"), READ_ONLY, ids=[f"{c.doc}:{c.line}" for c, _ in READ_ONLY])
def test_read_only_command_runs(cmd: DocCommand, argv: list[str], tmp_path: Path) -> None:
    p = subprocess.run([*CLI, *argv[1:]], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")})
    assert "Traceback" not in p.stderr, f"{cmd.where()}\n{p.stderr}"
    errors = [line for line in cmd.output if line.startswith("Error:")]
    if errors:
        assert p.returncode != 0, cmd.where()
        for line in errors:
            assert line in p.stderr.splitlines(), f"{cmd.where()}: expected {line!r}\n{p.stderr}"
    else:
        assert p.returncode == 0, f"{cmd.where()}\n{p.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "commands"), REAL_SEQUENCES, ids=[d for d, _ in REAL_SEQUENCES])
def test_stateful_commands_run_for_real(doc: str, commands: list[str], tmp_path: Path) -> None:
    documented = {c.text.split("  #")[0].strip() for c in ALL if c.doc == doc}
    documented |= {shlex.join(a) for c, a in SIMPLE if c.doc == doc}
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    try:
        for text in commands:
            assert text in documented, f"{doc} no longer shows `{text}`: update REAL_SEQUENCES"
            p = subprocess.run([*CLI, *shlex.split(text)[1:]], capture_output=True, text=True,
                               timeout=240, cwd=REPO, env=env)
            assert p.returncode == 0, f"{doc}: `{text}` exited {p.returncode}\n{p.stderr}"
            assert "Traceback" not in p.stderr
    finally:
        subprocess.run([*CLI, "jobs", "controller", "stop"], capture_output=True, timeout=60,
                       cwd=REPO, env=env)
        from launcher.clouds.local import LocalCloud

        root = tmp_path / "home" / "local"
        if root.exists():
            old = os.environ.get("LAUNCHER_HOME")
            os.environ["LAUNCHER_HOME"] = str(tmp_path / "home")
            try:
                for cdir in root.iterdir():
                    LocalCloud().terminate(cdir.name)
            finally:
                if old is not None:
                    os.environ["LAUNCHER_HOME"] = old
