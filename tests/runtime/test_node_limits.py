"""What a node can take: local-cloud node paths stay inside the node's home (also through
symlinks), and a `run` at the task model's size limit really runs on a node, as does one
far over it (a rank reads its script from a file, not from one `bash -c` argument, which
holds 128 KiB at most)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.clouds.base import NodeInfo
from launcher.runtime.local_runner import LocalRunner
from launcher.runtime.runner import NodePathError
from launcher.task.model import MAX_SCRIPT_BYTES
from tests.runtime.test_agent import Agent


def _runner(tmp_path: Path) -> tuple[LocalRunner, Path]:
    home = tmp_path / "cluster" / "node-0"
    home.mkdir(parents=True)
    return LocalRunner(NodeInfo(0, "c-0", "127.0.0.1", local_root=str(home))), home


@pytest.mark.parametrize("target", ["../../../../x", "~/../x", "a/../../x"])
def test_local_sync_refuses_paths_climbing_out_of_the_home(tmp_path: Path, target: str) -> None:
    runner, home = _runner(tmp_path)
    src = tmp_path / "src.txt"
    src.write_text("secret")
    with pytest.raises(NodePathError, match="leaves the node's home"):
        runner.put_file(str(src), target)
    with pytest.raises(NodePathError):
        runner.put_text("x", target)
    with pytest.raises(NodePathError):
        runner.sync_dir(str(tmp_path), target)
    assert not (tmp_path / "x").exists() and not (tmp_path / "cluster" / "x").exists()


def test_local_sync_refuses_a_symlink_out_of_the_home(tmp_path: Path) -> None:
    runner, home = _runner(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (home / "link").symlink_to(outside)
    with pytest.raises(NodePathError):
        runner.put_text("x", "link/f")
    assert not (outside / "f").exists()


def test_local_sync_inside_home_and_absolute_paths_work(tmp_path: Path) -> None:
    runner, home = _runner(tmp_path)
    runner.put_text("a", "~/d/a.txt")
    runner.put_text("b", "d/../b.txt")
    absolute = tmp_path / "abs.txt"
    runner.put_text("c", str(absolute))
    assert (home / "d" / "a.txt").read_text() == "a"
    assert (home / "b.txt").read_text() == "b"
    assert absolute.read_text() == "c"


@pytest.fixture
def agent1(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path / "cluster", num_nodes=1)
    a.setup()
    try:
        yield a
    finally:
        a.close()


def test_run_at_the_limit_and_far_over_it_runs_on_a_node(agent1: Agent) -> None:
    tail = "\necho ran-ok"
    at_limit = "#" * (MAX_SCRIPT_BYTES - len(tail)) + tail
    job = agent1.submit(at_limit, num_nodes=1)
    lines, rec = agent1.logs(job, "--follow")
    assert rec["status"] == "SUCCEEDED" and lines == ["(rank 0) ran-ok"]
    over = "#" * (200 * 1024) + tail  # over one bash argument (128 KiB)
    job = agent1.submit(over, num_nodes=1)
    lines, rec = agent1.logs(job, "--follow")
    assert rec["status"] == "SUCCEEDED" and lines == ["(rank 0) ran-ok"]
