"""Command runners on a local node and on real sshd nodes in network namespaces.

The same contract tests run against `LocalRunner` and `SSHRunner`; the SSH
failure tests kill a node's processes or cut its network for real.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.clouds.base import ClusterInfo, NodeInfo
from launcher.errors import LauncherError
from launcher.runtime.local_runner import LocalRunner
from launcher.runtime.node_runner import runner_for
from launcher.runtime.runner import (
    CommandFailedError,
    CommandRunner,
    CommandTimeoutError,
    NodeUnreachableError,
)
from tests.netns import SSHNodeSet


@pytest.fixture(scope="module")
def shared_nodes(ssh_nodes: Callable[[int], SSHNodeSet]) -> Iterator[SSHNodeSet]:
    nodes = ssh_nodes(2)
    yield nodes
    nodes.close()


@pytest.fixture(params=["local", "ssh"])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CommandRunner]:
    if request.param == "local":
        home = tmp_path / "node-home"
        home.mkdir()
        node = NodeInfo(rank=0, node_id="c-0", internal_ip="127.0.0.1", local_root=str(home))
        cluster = ClusterInfo("c", "local", "local", None, "local", False, (node,))
    else:
        nodes: SSHNodeSet = request.getfixturevalue("shared_nodes")
        cluster = nodes.cluster_info("c")
        node = cluster.nodes[0]
    r = runner_for(cluster, node)
    r.run("rm -rf ~/t && mkdir -p ~/t").check()
    yield r
    r.close()


def _file_mode(r: CommandRunner, path: str) -> str:
    return r.run(f"stat -c %a {path}").check().stdout.strip()


# ---- the contract, on both runners ---------------------------------------------------


def test_run_returns_output_exit_code_and_runs_in_home(runner: CommandRunner) -> None:
    res = runner.run('echo out; echo err >&2; [ "$(pwd)" = "$HOME" ] && echo in-home; exit 3')
    assert res.returncode == 3
    assert res.stdout == "out\nin-home\n"
    assert res.stderr == "err\n"
    with pytest.raises(CommandFailedError, match="exit code 3:\nerr"):
        res.check()


def test_runner_for_picks_the_runner_by_node(runner: CommandRunner) -> None:
    expected = "LocalRunner" if runner.node.ssh_user is None else "SSHRunner"
    assert type(runner).__name__ == expected


def test_output_streams_line_by_line_as_it_comes(runner: CommandRunner) -> None:
    seen: list[tuple[str, float]] = []
    start = time.monotonic()
    res = runner.run(
        "echo first; echo to-stderr >&2; sleep 0.6; printf 'last-no-newline'",
        on_output=lambda line: seen.append((line, time.monotonic() - start)),
    )
    lines = [line for line, _ in seen]
    assert lines == ["first", "to-stderr", "last-no-newline"]
    # the first line was delivered while the command was still sleeping
    assert seen[0][1] < seen[-1][1] - 0.4
    assert res.stdout == "first\nlast-no-newline"


def test_env_values_arrive_verbatim(runner: CommandRunner) -> None:
    tricky = {"PLAIN": "x", "QUOTES": 'it\'s "q" $HOME `id` \\', "MULTI": "a\nb  c"}
    res = runner.run('printf "%s|%s|%s" "$PLAIN" "$QUOTES" "$MULTI"', env=tricky)
    assert res.stdout == 'x|it\'s "q" $HOME `id` \\|a\nb  c'


def test_bad_env_name_is_refused(runner: CommandRunner) -> None:
    with pytest.raises(LauncherError, match="Invalid environment variable name"):
        runner.run("true", env={"BAD-NAME": "1"})


def test_stdin_is_fed_and_defaults_to_empty(runner: CommandRunner) -> None:
    assert runner.run("cat", stdin="line1\nline2\n").stdout == "line1\nline2\n"
    assert runner.run("cat | wc -c", timeout=10).stdout.strip() == "0"  # no stdin: EOF at once


def test_large_stdin_and_output_do_not_deadlock(runner: CommandRunner) -> None:
    data = "x" * 1023 + "\n"
    big = data * 4096  # 4 MiB through stdin, echoed back while still being sent
    res = runner.run("cat", stdin=big, timeout=60)
    assert len(res.stdout) == len(big) and res.stdout == big


def test_cwd_relative_and_tilde_paths(runner: CommandRunner) -> None:
    runner.run("mkdir -p t/sub").check()
    assert runner.run("pwd", cwd="t/sub").stdout.strip().endswith("/t/sub")
    assert runner.run("pwd", cwd="~/t").stdout.strip().endswith("/t")
    assert runner.run("true", cwd="t/missing").returncode != 0


def test_timeout_kills_the_whole_process_group(runner: CommandRunner) -> None:
    start = time.monotonic()
    with pytest.raises(CommandTimeoutError) as info:
        runner.run("echo started; sleep 60 & echo $! > ~/t/bg.pid; wait", timeout=0.8)
    elapsed = time.monotonic() - start
    assert 0.7 < elapsed < 5
    assert "started" in info.value.stdout
    # the background child of the timed-out command is gone too
    deadline = time.monotonic() + 5
    while True:
        # running = exists and not a zombie (an orphan's zombie may linger)
        alive = runner.run(
            "s=$(cut -d' ' -f3 /proc/$(cat ~/t/bg.pid)/stat 2>/dev/null); "
            '[ -n "$s" ] && [ "$s" != Z ]'
        ).ok
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not alive


def test_a_background_process_holding_the_output_does_not_hang_run(
    runner: CommandRunner,
) -> None:
    start = time.monotonic()
    res = runner.run("sleep 30 & echo $! > ~/t/held.pid; echo done")
    assert res.returncode == 0 and res.stdout.startswith("done")
    assert time.monotonic() - start < 3
    runner.run("kill $(cat ~/t/held.pid)")


def test_put_text_and_put_file_with_modes(runner: CommandRunner, tmp_path: Path) -> None:
    from launcher.runtime.local_runner import LocalRunner

    # a local node's home lives under the private LAUNCHER_HOME: group/other bits dropped
    private = isinstance(runner, LocalRunner)

    def expect(mode: int) -> str:
        return format(mode & ~0o077 if private else mode, "o")

    runner.put_text("secret\n", "~/t/deep/dir/key", mode=0o600)
    assert runner.run("cat ~/t/deep/dir/key").stdout == "secret\n"
    assert _file_mode(runner, "~/t/deep/dir/key") == "600"
    runner.put_text("v2", "t/deep/dir/key", mode=0o640)  # relative = from home; overwrites
    assert runner.run("cat t/deep/dir/key").stdout == "v2"
    assert _file_mode(runner, "t/deep/dir/key") == expect(0o640)
    script = tmp_path / "tool.sh"
    script.write_bytes(b"#!/bin/sh\necho tool \xe2\x9c\x93\n")
    script.chmod(0o750)
    runner.put_file(str(script), "~/t/bin/tool.sh")
    assert _file_mode(runner, "~/t/bin/tool.sh") == expect(0o750)  # the local mode by default
    assert runner.run("~/t/bin/tool.sh").stdout == "tool \u2713\n"
    runner.put_file(str(script), "~/t/bin/tool2.sh", mode=0o600)
    assert _file_mode(runner, "~/t/bin/tool2.sh") == "600"
    leftovers = runner.run("ls -a ~/t/bin ~/t/deep/dir").stdout
    assert "launcher-tmp" not in leftovers and ".launcher-put" not in leftovers


def test_sync_dir_honours_gitignore_and_skips_git(runner: CommandRunner, tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg" / "build").mkdir(parents=True)
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    (src / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n")
    (src / "main.py").write_text("print('hi')\n")
    (src / "debug.log").write_text("noise")
    (src / "keep.log").write_text("kept")
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "pkg" / "build" / "out.o").write_text("obj")
    (src / "pkg" / ".gitignore").write_text("secret.txt\n")
    (src / "pkg" / "secret.txt").write_text("s")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    os.symlink("main.py", src / "link.py")
    runner.sync_dir(str(src), "~/t/work")
    listing = runner.run("cd ~/t/work && find . -mindepth 1 | sort").stdout.split()
    assert listing == [
        "./.gitignore",
        "./keep.log",
        "./link.py",
        "./main.py",
        "./pkg",
        "./pkg/.gitignore",
        "./pkg/mod.py",
        "./run.sh",
    ]
    assert runner.run("~/t/work/run.sh").stdout == "ran\n"
    assert runner.run("readlink ~/t/work/link.py").stdout.strip() == "main.py"
    # re-sync with a change, and without gitignore: ignored files come along, .git never
    (src / "main.py").write_text("print('v2')\n")
    runner.sync_dir(str(src), "t/work", respect_gitignore=False)
    assert runner.run("cat t/work/main.py").stdout == "print('v2')\n"
    assert runner.run("test -f t/work/debug.log && test -f t/work/pkg/secret.txt").ok
    assert not runner.run("test -e t/work/.git").ok


def test_sync_dir_of_a_git_repo_uses_git(runner: CommandRunner, tmp_path: Path) -> None:
    src = tmp_path / "repo"
    src.mkdir()
    git = ["git", "-C", str(src), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (src / ".gitignore").write_text("*.tmp\n")
    (src / "tracked.tmp").write_text("tracked despite the ignore rule")
    (src / "new.py").write_text("untracked, not ignored")
    (src / "junk.tmp").write_text("ignored")
    subprocess.run([*git, "add", "-f", "tracked.tmp", ".gitignore"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    runner.sync_dir(str(src), "~/t/repo")
    listing = runner.run("cd ~/t/repo && find . -mindepth 1 | sort").stdout.split()
    assert listing == ["./.gitignore", "./new.py", "./tracked.tmp"]


# ---- local specifics -----------------------------------------------------------------


def test_local_runner_with_a_missing_home_is_unreachable(tmp_path: Path) -> None:
    node = NodeInfo(0, "gone-0", "127.0.0.1", local_root=str(tmp_path / "deleted"))
    with pytest.raises(NodeUnreachableError, match="does not exist"):
        LocalRunner(node).run("true")


def test_local_runner_kills_the_command_when_the_caller_fails(tmp_path: Path) -> None:
    node = NodeInfo(0, "c-0", "127.0.0.1", local_root=str(tmp_path))

    def explode(line: str) -> None:
        raise RuntimeError("caller gave up")

    with pytest.raises(RuntimeError, match="caller gave up"):
        LocalRunner(node).run("echo $$ > pid; echo go; exec sleep 60", on_output=explode)
    pid = int((tmp_path / "pid").read_text())
    assert not _running(pid)  # killed before run() raised


def _running(pid: int) -> bool:
    """Exists and is not a zombie (a killed orphan may linger as one)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---- SSH specifics -------------------------------------------------------------------


