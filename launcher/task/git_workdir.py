"""A git `workdir: {url, ref}`: the nodes clone the repository at the ref.

CONTRACT:
    parse_git_workdir(value, path, origin, substitute) -> GitWorkdir
    clone_script(git) -> str   (bash; run on every node before `setup`, leaves the shell
                                in the clone, ~/sky_workdir, where `run` also starts)

As in SkyPilot: the repository is cloned to `~/sky_workdir` on every node, and `setup`
and `run` start there. `ref` is a branch, a tag or a commit (default: the remote's
default branch). Private HTTPS repositories: give the token as `GIT_TOKEN` (in
`secrets`, or `--secret GIT_TOKEN`); it is sent as an HTTP header for the clone and
fetch only, never written into the clone's `.git/config`. SSH URLs
(`git@host:org/repo.git`) use whatever key the nodes have (e.g. one placed with
`file_mounts`); SkyPilot's `GIT_SSH_KEY_PATH` is not read. Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from launcher.task.fields import Origin, Path, check_keys, expect_mapping, expect_str

# Where SkyPilot puts the workdir on a node (launcher.runtime.execution.REMOTE_WORKDIR).
GIT_WORKDIR = "~/sky_workdir"
_URL_RE = re.compile(r"(https?|ssh|git|file)://\S+\Z|[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:\S+\Z")
_REF_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*\Z")


@dataclass(frozen=True)
class GitWorkdir:
    """A repository to clone on every node, at `ref` (None: the default branch)."""

    url: str
    ref: str | None = None

    def to_yaml_value(self) -> dict[str, str]:
        return {"url": self.url, **({"ref": self.ref} if self.ref else {})}


def parse_git_workdir(
    value: Mapping[str, object], path: Path, origin: Origin, substitute: Callable[[str], str]
) -> GitWorkdir:
    """`workdir: {url, ref}` -> GitWorkdir; `$VAR`s are substituted from the task's envs.
    Raises TaskValidationError naming `workdir.url` / `workdir.ref`."""
    mapping = expect_mapping(value, path, origin, "a mapping {url, ref}")
    check_keys(mapping, path, origin, ("url", "ref"))
    if "url" not in mapping:
        raise origin.error(path, "a git workdir needs 'url' (and optionally 'ref').")
    url = substitute(expect_str(mapping["url"], path + ("url",), origin).strip())
    if not _URL_RE.match(url):
        raise origin.error(
            path + ("url",),
            f"'{url}' is not a git URL (https://host/org/repo.git or git@host:org/repo.git).",
        )
    ref = None
    if mapping.get("ref") is not None:
        raw = mapping["ref"]
        text = raw if isinstance(raw, str) else str(raw)  # a numeric tag is text too
        ref = substitute(text.strip())
        if not _REF_RE.match(ref) or ".." in ref:
            raise origin.error(
                path + ("ref",), f"'{ref}' is not a branch, tag or commit name."
            )
    return GitWorkdir(url, ref)


def clone_script(git: GitWorkdir) -> str:
    """Bash that clones (first time) or fetches (later) `git` into ~/sky_workdir, checks
    out the ref detached, and leaves the shell there. Uses $GIT_TOKEN for https URLs
    when it is set; fails (set -e) when the clone or checkout fails."""
    url, ref = shlex.quote(git.url), shlex.quote(git.ref or "HEAD")
    return f"""\
# launcher: git workdir {git.url} at {git.ref or 'the default branch'}
set -e
_lw_dest="$HOME/sky_workdir"
_lw_git() {{
  case {url} in
    https://*|http://*)
      if [ -n "${{GIT_TOKEN:-}}" ]; then
        git -c "http.extraHeader=Authorization: Basic $(printf 'x-access-token:%s' "$GIT_TOKEN" | base64 | tr -d '\\n')" "$@"
        return
      fi;;
  esac
  git "$@"
}}
if [ ! -d "$_lw_dest/.git" ]; then
  mkdir -p "$_lw_dest"
  _lw_git clone --quiet --no-checkout {url} "$_lw_dest"
fi
cd "$_lw_dest"
_lw_git fetch --quiet origin {ref}
git -c advice.detachedHead=false checkout --quiet --force FETCH_HEAD
set +e
"""
