"""The session-end process check (tests/leaks.py) on small pytest sessions of its own: a test
that leaves a process behind fails the run, naming the process and the test; one that
cleans up, or whose process is still exiting within the grace period, does not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CONFTEST = """\
from tests.conftest import no_process_left_behind, pytest_runtest_protocol  # noqa: F401
"""

TESTS = """\
import subprocess, time

def test_clean():
    p = subprocess.Popen(["sleep", "300"])
    p.terminate()
    p.wait()

def test_exits_within_the_grace():
    subprocess.Popen(["sh", "-c", "sleep 1 &"]).wait()

def test_multiprocessing_spawn():
    # starts multiprocessing's resource tracker, which serves the process until it exits
    import multiprocessing
    p = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    assert p.exitcode == 0

def test_daemon_left_running():
    # a double fork: re-parented to init, found by the session token in its environment
    subprocess.Popen(["sh", "-c", "exec setsid sleep 7773 </dev/null >/dev/null 2>&1 &"]).wait()

def test_child_left_running():
    test_child_left_running.proc = subprocess.Popen(["sleep", "7774"])
"""


def _run(tmp_path: Path, tests: str, *args: str,
         conftest: str = CONFTEST) -> subprocess.CompletedProcess[str]:
    """pytest on `tests` in a directory of its own, with our check (no pyproject options)."""
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_inner.py").write_text(tests)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir",
         str(tmp_path), "-c", os.devnull, *args, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def _alive(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_leaked_process_fails_the_session(tmp_path: Path, workers: list[str]) -> None:
    proc = _run(tmp_path, TESTS, *workers)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "5 passed" in out and "error" in out, out
    assert "outlived the tests that started them" in out, out
    for cmd, test, why in [("sleep 7773", "test_daemon_left_running", "session env"),
                           ("sleep 7774", "test_child_left_running", "descendant")]:
        line = next((ln for ln in out.splitlines() if ln.endswith(cmd)), None)
        assert line is not None and f"test_inner.py::{test}" in line and why in line, out
    assert "sleep 300" not in out and "sleep 1" not in out  # ended, or ending in the grace
    assert _alive("sleep 777[34]") == []  # the check killed them


def test_a_clean_session_passes(tmp_path: Path) -> None:
    clean = TESTS.split("def test_daemon_left_running")[0]
    proc = _run(tmp_path, clean)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "outlived" not in proc.stdout


NODE_CONFTEST = """\
from tests.conftest import (  # noqa: F401
    netns_lab, no_process_left_behind, pytest_runtest_protocol, ssh_nodes,
)
"""

NODE_TESTS = """\
def test_node_process_left_running(ssh_nodes):
    node = ssh_nodes(1)[0]
    # a clean environment, as an sshd session has: only the lab check can see it
    proc = node.exec_in_node(
        "env", "-i", "sh", "-c", "setsid sleep 7775 </dev/null >/dev/null 2>&1 &")
    assert proc.returncode == 0, proc.stderr
"""


def test_a_process_left_on_a_node_fails_the_session(tmp_path: Path) -> None:
    from tests import netns

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"sshd nodes unavailable: {reason}")
    proc = _run(tmp_path, NODE_TESTS, conftest=NODE_CONFTEST)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    line = next((ln for ln in out.splitlines() if ln.endswith("sleep 7775")), None)
    assert line is not None and "node lt" in line, out
    assert "test_inner.py::test_node_process_left_running" in line, out
    assert "sshd" not in out  # the node's own sshd is not a leftover
    assert _alive("sleep 7775") == []
