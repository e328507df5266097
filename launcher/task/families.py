"""Accelerator names SkyPilot's catalog once used for a newer chip generation.

SkyPilot's AWS catalog named the inf2 chips `Inferentia` (its Neuron example asks for
`Inferentia:6`, which only inf2.24xlarge has); the catalog here, like SkyPilot's
current one, calls them `Inferentia2` and keeps `Inferentia` for inf1. So a request
`Inferentia:N` for a count no inf1 row has, but an inf2 row has, means that inf2 row:
`resolve_family_counts` renames it, with a note. A count inf1 has stays inf1.

Pure: the counts each name comes in are handed in (read from the catalog by planning).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from launcher.task.fields import format_path
from launcher.task.resources import AcceleratorChoice, AcceleratorRequest, format_number

if TYPE_CHECKING:
    from launcher.task.model import Task

# old name -> the name the catalog gives the newer generation SkyPilot once sold under it
FAMILY_SUCCESSORS = {"Inferentia": "Inferentia2"}


def family_names(task: Task) -> set[str]:
    """The successor names a task may need the counts of (empty for most tasks)."""
    names = {
        c.name
        for res in task.resources.all_written()
        if res.accelerators is not None
        for c in res.accelerators.choices
    }
    return {FAMILY_SUCCESSORS[n] for n in names if n in FAMILY_SUCCESSORS} | (
        names & set(FAMILY_SUCCESSORS)
    )


def resolve_family_counts(task: Task, counts_of: Callable[[str], Collection[float]]) -> Task:
    """`Inferentia:N` -> `Inferentia2:N` where only the newer generation comes in N per
    node (see the module doc), with a note naming the field. Returns `task` itself when
    nothing changes. `counts_of(name)` = the per-node counts the catalog has for name."""
    spec = task.resources
    notes: list[str] = []
    new_written = []
    for res in spec.all_written():
        req = res.accelerators
        if req is None or not any(c.name in FAMILY_SUCCESSORS for c in req.choices):
            new_written.append(res)
            continue
        choices = []
        for c in req.choices:
            newer = FAMILY_SUCCESSORS.get(c.name)
            if newer is not None and c.count not in counts_of(c.name) and c.count in counts_of(newer):
                notes.append(
                    f"{format_path((*res.path, 'accelerators'))}: {c} is read as "
                    f"{newer}:{format_number(c.count)} (SkyPilot's catalog once named the "
                    f"{newer} chips {c.name}; {c.name} itself has no {format_number(c.count)}-chip "
                    "instance)."
                )
                c = AcceleratorChoice(newer, c.count)
            choices.append(c)
        new_written.append(replace(res, accelerators=AcceleratorRequest(tuple(choices), req.ordered)))
    if not notes:
        return task
    new_spec = replace(spec, base=new_written[0], alternatives=tuple(new_written[1:]))
    return replace(task, resources=new_spec, notes=(*task.notes, *notes))