def test_ssh_sets_tcp_nodelay_and_reuses_one_connection(shared_nodes: SSHNodeSet) -> None:
    from launcher.runtime.ssh_runner import SSHRunner, close_all_connections

    cluster = shared_nodes.cluster_info("reuse")
    a = runner_for(cluster, cluster.nodes[1])
    b = runner_for(cluster, cluster.nodes[1])
    assert isinstance(a, SSHRunner) and isinstance(b, SSHRunner)
    a.run("true")
    b.run("true")
    assert a._conn is not None and a._conn is b._conn  # one connection for both
    sock = a._conn.transport.sock
    assert isinstance(sock, socket.socket)
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    transport = a._conn.transport
    a.run("true")
    assert a._conn.transport is transport  # reused across calls
    a.close()
    b.close()
    assert transport.is_active()  # lingers for the next runner of this node
    c = runner_for(cluster, cluster.nodes[1])
    c.run("true")
    assert isinstance(c, SSHRunner) and c._conn is not None and c._conn.transport is transport
    c.close()
    close_all_connections()
    assert not transport.is_active()


def test_ssh_connection_without_linger_closes_with_its_last_holder(
    shared_nodes: SSHNodeSet,
) -> None:
    from launcher.runtime.ssh_runner import SSHOptions, SSHRunner

    node = shared_nodes[0].node_info(0)
    a = SSHRunner(node, key_path=shared_nodes.client_key_path, options=SSHOptions(linger=0))
    b = SSHRunner(node, key_path=shared_nodes.client_key_path, options=SSHOptions(linger=0))
    a.run("true")
    b.run("true")
    assert a._conn is not None
    transport = a._conn.transport
    a.close()
    assert transport.is_active()  # b still holds it
    b.close()
    assert not transport.is_active()


