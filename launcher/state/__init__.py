"""The state store: its interface (store), its engines (engine: SQLite or PostgreSQL), the
schema (schema) and its migrations (migrate, legacy), the cluster DB (db), the file at
rest (files) and storage errors (diskspace).

    db         The client-side state DB: clusters, their nodes, events and the cost ledger
    dburl      Which database the state DB is: the URL's source and its masking
    diskspace  Telling a full disk apart from other storage errors, for messages users can act on
    engine     The state DB's engines: the embedded SQLite file, or a PostgreSQL server
    errors     What a failed operation on a PostgreSQL state DB raises
    files      The state DB file at rest: a private home, damage detection and rotating backups
    legacy     DBs from before Alembic: the hand-written migration chains, run to their end
    logstore   Logs in the state DB, so every server replica on one PostgreSQL serves them
    locks      Per-cluster locks and the identity of the process holding a cluster
    migrate    Bringing a state DB's schema to this launcher's: Alembic, run programmatically
    node_state Each node's last reported state and health finding
    rows       What a state-store statement returns: rows by index and by column name
    schema     The state DB's tables as SQLAlchemy Core metadata
    sqlite_conn  The SQLite state DB on its hot path: the store's interface over plain sqlite3
    store      The state store's interface: how code outside launcher/state reaches the state DB

Every public name of launcher.state.db is importable from here too
(`from launcher.state import ...`), loaded on first use: importing one module of the
package does not load the others. Code inside launcher imports the module that
defines a name. A public name added to the main module is added to `__all__` and
the TYPE_CHECKING imports here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.state.db import ClusterEvent as ClusterEvent
    from launcher.state.db import ClusterLock as ClusterLock
    from launcher.state.db import ClusterRecord as ClusterRecord
    from launcher.state.db import ClusterStatus as ClusterStatus
    from launcher.state.db import InvalidClusterNameError as InvalidClusterNameError
    from launcher.state.db import NodeRecord as NodeRecord
    from launcher.state.db import PlacementRecord as PlacementRecord
    from launcher.state.db import StateDamagedError as StateDamagedError
    from launcher.state.db import StateDB as StateDB
    from launcher.state.db import StateError as StateError
    from launcher.state.db import UsageEntry as UsageEntry
    from launcher.state.db import acquire_cluster_lock as acquire_cluster_lock
    from launcher.state.db import cluster_lock as cluster_lock
    from launcher.state.db import launch_process_gone as launch_process_gone
    from launcher.state.db import launcher_home as launcher_home
    from launcher.state.db import launcher_process as launcher_process
    from launcher.state.db import validate_cluster_name as validate_cluster_name

__all__ = [
    "ClusterEvent",
    "ClusterLock",
    "ClusterRecord",
    "ClusterStatus",
    "InvalidClusterNameError",
    "NodeRecord",
    "PlacementRecord",
    "StateDB",
    "StateDamagedError",
    "StateError",
    "UsageEntry",
    "acquire_cluster_lock",
    "cluster_lock",
    "launch_process_gone",
    "launcher_home",
    "launcher_process",
    "validate_cluster_name",
]

# The package's modules: never looked up in db (the import system loads them).
_MODULES = frozenset({
    "db",
    "dburl",
    "diskspace",
    "engine",
    "errors",
    "files",
    "legacy",
    "logstore",
    "locks",
    "migrate",
    "migrations",
    "rows",
    "schema",
    "sqlite_conn",
    "store",
})


def __getattr__(name: str) -> Any:
    """A name of launcher.state.db, imported on first use."""
    if name.startswith("__") or name in _MODULES:
        raise AttributeError(name)
    module = importlib.import_module("launcher.state.db")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
