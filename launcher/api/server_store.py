"""The API server's tables in the state DB (part of its schema, launcher/state/schema.py):
users and their token hashes, who launched/cancelled/downed what,
and asynchronous requests.

Tokens: 256 random bits from `secrets`, shown once, stored only as their SHA-256
(a hash of a uniformly random 256-bit value needs no salt or slow KDF: nothing to
guess). Cheap to import: no FastAPI, usable by the plain CLI (`launcher users ...`
on the server's machine).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import LauncherError, UsageError
from launcher.state.db import StateDB

ROLES = ("admin", "user")
TOKEN_PREFIX = "lk_"
_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")

class UserNotFoundError(LauncherError):
    exit_code = 4


@dataclass(frozen=True)
class User:
    name: str
    role: str
    created_at: float
    rotated_at: float | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "role": self.role, "created_at": self.created_at,
                "rotated_at": self.rotated_at}


@dataclass(frozen=True)
class RequestRow:
    id: str
    user: str
    kind: str
    status: str  # RUNNING | SUCCEEDED | FAILED | CANCELLED
    created_at: float
    ended_at: float | None
    result: str | None  # JSON
    error: str | None  # JSON {"type", "message", "exit_code"}


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(f"Invalid user name {name!r}: use lowercase letters, digits, '_', "
                         "'.' and '-', starting with a letter, at most 63 characters.")
    return name


class ServerStore:
    """The server tables over one StateDB connection (not shared between threads)."""

    def __init__(self, path: Path | None = None) -> None:
        from launcher.jobs.store import JobStore

        JobStore(path).close()  # the one-time secrets scrub runs before any request
        self.db = StateDB(path)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ServerStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- users

    def users(self) -> list[User]:
        rows = self.db.query(
            "SELECT name, role, created_at, rotated_at FROM api_users ORDER BY created_at, name")
        return [User(r[0], r[1], float(r[2]), r[3]) for r in rows]

    def user(self, name: str) -> User:
        for u in self.users():
            if u.name == name:
                return u
        raise UserNotFoundError(f"No user named {name!r} (see `launcher users list`).")

    def create_user(self, name: str, role: str = "user", token: str | None = None) -> str:
        """Add a user; returns its token (the only time it exists in clear)."""
        validate_name(name)
        if role not in ROLES:
            raise UsageError(f"--role must be one of {', '.join(ROLES)}, got {role!r}.")
        token = token or new_token()
        with self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM api_users WHERE name = ?", (name,)).fetchone():
                raise UsageError(f"User {name!r} already exists; `launcher users rotate "
                                 f"{name}` gives it a new token.")
            conn.execute("INSERT INTO api_users (name, role, token_sha256, created_at)"
                         " VALUES (?, ?, ?, ?)", (name, role, token_hash(token), time.time()))
        return token

    def rotate(self, name: str) -> str:
        """A new token for `name`; the old one stops working at once."""
        token = new_token()
        with self.db.transaction() as conn:
            cur = conn.execute("UPDATE api_users SET token_sha256 = ?, rotated_at = ?"
                               " WHERE name = ?", (token_hash(token), time.time(), name))
            if cur.rowcount == 0:
                raise UserNotFoundError(f"No user named {name!r} (see `launcher users list`).")
        return token

    def delete_user(self, name: str) -> None:
        with self.db.transaction() as conn:
            if conn.execute("DELETE FROM api_users WHERE name = ?", (name,)).rowcount == 0:
                raise UserNotFoundError(f"No user named {name!r} (see `launcher users list`).")

    def authenticate(self, token: str) -> User | None:
        row = self.db.query_one(
            "SELECT name, role, created_at, rotated_at FROM api_users WHERE token_sha256 = ?",
            (token_hash(token),))
        return None if row is None else User(row[0], row[1], float(row[2]), row[3])

    def has_users(self) -> bool:
        return self.db.query_one("SELECT 1 FROM api_users LIMIT 1") is not None

    # -- owners and audit

    def record(self, user: str, action: str, target: str) -> None:
        """Append to the audit trail (launch, cancel, down, stop, start, autostop...)."""
        with self.db.transaction() as conn:
            conn.execute('INSERT INTO api_audit (at, "user", action, target) VALUES (?, ?, ?, ?)',
                         (time.time(), user, action, target))

    def audit(self) -> list[tuple[float, str, str, str]]:
        rows = self.db.query('SELECT at, "user", action, target FROM api_audit ORDER BY id')
        return [(float(r[0]), r[1], r[2], r[3]) for r in rows]

    def set_job_launcher(self, job_id: int, user: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE managed_jobs SET launched_by = ? WHERE id = ?", (user, job_id))

    def set_job_canceller(self, job_id: int, user: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE managed_jobs SET cancelled_by = ? WHERE id = ?", (user, job_id))

    def set_cluster_launcher(self, cluster: str, user: str) -> None:
        """Record who launched `cluster` (this incarnation of it: kept after `down`)."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE clusters SET launched_by = ? WHERE name = ?", (user, cluster))
            conn.execute(
                'INSERT INTO api_cluster_launches (cluster, launched_at, "user")'
                " SELECT name, launched_at, ? FROM clusters WHERE name = ?"
                ' ON CONFLICT (cluster, launched_at) DO UPDATE SET "user" = excluded."user"',
                (user, cluster))

    def cluster_launches(self) -> dict[str, list[tuple[float, str]]]:
        """Cluster name -> (launched_at, user) of each of its launches through the server,
        oldest first, including clusters since taken down."""
        out: dict[str, list[tuple[float, str]]] = {}
        for name, at, user in self.db.query(
                'SELECT cluster, launched_at, "user" FROM api_cluster_launches'
                " ORDER BY cluster, launched_at"):
            out.setdefault(name, []).append((float(at), user))
        return out

    def job_owners(self) -> dict[int, str | None]:
        rows = self.db.query("SELECT id, launched_by FROM managed_jobs")
        return {int(r[0]): r[1] for r in rows}

    def cluster_owners(self, jobs: dict[int, str | None] | None = None
                       ) -> dict[str, str | None]:
        """Cluster name -> the user it belongs to: who launched it, or for a managed
        job's cluster (owner `managed-job:<id>`) who launched that job (`jobs`: what
        `job_owners()` returned, when the caller has it)."""
        jobs = self.job_owners() if jobs is None else jobs
        out: dict[str, str | None] = {}
        for name, launched_by, owner in self.db.query(
                "SELECT name, launched_by, owner FROM clusters"):
            if launched_by is None and owner and owner.startswith("managed-job:"):
                tail = owner.split(":", 1)[1]
                launched_by = jobs.get(int(tail)) if tail.isdigit() else None
            out[name] = launched_by
        return out

    # -- requests

    def add_request(self, rid: str, user: str, kind: str, replica: str | None = None) -> None:
        """A RUNNING request, run by server replica `replica` (None: the only server)."""
        with self.db.transaction() as conn:
            conn.execute('INSERT INTO api_requests (id, "user", kind, status, created_at, '
                         "replica) VALUES (?, ?, ?, 'RUNNING', ?, ?)",
                         (rid, user, kind, time.time(), replica))

    def end_request(self, rid: str, status: str, result: str | None, error: str | None) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE api_requests SET status = ?, ended_at = ?, result = ?, error = ?"
                         " WHERE id = ? AND status = 'RUNNING'",
                         (status, time.time(), result, error, rid))

    def request(self, rid: str) -> RequestRow | None:
        r = self.db.query_one(
            'SELECT id, "user", kind, status, created_at, ended_at, result, error'
            " FROM api_requests WHERE id = ?", (rid,))
        return None if r is None else RequestRow(r[0], r[1], r[2], r[3], float(r[4]), r[5],
                                                 r[6], r[7])

    def interrupted_requests(self, heard_since: float | None = None) -> list[str]:
        """Requests still RUNNING in the DB (a server that died mid-request). With
        `heard_since` (replicas sharing the DB): only those of replicas not heard from
        since then, or of none; a live replica's requests are its own."""
        if heard_since is None:
            rows = self.db.query("SELECT id FROM api_requests WHERE status = 'RUNNING'")
        else:
            rows = self.db.query(
                "SELECT id FROM api_requests WHERE status = 'RUNNING' AND (replica IS NULL OR "
                "replica NOT IN (SELECT id FROM server_replicas WHERE heartbeat_at >= ?))",
                (heard_since,))
        return [r[0] for r in rows]