def test_ssh_exec_round_trip_on_an_open_connection(shared_nodes: SSHNodeSet) -> None:
    cluster = shared_nodes.cluster_info("rt")
    r = runner_for(cluster, cluster.nodes[0])
    start = time.perf_counter()
    r.run("true")
    first = time.perf_counter() - start
    samples = []
    for _ in range(30):
        t = time.perf_counter()
        r.run("true")
        samples.append(time.perf_counter() - t)
    r.close()
    median = statistics.median(samples)
    print(
        f"\nSSH connect+auth+exec {first * 1000:.1f} ms; exec on open connection: "
        f"median {median * 1000:.2f} ms, min {min(samples) * 1000:.2f} ms"
    )
    # A loose bound: a shared CI box can be very loaded. TCP_NODELAY itself is checked in
    # test_ssh_sets_tcp_nodelay_and_reuses_one_connection; quiet-machine figures are in
    # docs/ssh-pools.md.
    assert median < 0.25


def test_ssh_hostnames_and_homes_are_per_node(shared_nodes: SSHNodeSet) -> None:
    cluster = shared_nodes.cluster_info("homes")
    r0, r1 = (runner_for(cluster, n) for n in cluster.nodes)
    r0.put_text("only on node 0", "~/t/marker")
    assert r0.run("hostname").stdout.strip() != r1.run("hostname").stdout.strip()
    assert not r1.run("test -e ~/t/marker").ok
    assert (shared_nodes[0].home / "t" / "marker").read_text() == "only on node 0"


