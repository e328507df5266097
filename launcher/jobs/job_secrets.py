"""Secret values of live managed jobs, kept out of the state DB.

A managed job may need its `secrets` again after a preemption (the controller
relaunches it), so their values are kept until the job ends, but never in a table
that `status` or `queue` read: `managed_jobs.task_yaml` holds the task with each
secret's value replaced by null, and the values live in one private file per job:

    $LAUNCHER_HOME/managed_jobs/secrets/<job id>.json     0600, {"NAME": "value", ...}

written when the job is submitted and deleted when it reaches any terminal status
(JobStore.transition), and by the controller's sweep for files a crash left behind.
On an API server's home (one with `server/secret.key`, made by `launcher api start`)
the file is encrypted with that key (Fernet, from `cryptography`): secrets users send
to a shared server are never on its disk in clear.
`home` below is the directory of the state DB (LAUNCHER_HOME for the real one).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from launcher.errors import LauncherError
from launcher.state import files as state_files
from launcher.state.store import Connection

SCRUB_COMPONENT = "job-secrets"  # a component chain in `schema_version` (see launcher/state/db.py)


def secrets_dir(home: Path) -> Path:
    return home / "managed_jobs" / "secrets"


def secrets_path(home: Path, job_id: int) -> Path:
    return secrets_dir(home) / f"{job_id}.json"


def server_key_path(home: Path) -> Path:
    """The API server's key (launcher/server/settings.py `key_path`)."""
    return home / "server" / "secret.key"


_FERNET_PREFIX = b"gAAAA"  # every Fernet token starts so (version byte 0x80, base64)


def _fernet(home: Path) -> object | None:
    try:
        key = server_key_path(home).read_bytes().strip()
    except FileNotFoundError:
        return None
    from cryptography.fernet import Fernet

    return Fernet(key)


def save(home: Path, job_id: int, values: Mapping[str, str]) -> None:
    """Write job `job_id`'s secret values (0600, atomic). No file for no secrets."""
    if not values:
        return
    d = secrets_dir(home)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = json.dumps(dict(values)).encode()
    box = _fernet(home)
    if box is not None:
        data = box.encrypt(data)  # type: ignore[attr-defined]
    state_files.write_private(secrets_path(home, job_id), data)


def load(home: Path, job_id: int) -> dict[str, str] | None:
    """The job's secret values; None when the job has no file (none, or gone)."""
    try:
        raw = secrets_path(home, job_id).read_bytes()
        if raw.startswith(_FERNET_PREFIX):
            box = _fernet(home)
            if box is None:
                raise ValueError(f"it is encrypted and the key {server_key_path(home)} is gone")
            raw = box.decrypt(raw)  # type: ignore[attr-defined]
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return None
    except Exception as exc:  # OSError, ValueError, cryptography's InvalidToken
        raise LauncherError(
            f"The secrets file of managed job {job_id} ({secrets_path(home, job_id)}) "
            f"cannot be read: {exc}"
        ) from exc
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise LauncherError(f"The secrets file of managed job {job_id} is malformed.")
    return data


def forget(home: Path, job_id: int) -> None:
    """Delete the job's secret values. Idempotent."""
    with contextlib.suppress(FileNotFoundError):
        secrets_path(home, job_id).unlink()


def forget_all_but(home: Path, live_ids: Iterable[int]) -> list[int]:
    """Delete the files of every job not in `live_ids` (ended, or never committed).
    Returns the ids whose files were deleted."""
    live = set(live_ids)
    gone = []
    try:
        entries = list(secrets_dir(home).iterdir())
    except FileNotFoundError:
        return []
    for p in entries:
        stem = p.name.removesuffix(".json")
        if p.suffix == ".json" and stem.isdigit() and int(stem) not in live:
            forget(home, int(stem))
            gone.append(int(stem))
    return gone


# ---- the one-time scrub of DBs written before secrets moved out ---------------------


def scrub_needed(conn: Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM schema_version WHERE component = ? AND version >= 1", (SCRUB_COMPONENT,)
    ).fetchone()
    return row is None


def scrub_task_yaml(conn: Connection, home: Path) -> int:
    """Inside a write transaction: move secret values found in `managed_jobs.task_yaml`
    (written by earlier versions) to per-job files for live jobs, drop them for ended
    ones, and record the scrub. Returns how many rows held values."""
    from launcher.jobs.state_machine import ManagedJobStatus

    changed = 0
    for job_id, status, text in conn.execute(
        "SELECT id, status, task_yaml FROM managed_jobs"
    ).fetchall():
        try:
            task = json.loads(text)
        except ValueError:
            continue
        secrets = task.get("secrets") if isinstance(task, dict) else None
        if not isinstance(secrets, dict):
            continue
        values = {k: v for k, v in secrets.items() if isinstance(v, str)}
        if not values:
            continue
        if not ManagedJobStatus(status).is_terminal:
            save(home, int(job_id), values)
        task["secrets"] = dict.fromkeys(secrets)
        conn.execute("UPDATE managed_jobs SET task_yaml = ? WHERE id = ?",
                     (json.dumps(task), job_id))
        changed += 1
    conn.execute(
        "INSERT INTO schema_version (component, version, description, applied_at)"
        " VALUES (?, 1, 'secret values moved out of managed_jobs.task_yaml', ?)"
        " ON CONFLICT DO NOTHING",
        (SCRUB_COMPONENT, time.time()),
    )
    return changed
