"""Other names users write for catalog accelerators (SkyPilot's spellings).

`data/accelerator_user_aliases.csv` maps a name a task may use (`A100-40GB`,
`MI300`) onto the name the catalog rows carry (`A100`, `MI300X`). It is read when
a task's accelerator names are resolved, never when the snapshot is built (the
build's own `accelerator_aliases.csv` renames source rows instead), so adding a
name here changes no catalog row. Stdlib only; the file is read once per process.
"""

from __future__ import annotations

import csv
import functools
import os


@functools.cache
def user_aliases() -> dict[str, str]:
    """name -> catalog name, as listed in the package data. Raises OSError if the
    package data is missing (a broken install)."""
    path = os.path.join(os.path.dirname(__file__), "data", "accelerator_user_aliases.csv")
    with open(path, encoding="utf-8", newline="") as fh:
        return {row["name"]: row["catalog_name"] for row in csv.DictReader(fh)}
