"""Which files a sync copies (.gitignore semantics, git repos) and the tar stream format."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from launcher.runtime.sync import (
    SyncError,
    copy_files,
    list_sync_files,
    pack_tar_gz,
    parse_gitignore,
)


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _ignored(patterns: str, path: str, is_dir: bool = False) -> bool:
    verdict = False
    for rule in parse_gitignore(patterns):
        if (not rule.dir_only or is_dir) and rule.regex.match(path):
            verdict = not rule.negate
    return verdict


@pytest.mark.parametrize(
    ("patterns", "path", "is_dir", "ignored"),
    [
        ("*.log", "a.log", False, True),
        ("*.log", "deep/dir/a.log", False, True),  # no slash: matches at any depth
        ("*.log", "a.logx", False, False),
        ("/top.txt", "top.txt", False, True),  # leading slash anchors to the .gitignore dir
        ("/top.txt", "sub/top.txt", False, False),
        ("docs/*.md", "docs/a.md", False, True),  # a middle slash anchors too
        ("docs/*.md", "x/docs/a.md", False, False),
        ("docs/*.md", "docs/sub/a.md", False, False),  # * does not cross '/'
        ("build/", "build", True, True),  # trailing slash: directories only
        ("build/", "build", False, False),
        ("**/cache", "a/b/cache", True, True),
        ("**/cache", "cache", True, True),
        ("logs/**", "logs/x/y.txt", False, True),
        ("a/**/z", "a/z", False, True),
        ("a/**/z", "a/b/c/z", False, True),
        ("file?.txt", "file1.txt", False, True),
        ("file?.txt", "file10.txt", False, False),
        ("[ab].txt", "b.txt", False, True),
        ("[!ab].txt", "b.txt", False, False),
        ("[!ab].txt", "c.txt", False, True),
        ("*.log\n!keep.log", "keep.log", False, False),  # negation: the last match wins
        ("!keep.log\n*.log", "keep.log", False, True),
        ("# comment\n\n*.tmp", "# comment", False, False),
        ("\\#literal", "#literal", False, True),
        ("trailing.txt   ", "trailing.txt", False, True),
    ],
)
def test_gitignore_patterns(patterns: str, path: str, is_dir: bool, ignored: bool) -> None:
    assert _ignored(patterns, path, is_dir) is ignored


def test_walk_honours_nested_gitignores_and_skips_git(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            ".gitignore": "*.pyc\n/data/\nout/\n",
            ".git/config": "x",
            "a.py": "",
            "a.pyc": "",
            "data/big.bin": "",
            "src/data/small.txt": "",  # /data/ is anchored: this one stays
            "src/out/gen.c": "",
            "src/.gitignore": "local.cfg\n!important.pyc\n",
            "src/local.cfg": "",
            "src/important.pyc": "",
            "src/mod.py": "",
            "other/local.cfg": "",  # src's .gitignore does not apply here
        },
    )
    assert list_sync_files(str(tmp_path)) == [
        ".gitignore",
        "a.py",
        "other/local.cfg",
        "src/.gitignore",
        "src/data/small.txt",
        "src/important.pyc",
        "src/mod.py",
    ]
    everything = list_sync_files(str(tmp_path), respect_gitignore=False)
    assert "data/big.bin" in everything and "a.pyc" in everything
    assert not any(p.startswith(".git/") for p in everything)


def test_files_inside_an_ignored_directory_cannot_be_re_included(tmp_path: Path) -> None:
    _tree(tmp_path, {".gitignore": "build/\n!build/keep.txt\n", "build/keep.txt": ""})
    assert list_sync_files(str(tmp_path)) == [".gitignore"]  # as git does


def test_git_repo_lists_tracked_and_unignored_untracked_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _tree(
        repo,
        {
            ".gitignore": "*.tmp\nsecret/\n",
            "src/a.py": "",
            "forced.tmp": "",
            "new.txt": "",
            "junk.tmp": "",
            "secret/key": "",
            "deleted.py": "",
        },
    )
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("new-excluded.txt\n")
    (repo / "new-excluded.txt").write_text("")
    subprocess.run([*git, "add", ".gitignore", "src/a.py", "deleted.py"], check=True)
    subprocess.run([*git, "add", "-f", "forced.tmp"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    (repo / "deleted.py").unlink()  # tracked but gone from disk: nothing to copy
    assert list_sync_files(str(repo)) == [".gitignore", "forced.tmp", "new.txt", "src/a.py"]
    # a subdirectory of a work tree lists paths relative to itself
    assert list_sync_files(str(repo / "src")) == ["a.py"]


def test_skyignore_replaces_gitignore_as_in_skypilot(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            ".skyignore": "data/\n*.ckpt\n",
            ".gitignore": "*.log\n",
            "train.py": "",
            "run.log": "",
            "model.ckpt": "",
            "data/big.bin": "",
            "sub/.gitignore": "*\n",
            "sub/x.py": "",
            ".git/HEAD": "",
        },
    )
    assert list_sync_files(str(tmp_path)) == [
        ".gitignore", ".skyignore", "run.log", "sub/.gitignore", "sub/x.py", "train.py"
    ]
    assert len(list_sync_files(str(tmp_path), respect_gitignore=False)) == 8  # no .git


def test_launcherignore_replaces_gitignore_and_wins_over_skyignore(tmp_path: Path) -> None:
    _tree(tmp_path, {".launcherignore": "*.ckpt\n", ".skyignore": "*.py\n",
                     ".gitignore": "*.log\n", "train.py": "", "run.log": "", "model.ckpt": ""})
    assert list_sync_files(str(tmp_path)) == [
        ".gitignore", ".launcherignore", ".skyignore", "run.log", "train.py"]


def test_not_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SyncError, match="not a directory"):
        list_sync_files(str(tmp_path / "nope"))


def test_tar_stream_round_trips_files_modes_and_symlinks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _tree(src, {"a.txt": "A", "bin/run": "#!/bin/sh\n", "d/e/f.txt": "F"})
    (src / "bin" / "run").chmod(0o755)
    os.symlink("a.txt", src / "alias")
    files = list_sync_files(str(src))
    buf = io.BytesIO()
    pack_tar_gz(str(src), files, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["a.txt", "alias", "bin/run", "d/e/f.txt"]
        assert members["bin/run"].mode & 0o777 == 0o755
        assert members["alias"].issym() and members["alias"].linkname == "a.txt"
        assert members["a.txt"].uid == 0 and members["a.txt"].uname == ""
        f = tar.extractfile("d/e/f.txt")
        assert f is not None and f.read() == b"F"


def test_copy_files_keeps_modes_and_replaces_symlinks(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"x/run.sh": "echo", "a.txt": "new"})
    (src / "x" / "run.sh").chmod(0o700)
    os.symlink("a.txt", src / "link")
    dst.mkdir()
    os.symlink("/etc/hostname", dst / "a.txt")  # a symlink in the way is replaced, not followed
    copy_files(str(src), list_sync_files(str(src)), str(dst))
    assert (dst / "x" / "run.sh").stat().st_mode & 0o777 == 0o700
    assert not (dst / "a.txt").is_symlink() and (dst / "a.txt").read_text() == "new"
    assert os.readlink(dst / "link") == "a.txt"
