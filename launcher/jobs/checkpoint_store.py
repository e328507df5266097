"""Which bucket prefix a managed job's checkpoint directory is synced with, and the
check, before anything is provisioned, that this machine may use it.

- `checkpoint_store_for(cloud, task, task_id)`: the prefix the nodes of an attempt on
  `cloud` sync with (the task's `checkpoint.store`, else the config's
  `jobs.checkpoint_store` for a task on a cloud whose nodes' disks do not outlive them).
- `stores_to_check(task)`: every store an attempt of `task` may use, with the field
  that set it; `require_store_access(task)` refuses one this machine has no working
  credentials for (storage_nodes.check_store_access / require_store_credentials).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.task.model import Task

# Clouds whose LAUNCHER_CHECKPOINT_DIR needs no default store: the local cloud's
# directory is on this machine; an SSH pool's hosts are the user's own (a pool may
# declare a shared `checkpoint_dir`).
DURABLE_CLOUDS = ("local", "ssh")
CONFIG_FIELD = "jobs.checkpoint_store (in ~/.launcher/config.yaml)"


def _jobs_settings() -> Any:
    try:
        from launcher.config.settings import load_config

        return getattr(load_config(), "jobs", None)
    except Exception:  # a broken config is reported by the launch itself
        return None


def checkpoint_store_for(cloud: str, task: Task | None, task_id: str,
                         warn: Callable[[str], None] | None = None
                         ) -> tuple[str | None, float | None]:
    """(the bucket prefix the nodes sync LAUNCHER_CHECKPOINT_DIR with, save interval s).

    The prefix is `<store>/<task id>` (the task id is stable across recoveries, so
    every attempt of a job reads and writes the same objects). The store is the
    task's `checkpoint.store` when it is s3://, gs:// or Azure Blob; else, for a task on
    a cloud outside DURABLE_CLOUDS that asks for a checkpoint without a store, the
    config's `jobs.checkpoint_store`; else None (node-local only: `warn` says it will
    not survive the loss of a node). Stores of other schemes are not synced yet
    (`warn` says so). The interval is the config's `jobs.checkpoint_save_interval`
    (None = the agent's default, 300 s).
    """
    if task is None or task.checkpoint is None:
        return None, None
    jobs_cfg = _jobs_settings()
    interval = getattr(jobs_cfg, "checkpoint_save_interval", None)
    store = task.checkpoint.store
    if store is None and cloud not in DURABLE_CLOUDS:
        store = getattr(jobs_cfg, "checkpoint_store", None)
        if store is None and warn is not None:
            warn("checkpoint: no store given and no `jobs.checkpoint_store` in the config: "
                 "LAUNCHER_CHECKPOINT_DIR stays on the nodes and is lost with them.")
    if store is None:
        return None, None
    from launcher.runtime.storage_nodes import store_of

    if store_of(store) is None:
        if warn is not None and cloud not in DURABLE_CLOUDS:
            warn(f"checkpoint: store {store} is not synced by the nodes yet (only s3://, "
                 "gs:// and Azure Blob are).")
        return None, None
    return f"{store.rstrip('/')}/{task_id}", interval


def stores_to_check(task: Task) -> list[tuple[str, str]]:
    """(store URI, the field that set it) of every synced store an attempt of `task`
    may use: its `checkpoint.store`, or the config's default when a candidate of the
    task may land outside DURABLE_CLOUDS. No I/O but the config file."""
    from launcher.runtime.storage_nodes import store_of

    if task.checkpoint is None:
        return []
    if task.checkpoint.store is not None:
        store = task.checkpoint.store
        return [(store, "checkpoint.store")] if store_of(store) else []
    default = getattr(_jobs_settings(), "checkpoint_store", None)
    if default is None or not store_of(default):
        return []
    clouds = {c.cloud for c in task.candidates()}
    if clouds and clouds <= set(DURABLE_CLOUDS):
        return []
    return [(default, CONFIG_FIELD)]


def require_store_access(task: Task, *, probe: bool = True) -> None:
    """Refuse (storage_nodes.StoreCredentialsError, naming the field) a task whose
    checkpoint store this machine has no credentials for, before any machine is paid
    for. `probe`: also make one read request proving they work (the submission of a
    job); without it, no network (the controller, which creates the bucket next)."""
    from launcher.runtime.storage_nodes import check_store_access, require_store_credentials

    for store, where in stores_to_check(task):
        if probe:
            check_store_access(store, where)
        else:
            require_store_credentials(store, where)
