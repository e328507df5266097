"""Server replicas sharing the managed jobs of one PostgreSQL database, by leases.

No elected leader: each job is worked on by one replica at a time under a lease in its
row (`lock_holder`, `lock_token`, `lock_expires_at`, by the database's clock). A
replica's controller (`Leases.refresh`, called every scan):

- renews the leases it holds (the heartbeat, every RENEW_S) and learns which it lost;
- claims due jobs in a batch of at most CLAIM_BATCH (never leased, or the holder let the
  lease expire: killed, paused, cut off from the DB), every CLAIM_S, `FOR UPDATE SKIP
  LOCKED`, so replicas claiming at once split the work. A replica claims no more than
  its fair share (the live jobs over the replicas heard from within a lease lifetime,
  less what it holds), so the jobs split evenly at any number of them, and a dead
  replica's share falls to the survivors once it is no longer heard from. Claims come
  more often than renewals so that a dead replica's jobs are all taken soon after its
  leases expire (1,000 jobs: two claims);
- works only on the jobs it holds; a driver of a job it lost is stopped.

Every write the controller makes on a job checks the job's lease in the same
transaction (JobStore's fence): a replica that lost a lease (paused past it, then
resumed) can change nothing of that job. A relaunch by the new holder is safe: attempt
rows and the provisioning idempotency tokens make it pick up what the old one began.

With the embedded SQLite file there is one server: no leases (`enabled()` is False).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from launcher.jobs.store import Fence, JobStore
from launcher.state import store as state_store

log = logging.getLogger("launcher.jobs.leases")

LEASE_TTL_S = float(os.environ.get("LAUNCHER_LEASE_TTL_S", "") or 8.0)
RENEW_S = LEASE_TTL_S / 4
CLAIM_S = min(RENEW_S, 0.5)
STARTUP_CLAIM_DELAY_S = 1.0
CLAIM_BATCH = int(os.environ.get("LAUNCHER_LEASE_CLAIM_BATCH", "") or 500)


def enabled() -> bool:
    """Leases are used when the state DB is a database server (replicas may share it)."""
    return state_store.configured_url() is not None


def new_replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# This process's identity among the replicas (its leases, the requests it runs).
REPLICA_ID = new_replica_id()


class Leases:
    """One controller's leases over `store` (sets the store's fence)."""

    def __init__(self, job_store: JobStore, replica_id: str | None = None,
                 ttl_s: float | None = None) -> None:
        self.store = job_store
        self.replica_id = replica_id or new_replica_id()
        self.ttl_s = ttl_s or LEASE_TTL_S
        self.fence = Fence(self.replica_id, {})
        job_store.fence = self.fence
        self._next_renew = 0.0
        # The first claim waits a little, so replicas started together hear of each
        # other first and split the jobs already there (a forced refresh claims at once).
        self._next_claim = time.monotonic() + STARTUP_CLAIM_DELAY_S
        self._register()

    def _register(self) -> None:
        host, pid = socket.gethostname(), os.getpid()
        now = time.time()
        with self.store.write() as c:
            c.execute("INSERT INTO server_replicas (id, host, pid, started_at, heartbeat_at) "
                      "VALUES (?, ?, ?, ?, ?)", (self.replica_id, host, pid, now, now))

    def held(self) -> set[int]:
        return set(self.fence.tokens)

    def refresh(self, force: bool = False) -> set[int]:
        """Renew (every quarter lease), then claim (every CLAIM_S); both now if `force`.
        Returns the jobs held."""
        now = time.monotonic()
        if force or now >= self._next_renew:
            self._next_renew = now + self.ttl_s / 4
            kept = self.store.renew_leases(self.replica_id, self.fence.tokens, self.ttl_s)
            for job_id in set(self.fence.tokens) - kept:
                log.warning("job %d: lease lost (another replica holds it now)", job_id)
                del self.fence.tokens[job_id]
            with self.store.write() as c:
                c.execute("UPDATE server_replicas SET heartbeat_at = ? WHERE id = ?",
                          (time.time(), self.replica_id))
        if force or now >= self._next_claim:
            self._next_claim = now + min(CLAIM_S, self.ttl_s / 4)
            limit = min(CLAIM_BATCH, self._fair_share() - len(self.fence.tokens))
            claimed = self.store.claim_jobs(self.replica_id, self.ttl_s, limit) \
                if limit > 0 else {}
            for job_id in claimed:
                log.info("job %d: leased by replica %s", job_id, self.replica_id)
            self.fence.tokens.update(claimed)
        return self.held()

    def _fair_share(self) -> int:
        """The live jobs over the replicas heard from within a lease lifetime (this one
        included), rounded up."""
        live = len(self.store.live_job_ids())
        rows = self.store.rows("SELECT COUNT(*) FROM server_replicas WHERE heartbeat_at >= ? "
                               "OR id = ?", (time.time() - self.ttl_s, self.replica_id))
        return -(-live // max(1, int(rows[0][0])))

    def close(self) -> None:
        """Give the leases back and leave the replica list (a clean shutdown)."""
        self.store.release_leases(self.replica_id)
        with self.store.write() as c:
            c.execute("DELETE FROM server_replicas WHERE id = ?", (self.replica_id,))
        self.fence.tokens.clear()


def replicas(job_store: JobStore, stale_s: float | None = None) -> list[dict[str, object]]:
    """The replicas heard from within `stale_s` (default 3 lease lifetimes), each with
    how many jobs it holds, for `launcher api status`."""
    stale_s = stale_s or 3 * LEASE_TTL_S
    held = job_store.leases_by_holder()
    rows = job_store.rows("SELECT id, host, pid, started_at, heartbeat_at FROM server_replicas "
                          "WHERE heartbeat_at >= ? ORDER BY started_at", (time.time() - stale_s,))
    return [{"id": r[0], "host": r[1], "pid": int(r[2]), "started_at": float(r[3]),
             "heartbeat_at": float(r[4]), "jobs": held.get(str(r[0]), 0)} for r in rows]
