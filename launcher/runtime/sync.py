"""Which files a workdir sync copies, and how they are packed for one round trip.

`list_sync_files(dir)` returns the files to copy (relative POSIX paths):
- in a git work tree: `git ls-files --cached --others --exclude-standard`
  (tracked files plus untracked ones not ignored by any .gitignore / info/exclude);
- otherwise: a walk that honours every `.gitignore` found in the tree
  (patterns, `!` negation, trailing `/` for directories, anchoring with `/`, `**`).
`.git` is always skipped. Symlinks are copied as symlinks.
A `.launcherignore` (or, as in SkyPilot, a `.skyignore`) at the top of the directory
replaces all of that: its gitignore-style patterns alone decide what is left out.

`pack_tar_gz` writes those files as one gzip'ed tar stream: the SSH runner
sends it through a single `tar -xzf -` exec instead of one SFTP call per file.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from typing import IO

from launcher.errors import LauncherError


class SyncError(LauncherError):
    """A directory could not be read for syncing."""


SKYIGNORE = ".skyignore"
IGNORE_FILES = (".launcherignore", SKYIGNORE)  # the first one present wins


def list_sync_files(local_dir: str, *, respect_gitignore: bool = True) -> list[str]:
    """Relative paths (POSIX, sorted) of the files under `local_dir` to sync.

    Raises SyncError if `local_dir` is not a directory.
    """
    if not os.path.isdir(local_dir):
        raise SyncError(f"Cannot sync {local_dir!r}: not a directory.")
    if respect_gitignore:
        for name in IGNORE_FILES:
            ignore = os.path.join(local_dir, name)
            if os.path.isfile(ignore):
                with open(ignore, encoding="utf-8", errors="replace") as f:
                    rules = parse_gitignore(f.read())
                return _walk_files(local_dir, False, _IgnoreStack().push("", rules))
        files = _git_files(local_dir)
        if files is not None:
            return files
    return _walk_files(local_dir, respect_gitignore)


def _git_files(local_dir: str) -> list[str] | None:
    """Files git would consider part of the tree, or None when not in a git work tree."""
    if shutil.which("git") is None or not _inside_git_tree(local_dir):
        return None
    try:
        proc = subprocess.run(
            [
                "git",
                "-C",
                local_dir,
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    out: set[str] = set()
    for raw in proc.stdout.split(b"\0"):
        if not raw:
            continue
        rel = os.fsdecode(raw)
        full = os.path.join(local_dir, rel)
        if os.path.isdir(full) and not os.path.islink(full):
            # a submodule (gitlink): take its files as they are on disk
            out.update(os.path.join(rel, f) for f in _walk_files(full, True))
        elif os.path.lexists(full):  # tracked but deleted files are skipped
            out.add(rel)
    return sorted(p for p in out if ".git" not in p.split("/"))


def _inside_git_tree(path: str) -> bool:
    cur = os.path.abspath(path)
    while True:
        if os.path.exists(os.path.join(cur, ".git")):
            return True
        parent = os.path.dirname(cur)
        if parent == cur:
            return False
        cur = parent


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _translate(pattern: str) -> str:
    """A gitignore glob as a regex over a '/'-separated relative path."""
    out = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse_gitignore(text: str) -> list[_Rule]:
    """Rules of one .gitignore file, in order (the last matching rule wins)."""
    rules = []
    for line in text.splitlines():
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        if not line.endswith("\\ "):
            line = line.rstrip(" ")
        negate = line.startswith("!")
        if negate or line.startswith("\\"):  # "\!x" / "\#x": a literal leading ! or #
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _translate(line)
        regex = re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.DOTALL)
        rules.append(_Rule(regex, negate, dir_only))
    return rules


class _IgnoreStack:
    """The .gitignore rules in force for one directory, with their base dirs."""

    def __init__(self, layers: tuple[tuple[str, tuple[_Rule, ...]], ...] = ()) -> None:
        self.layers = layers

    def push(self, base: str, rules: list[_Rule]) -> _IgnoreStack:
        return _IgnoreStack((*self.layers, (base, tuple(rules)))) if rules else self

    def ignored(self, rel: str, is_dir: bool) -> bool:
        verdict = False
        for base, rules in self.layers:
            if base:
                if not rel.startswith(base + "/"):
                    continue
                sub = rel[len(base) + 1 :]
            else:
                sub = rel
            for rule in rules:
                if rule.dir_only and not is_dir:
                    continue
                if rule.regex.match(sub):
                    verdict = not rule.negate
        return verdict


def _walk_files(
    root: str, respect_gitignore: bool, rules: _IgnoreStack | None = None
) -> list[str]:
    """Files under `root`, skipping what `.gitignore` files (if `respect_gitignore`) or
    the given `rules` (a .skyignore's, relative to `root`) ignore."""
    out: list[str] = []
    check = respect_gitignore or rules is not None

    def visit(rel_dir: str, stack: _IgnoreStack) -> None:
        abs_dir = os.path.join(root, rel_dir) if rel_dir else root
        if respect_gitignore:
            gi = os.path.join(abs_dir, ".gitignore")
            if os.path.isfile(gi):
                with open(gi, encoding="utf-8", errors="replace") as f:
                    stack = stack.push(rel_dir, parse_gitignore(f.read()))
        try:
            entries = sorted(os.scandir(abs_dir), key=lambda e: e.name)
        except OSError as exc:
            raise SyncError(f"Cannot read {abs_dir!r}: {exc.strerror}.") from exc
        for entry in entries:
            if entry.name == ".git":
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if check and stack.ignored(rel, is_dir):
                continue
            if is_dir:
                visit(rel, stack)
            else:
                out.append(rel)

    visit("", rules or _IgnoreStack())
    return sorted(out)


def pack_tar_gz(local_dir: str, files: list[str], out: IO[bytes]) -> None:
    """Write `files` (relative to `local_dir`) to `out` as a tar.gz stream."""
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=3, format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            full = os.path.join(local_dir, rel)
            info = tar.gettarinfo(full, arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with open(full, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


def copy_files(local_dir: str, files: list[str], dest_dir: str) -> None:
    """Copy `files` from `local_dir` into `dest_dir` on this machine (a local node's home,
    under LAUNCHER_HOME): the owner's mode bits are kept, group and other bits dropped."""
    made: set[str] = set()
    for rel in files:
        src = os.path.join(local_dir, rel)
        dst = os.path.join(dest_dir, rel)
        parent = os.path.dirname(dst)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        if os.path.islink(src):
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(os.readlink(src), dst)
        else:
            if os.path.islink(dst):
                os.unlink(dst)
            shutil.copy2(src, dst)
            mode = stat.S_IMODE(os.stat(dst).st_mode)
            if mode & 0o077:
                os.chmod(dst, mode & ~0o077)
