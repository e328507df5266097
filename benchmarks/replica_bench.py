"""PostgreSQL and server replicas for the controller scale benchmark (`--db postgresql`,
`--replicas N`, `--kill-one-at S`).

- `database(url)`: the state DB on PostgreSQL: `url` as given, or a throwaway server
  started like the tests' (tests/pg.py: `initdb` into a temp dir, as `nobody` when run
  as root, a Unix socket only) and removed afterwards.
- `replica_homes`: one LAUNCHER_HOME per replica (a replica's controller lock, log and
  files are its own), all linking one `local` cloud directory, as real replicas share
  one real cloud.
- `LeaseWatch`: reads the leases in the jobs' rows (launcher/jobs/leases.py) while the
  run goes on: how the jobs split between the replicas, and after one is killed, when
  none of its jobs is still held by it (the survivors claimed them all: the takeover).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def database(url: str | None) -> Iterator[str]:
    """Yields the PostgreSQL URL to use: `url`, or a fresh database on a throwaway
    server (stopped and removed on exit)."""
    if url:
        yield url
        return
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.pg import PgServer

    server = PgServer()
    try:
        yield server.new_database()
    finally:
        server.stop()


def replica_homes(home: Path, n: int) -> list[Path]:
    """`n` replica homes under `home`, each with `local` linked to `home/local`."""
    (home / "local").mkdir(mode=0o700, exist_ok=True)
    out = []
    for k in range(n):
        h = home / f"replica-{k}"
        h.mkdir(mode=0o700, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.symlink(home / "local", h / "local")
        out.append(h)
    return out


@dataclass
class LeaseWatch:
    """Samples the jobs' leases (call `sample()` each tick of the benchmark)."""

    store: object  # a JobStore on the shared database
    pids: list[int]
    ids: dict[int, str] = field(default_factory=dict)  # pid -> replica id
    peak_held: dict[str, int] = field(default_factory=dict)  # replica id -> most jobs held
    held_at_kill: dict[str, int] = field(default_factory=dict)
    killed: str | None = None  # the killed replica's id
    killed_at: float | None = None  # epoch s
    orphans: int = 0  # live jobs the killed replica held when it died
    orphan_ids: set[int] = field(default_factory=set)
    takeover_s: float | None = None  # kill -> none of its live jobs held by it

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return [tuple(r) for r in self.store.rows(sql, params)]  # type: ignore[attr-defined]

    def sample(self) -> None:
        if len(self.ids) < len(self.pids):
            for rid, pid in self._rows("SELECT id, pid FROM server_replicas"):
                if int(pid) in self.pids:  # type: ignore[call-overload]
                    self.ids[int(pid)] = str(rid)  # type: ignore[call-overload]
        held = self.store.leases_by_holder()  # type: ignore[attr-defined]
        for rid, n in held.items():
            self.peak_held[rid] = max(self.peak_held.get(rid, 0), n)
        if self.killed is not None and self.takeover_s is None and not self._still_held():
            self.takeover_s = time.time() - (self.killed_at or 0.0)

    def _still_held(self) -> int:
        from launcher.jobs.state_machine import ManagedJobStatus

        terminal = ",".join(f"'{s.value}'" for s in ManagedJobStatus if s.is_terminal)
        rows = self._rows("SELECT COUNT(*) FROM managed_jobs WHERE lock_holder = ? AND "
                          f"status NOT IN ({terminal})", (self.killed,))
        return int(rows[0][0])  # type: ignore[call-overload]

    def kill_busiest(self) -> int:
        """`kill -9` the replica holding the most jobs now (the worst case; the first
        when none holds any) and start timing its takeover. Returns its index."""
        import signal

        self.sample()
        self.held_at_kill = dict(self.store.leases_by_holder())  # type: ignore[attr-defined]
        counts = [self.held_at_kill.get(self.ids.get(pid, ""), 0) for pid in self.pids]
        k = counts.index(max(counts))
        pid = self.pids[k]
        self.killed = self.ids.get(pid)
        os.kill(pid, signal.SIGKILL)
        self.killed_at = time.time()
        self.orphan_ids = {int(r[0]) for r in self._rows(  # type: ignore[call-overload]
            "SELECT id FROM managed_jobs WHERE lock_holder = ?", (self.killed,))}
        self.orphans = self._still_held() if self.killed else 0
        return k

    def name(self, rid: str) -> str:
        for k, pid in enumerate(self.pids):
            if self.ids.get(pid) == rid:
                return f"replica {k} (pid {pid})"
        return rid
