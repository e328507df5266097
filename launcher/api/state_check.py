"""`check_state()`: is the state DB usable, and where are its backups (for `launcher check`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StateHealth:
    path: str
    backups: list[str]  # newest first
    newest_backup_at: float | None  # epoch seconds


def check_state() -> StateHealth:
    """Open the state DB the way every command does (clusters and managed-jobs tables,
    with the integrity check). Blocking, short. Raises StateDamagedError (one paragraph
    on how to recover) or StateError."""
    from launcher.jobs.store import JobStore
    from launcher.state import files as state_files
    from launcher.state.db import StateDB

    with StateDB() as db:
        path = db.path
        db.check_integrity()  # whatever its size
    JobStore(path).close()
    backups = state_files.existing_backups(path)
    newest = backups[0].stat().st_mtime if backups else None
    return StateHealth(str(path), [str(p) for p in backups], newest)
