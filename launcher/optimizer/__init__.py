"""The optimizer: rank offers into placements, and the expected-cost model. Pure.

    expected_cost  The expected-cost model of spot placements (used by launcher.optimizer; pure)
    ranking        The optimizer: rank catalog offers into placements for a task. Pure: no I/O, no globals

Every public name of launcher.optimizer.ranking is importable from here too
(`from launcher.optimizer import ...`), loaded on first use: importing one module of the
package does not load the others. Code inside launcher imports the module that
defines a name. A public name added to the main module is added to `__all__` and
the TYPE_CHECKING imports here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.optimizer.ranking import (
        DEFAULT_RESTART_OVERHEAD_HOURS as DEFAULT_RESTART_OVERHEAD_HOURS,
    )
    from launcher.optimizer.ranking import DEFAULT_WORK_HOURS as DEFAULT_WORK_HOURS
    from launcher.optimizer.ranking import KIND_ACCELERATOR as KIND_ACCELERATOR
    from launcher.optimizer.ranking import KIND_BANDWIDTH as KIND_BANDWIDTH
    from launcher.optimizer.ranking import KIND_BLOCKED as KIND_BLOCKED
    from launcher.optimizer.ranking import KIND_COST as KIND_COST
    from launcher.optimizer.ranking import KIND_CPUS as KIND_CPUS
    from launcher.optimizer.ranking import KIND_FABRIC as KIND_FABRIC
    from launcher.optimizer.ranking import KIND_GANG as KIND_GANG
    from launcher.optimizer.ranking import KIND_INSTANCE_TYPE as KIND_INSTANCE_TYPE
    from launcher.optimizer.ranking import KIND_LOCATION as KIND_LOCATION
    from launcher.optimizer.ranking import KIND_MARKET as KIND_MARKET
    from launcher.optimizer.ranking import KIND_MEMORY as KIND_MEMORY
    from launcher.optimizer.ranking import LOCAL_CLOUD as LOCAL_CLOUD
    from launcher.optimizer.ranking import Blocked as Blocked
    from launcher.optimizer.ranking import Failure as Failure
    from launcher.optimizer.ranking import Place as Place
    from launcher.optimizer.ranking import Placement as Placement
    from launcher.optimizer.ranking import Ranking as Ranking
    from launcher.optimizer.ranking import RateSource as RateSource
    from launcher.optimizer.ranking import Rejection as Rejection
    from launcher.optimizer.ranking import Reorder as Reorder
    from launcher.optimizer.ranking import SpotCostModel as SpotCostModel
    from launcher.optimizer.ranking import TaskLike as TaskLike
    from launcher.optimizer.ranking import candidate_failures as candidate_failures
    from launcher.optimizer.ranking import count_serves as count_serves
    from launcher.optimizer.ranking import expected_cost_factor as expected_cost_factor
    from launcher.optimizer.ranking import failure_key as failure_key
    from launcher.optimizer.ranking import fmt_count as fmt_count
    from launcher.optimizer.ranking import rank as rank
    from launcher.optimizer.ranking import reordered_by_expected_cost as reordered_by_expected_cost

__all__ = [
    "DEFAULT_RESTART_OVERHEAD_HOURS",
    "DEFAULT_WORK_HOURS",
    "KIND_ACCELERATOR",
    "KIND_BANDWIDTH",
    "KIND_BLOCKED",
    "KIND_COST",
    "KIND_CPUS",
    "KIND_FABRIC",
    "KIND_GANG",
    "KIND_INSTANCE_TYPE",
    "KIND_LOCATION",
    "KIND_MARKET",
    "KIND_MEMORY",
    "LOCAL_CLOUD",
    "Blocked",
    "Failure",
    "Place",
    "Placement",
    "Ranking",
    "RateSource",
    "Rejection",
    "Reorder",
    "SpotCostModel",
    "TaskLike",
    "candidate_failures",
    "count_serves",
    "expected_cost_factor",
    "failure_key",
    "fmt_count",
    "rank",
    "reordered_by_expected_cost",
]

# The package's modules: never looked up in ranking (the import system loads them).
_MODULES = frozenset({
    "expected_cost",
    "ranking",
})


def __getattr__(name: str) -> Any:
    """A name of launcher.optimizer.ranking, imported on first use."""
    if name.startswith("__") or name in _MODULES:
        raise AttributeError(name)
    module = importlib.import_module("launcher.optimizer.ranking")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