def test_ssh_refuses_a_host_key_other_than_the_pinned_one(shared_nodes: SSHNodeSet) -> None:
    from launcher.runtime.ssh_runner import HostKeyMismatchError, SSHRunner

    n0, n1 = shared_nodes[0], shared_nodes[1]
    wrong = NodeInfo(0, "n0", n0.host, ssh_user="root", ssh_host_key=n1.host_key)
    with pytest.raises(HostKeyMismatchError, match=r"does not match.*ssh-keyscan -p \d+ "):
        SSHRunner(wrong, key_path=shared_nodes.client_key_path).run("true")
    unpinned = NodeInfo(0, "n0", n0.host, ssh_user="root", ssh_host_key=None)
    with pytest.raises(HostKeyMismatchError, match="No host key is pinned"):
        SSHRunner(unpinned, key_path=shared_nodes.client_key_path).run("true")


def test_ssh_wrong_client_key_is_unreachable_with_reason(
    shared_nodes: SSHNodeSet, tmp_path: Path
) -> None:
    from launcher.runtime.keys import generate_keypair

    other = generate_keypair(tmp_path / "other_key")
    cluster = shared_nodes.cluster_info("badkey")
    cluster = ClusterInfo(**{**cluster.__dict__, "ssh_key_path": other.private_path})
    with pytest.raises(NodeUnreachableError, match="authentication") as ei:
        runner_for(cluster, cluster.nodes[0]).run("true")
    assert f"Add the line of {other.private_path}.pub to ~root/.ssh/authorized_keys" in str(ei.value)


def test_scan_host_key_learns_what_the_node_presents(shared_nodes: SSHNodeSet) -> None:
    from launcher.runtime.ssh_runner import scan_host_key

    node = shared_nodes[1]
    assert scan_host_key(node.host, node.port, timeout=5) == node.host_key


def _fast_runner(nodes: SSHNodeSet, index: int) -> CommandRunner:
    from launcher.runtime.ssh_runner import SSHOptions, SSHRunner

    opts = SSHOptions(
        connect_timeout=2,
        channel_open_timeout=1,
        probe_after=1.0,
        probe_timeout=1.0,
        keepalive_interval=1,
    )
    node = nodes[index].node_info(index)
    return SSHRunner(node, key_path=nodes.client_key_path, options=opts)


def test_node_killed_mid_command_raises_unreachable_within_seconds(
    ssh_nodes: Callable[[int], SSHNodeSet],
) -> None:
    nodes = ssh_nodes(1)
    try:
        r = _fast_runner(nodes, 0)
        r.run("true").check()
        killer = threading.Timer(0.5, nodes[0].kill)
        killer.start()
        start = time.monotonic()
        with pytest.raises(NodeUnreachableError, match="Lost the connection"):
            r.run("echo running; sleep 60")
        assert time.monotonic() - start < 3
        start = time.monotonic()
        with pytest.raises(NodeUnreachableError):
            r.run("true")  # the next call fails fast too (no cached dead connection)
        assert time.monotonic() - start < 3
    finally:
        nodes.close()


def test_network_cut_mid_command_raises_instead_of_hanging(
    ssh_nodes: Callable[[int], SSHNodeSet],
) -> None:
    nodes = ssh_nodes(1)
    try:
        r = _fast_runner(nodes, 0)
        r.run("true").check()
        threading.Timer(0.3, nodes[0].cut_network).start()
        start = time.monotonic()
        # no timeout given: only the keepalive probe can notice the silence
        with pytest.raises(NodeUnreachableError, match="no answer to a keepalive"):
            r.run("sleep 60")
        assert time.monotonic() - start < 6
        # a new connection attempt times out at connect_timeout, it does not hang
        start = time.monotonic()
        with pytest.raises(NodeUnreachableError, match="no answer within"):
            r.run("true")
        assert time.monotonic() - start < 5
    finally:
        nodes.close()


def test_network_cut_before_a_command_on_an_open_connection(
    ssh_nodes: Callable[[int], SSHNodeSet],
) -> None:
    nodes = ssh_nodes(1)
    try:
        r = _fast_runner(nodes, 0)
        r.run("true").check()
        nodes[0].cut_network()
        start = time.monotonic()
        with pytest.raises(NodeUnreachableError):
            r.run("echo hi", timeout=1)
        # channel open times out (1 s), then a fresh connect times out (2 s)
        assert time.monotonic() - start < 5
        nodes[0].restore_network()
        assert r.run("echo back").stdout == "back\n"  # reconnects once the network is back
    finally:
        nodes.close()
