"""SkyPilot's `pool:` section (worker pools), validated and planned as a plain task.

In SkyPilot a YAML with `pool: {workers: N}` defines a pool of N identical workers
(`sky jobs pool apply`), each with the file's `resources`, `setup` and mounts; managed
jobs are then sent to it (`sky jobs launch --pool`). launcher has no worker pools, so
a dry run or `cost` plans the file as one plain task (one worker's resources) with a
note, and every real launch is refused naming `pool` (`Task.check_values`).

`check_pool(value, origin) -> str` raises `TaskValidationError` for a malformed
section and returns the note. Stdlib only (task loading is on the `launcher gpus` path).
"""

from __future__ import annotations

from launcher.task.fields import Origin, check_keys, expect_int, expect_mapping

POOL_FIELDS = (
    "workers", "min_workers", "max_workers", "queue_length_threshold",
    "upscale_delay_seconds", "downscale_delay_seconds",
)  # fmt: skip
POOL_NOT_LAUNCHABLE = (
    "'pool' defines a SkyPilot worker pool (`sky jobs pool apply`), which launcher does not "
    "have: remove the 'pool' section to launch the file as a plain task."
)


def check_pool(value: object, origin: Origin) -> str:
    """Validate `pool:` (a mapping of counts); the note a dry run shows for it."""
    mapping = expect_mapping(value, ("pool",), origin, "a mapping such as {workers: 4}")
    check_keys(mapping, ("pool",), origin, POOL_FIELDS)
    for key in POOL_FIELDS:
        if mapping.get(key) is not None:
            expect_int(mapping[key], ("pool", key), origin, minimum=0)
    workers = mapping.get("workers")
    size = f"{workers} workers" if workers is not None else "workers"
    return (
        f"pool: SkyPilot worker pools are not supported here; the file is planned as a plain "
        f"task (the resources of one of the pool's {size}), and a launch is refused."
    )
