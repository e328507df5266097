"""A real PostgreSQL server for the state DB's tests on both engines.

One server per test session (per xdist worker): `initdb` into a fresh temp dir, run by
an unprivileged user when the tests run as root (PostgreSQL refuses root; `nobody`),
listening only on a Unix socket in that dir (no TCP port to collide with anything).
Each test gets a fresh database (`PgServer.new_database`), dropped after it.

Debian's `postgresql` package provides the binaries (/usr/lib/postgresql/<v>/bin; `.ci/run`
installs it); without them the PostgreSQL cases are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

SUPERUSER = "launcher"


def bin_dir() -> Path | None:
    """Where initdb/pg_ctl are: PATH, else the newest Debian versioned directory."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(Path(d).parent.name) if Path(d).parent.name.isdigit() else 0)
    for d in reversed(dirs):
        if (Path(d) / "initdb").exists():
            return Path(d)
    return None


class PgServer:
    """A throwaway PostgreSQL cluster; `stop()` removes it."""

    def __init__(self) -> None:
        bins = bin_dir()
        if bins is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bins = bins
        self.root = Path(tempfile.mkdtemp(prefix="launcher-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.sock.mkdir()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "nobody"
            ent = pwd.getpwnam(self.user)
            os.chmod(self.root, 0o755)
            for p in (self.root, self.sock):
                os.chown(p, ent.pw_uid, ent.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")
        self.log = self.root / "postgres.log"
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log),
                  "-o", f"-k {self.sock} -c listen_addresses='' -c fsync=off "
                        "-c full_page_writes=off -c max_connections=300")

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bins / tool), *args], capture_output=True, text=True,
                              user=self.user, cwd=self.root, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed: {proc.stdout}{proc.stderr}")
        return proc

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{database}?host={self.sock}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host=str(self.sock), user=SUPERUSER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def new_database(self) -> str:
        """Create an empty database; returns its URL."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = _dbname(url)
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def kick_connections(self, url: str) -> None:
        """Terminate every session on `url`'s database (the server "goes away" for them)."""
        name = _dbname(url)
        self.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")
        shutil.rmtree(self.root, ignore_errors=True)


def _dbname(url: str) -> str:
    return url.split("?", 1)[0].rsplit("/", 1)[1]
