"""What a failed operation on a PostgreSQL state DB raises (re-exported by store.py).
Standard library only: cheap to import."""

from __future__ import annotations

from launcher.state.files import StateError


class StoreError(StateError):
    """A failed operation on a PostgreSQL state DB (its message names the URL, the
    password masked). SQLite failures stay sqlite3's own exceptions."""


class StoreUnavailableError(StoreError):
    """The database server cannot be reached, or the connection broke."""


class StoreIntegrityError(StoreError):
    """A constraint (unique, foreign key, check) refused a write."""
