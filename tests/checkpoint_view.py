"""What a restore of a checkpoint store would see, read straight from a store fake: the
latest committed save of every writer (launcher/runtime/checkpoint_sync.py's manifests),
merged. For tests that look into S3/GCS/Blob fakes without running a restore."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from launcher.runtime import checkpoint_sync


def committed(keys: Iterable[str], read: Callable[[str], str], prefix: str) -> dict[str, str]:
    """REL -> content of the files a restore of `prefix` (a "directory": "run/t1/") would
    write, given the store's keys and a reader of one object's text. {} before the first
    committed save."""
    base = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    writers = checkpoint_sync.manifests_by_writer(list(keys), base)
    docs = [json.loads(read(checkpoint_sync.manifest_key(base, w, seqs[0])))
            for w, seqs in writers.items()]
    return {rel: read(base + e["key"]) for rel, e in checkpoint_sync.merge(docs).items()}


def committed_now(keys: Callable[[], list[str]], read: Callable[[str], str],
                  prefix: str, *, per_task: bool = False, tries: int = 5) -> dict[str, str]:
    """`committed` of a store that a running job keeps saving to: read again when a save
    collected what the listing showed (the read of a collected object fails).
    `per_task`: `prefix` is the store's root; the view is its one task's (see
    `task_prefixes`; {} before the first save)."""
    for attempt in range(tries):
        try:
            listing = keys()
            if not per_task:
                return committed(listing, read, prefix)
            tasks = sorted(task_prefixes(listing, prefix))
            assert len(tasks) <= 1, f"several task prefixes: {tasks}"
            return committed(listing, read, tasks[0]) if tasks else {}
        except AssertionError:
            raise
        except Exception:
            if attempt == tries - 1:
                raise
    return {}


def task_prefixes(keys: Iterable[str], root: str) -> set[str]:
    """The task-id prefixes (`root` + ID + "/") that hold committed saves."""
    out = set()
    for key in keys:
        rest = key[len(root):] if key.startswith(root) else ""
        task, sep, tail = rest.partition("/")
        if sep and tail.startswith(checkpoint_sync.MANIFESTS):
            out.add(f"{root}{task}/")
    return out
