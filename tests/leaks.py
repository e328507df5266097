"""The session-end check that no test leaves a process behind (tests/conftest.py runs it).

A test process (the pytest process, or each xdist worker) owns:
- its descendants;
- every process whose environment carries this session's token, `LAUNCHER_TEST_SESSION`
  (set in os.environ when the session starts): the daemons the product starts with
  `setsid` or a double fork are re-parented to init, but inherit the variable;
- every process inside the network namespaces of its netns lab (sshd sessions start
  with a clean environment), except each live node's own sshd listener.

At the end of the session, once every fixture is torn down, whatever it owns that is still
alive after a grace period (an ending `down` or agent may still be exiting) is a leak: the
session fails with one line per process (pid, the test that was running when it started,
its command line), and the leftovers are SIGKILLed. The lab's namespaces are checked just
before the lab kills what runs in them.

Linux only (/proc); a machine without /proc runs without the check.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
import uuid
from dataclasses import dataclass

TOKEN_VAR = "LAUNCHER_TEST_SESSION"
GRACE_S = 5.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start_s: float  # seconds since boot (CLOCK_BOOTTIME)
    cmdline: str
    why: str  # "descendant" | "session env" | "node NAME"


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(ppid, state, start time in s since boot) of `pid`, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0], int(fields[19]) / _TICKS


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    if not text:  # a kernel thread or an exec in progress
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
            text = f"[{f.read().strip()}]"
    return text[:300]


def _has_token(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in b"\0" + f.read()
    except OSError:  # gone, or not ours to read: not ours either way
        return False


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _now_s() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class ProcessWatch:
    """One test process's view of the processes it owns (see the module docstring)."""

    def __init__(self) -> None:
        self.enabled = os.path.isdir("/proc/self")
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.needle = f"\0{TOKEN_VAR}={self.token}\0".encode()
        self.me = os.getpid()
        self.tests: list[tuple[float, float, str]] = []  # (start s, end s, nodeid)
        # pid -> (start s, the test at whose end it was first seen; "" = before the session)
        self.first_seen: dict[int, tuple[float, str]] = {}
        self.lab_leftovers: list[Proc] = []
        self.baseline: set[int] = set()

    def start(self) -> None:
        """Mark this session: from now on every child inherits the token."""
        os.environ[TOKEN_VAR] = self.token
        if self.enabled:
            self.baseline = {p.pid for p in self.owned()}
            self._note_new_pids("")

    def test_started(self, nodeid: str) -> None:
        self.tests.append((_now_s(), float("inf"), nodeid))

    def test_ended(self) -> None:
        if self.tests:
            start, _, nodeid = self.tests[-1]
            self.tests[-1] = (start, _now_s(), nodeid)
            if self.enabled:
                self._note_new_pids(nodeid)

    def _note_new_pids(self, nodeid: str) -> None:
        """Remember which test's end first saw each pid (one /proc listing per test; only
        new pids are read), to name the test that started a leftover."""
        for pid in _pids():
            if pid not in self.first_seen and (st := _stat(pid)) is not None:
                self.first_seen[pid] = (st[2], nodeid)

    def started_during(self, proc: Proc) -> str:
        """The test that was running when `proc` started: the test at whose end it was
        first seen, else the one whose time span holds its start time (/proc counts it in
        clock ticks, rounded down: 10 ms)."""
        seen = self.first_seen.get(proc.pid)
        if seen is not None and seen[0] == proc.start_s and seen[1]:
            return seen[1]
        tick = 1.0 / _TICKS
        for slack in (0.0, tick):
            for t0, t1, nodeid in self.tests:
                if t0 - slack <= proc.start_s <= t1:
                    return nodeid
        return "no test (a session fixture's setup or teardown)"

    # ---- scans ---------------------------------------------------------------------

    @staticmethod
    def _multiprocessing_helpers() -> set[int]:
        """multiprocessing's resource tracker and forkserver: started on first use, they
        serve this process until it exits (shared, like a thread pool: not a leak)."""
        import sys

        pids = set()
        tracker = sys.modules.get("multiprocessing.resource_tracker")
        pids.add(getattr(getattr(tracker, "_resource_tracker", None), "_pid", None))
        forkserver = sys.modules.get("multiprocessing.forkserver")
        pids.add(getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None))
        return {pid for pid in pids if isinstance(pid, int)}

    def owned(self) -> list[Proc]:
        """Live (non-zombie) processes this test process owns, itself and multiprocessing's
        helpers excluded."""
        stats = {pid: st for pid in _pids() if (st := _stat(pid)) is not None}
        shared = self._multiprocessing_helpers()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        descendants: set[int] = set()
        todo = list(children.get(self.me, []))
        while todo:
            pid = todo.pop()
            descendants.add(pid)
            todo.extend(children.get(pid, []))
        out = []
        for pid, (ppid, state, start) in stats.items():
            if pid == self.me or state in ("Z", "X") or pid in self.baseline or pid in shared:
                continue
            if pid in descendants:
                why = "descendant"
            elif _has_token(pid, self.needle):
                why = "session env"
            else:
                continue
            out.append(Proc(pid, ppid, start, _cmdline(pid), why))
        return out

    def node_processes(self, namespaces: dict[str, set[int]]) -> list[Proc]:
        """Processes in the lab's namespaces (name -> pids allowed there: its sshd)."""
        from tests.netns import _netns_pids

        out = []
        for ns, allowed in namespaces.items():
            for pid in _netns_pids(ns):
                st = _stat(pid)
                if st is None or pid in allowed or st[1] in ("Z", "X"):
                    continue
                out.append(Proc(pid, st[0], st[2], _cmdline(pid), f"node {ns}"))
        return out

    # ---- waiting and reporting -----------------------------------------------------

    @staticmethod
    def wait_gone(procs: list[Proc], timeout: float) -> None:
        """Wait up to `timeout` s for these processes to exit (pidfds: no polling; a kernel
        without pidfd_open, before 5.3, is polled every 50 ms)."""
        fds = []
        unwatched = []
        for p in procs:
            try:
                fds.append(os.pidfd_open(p.pid))
            except ProcessLookupError:
                continue  # gone already
            except OSError:
                unwatched.append(p.pid)
        deadline = time.monotonic() + timeout
        while unwatched and time.monotonic() < deadline:
            unwatched = [pid for pid in unwatched if (st := _stat(pid)) and st[1] not in "ZX"]
            if unwatched:
                time.sleep(0.05)
        try:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            left = len(fds)
            while left and (remaining := deadline - time.monotonic()) > 0:
                for fd, _ in poller.poll(remaining * 1000):
                    poller.unregister(fd)
                    left -= 1
        finally:
            for fd in fds:
                os.close(fd)

    def check_lab(self, namespaces: dict[str, set[int]]) -> None:
        """Before the lab kills its nodes: note what runs there besides sshd."""
        if not self.enabled:
            return
        if self.tests and self.tests[-1][1] == float("inf"):
            self._note_new_pids(self.tests[-1][2])
        _close_cached_ssh()
        found = self.node_processes(namespaces)
        if found:
            self.wait_gone(found, GRACE_S)
            self.lab_leftovers += self.node_processes(namespaces)

    def leftovers(self) -> list[Proc]:
        """What this process still owns after a grace period, with the lab's leftovers."""
        if not self.enabled:
            return []
        if self.tests and self.tests[-1][1] == float("inf"):  # in the last test's teardown
            self._note_new_pids(self.tests[-1][2])
        found = self.owned()
        if found:
            self.wait_gone(found, GRACE_S)
            found = self.owned()
        return self.lab_leftovers + found

    def report(self, procs: list[Proc]) -> str:
        lines = [
            f"{len(procs)} process(es) outlived the tests that started them (they were "
            f"alive {GRACE_S:g} s after the session's last teardown; now killed):"
        ]
        for p in sorted(procs, key=lambda p: p.start_s):
            lines.append(
                f"  pid {p.pid} (ppid {p.ppid}, {p.why}), started during "
                f"{self.started_during(p)}: {p.cmdline}"
            )
        lines.append(
            "A test that starts a cluster, agent, controller or background process must stop "
            "it (`down`, close, terminate) before it ends."
        )
        return "\n".join(lines)

    @staticmethod
    def kill(procs: list[Proc]) -> None:
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGKILL)


WATCH = ProcessWatch()


def _close_cached_ssh() -> None:
    """Close this process's cached SSH connections (launcher/runtime/ssh_runner.py keeps
    a released one open `linger` s for the next runner): their sshd sessions on the nodes
    are the cache, not a leak, and would otherwise still be open when the lab is checked."""
    import sys

    runner = sys.modules.get("launcher.runtime.ssh_runner")
    if runner is not None:
        runner.close_all_connections()

