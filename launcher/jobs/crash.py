"""Crash-point injection for crash-safety tests.

`LAUNCHER_CONTROLLER_CRASH_AT=<point>[:<n>]` makes the controller process die
with `os._exit(137)` (what `kill -9` looks like to everyone else) the n-th time
(default: first) it reaches `<point>`. In-process tests swap the action for one
that raises `SimulatedCrash`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

ENV = "LAUNCHER_CONTROLLER_CRASH_AT"

# Every point the controller marks, in the order a job meets them.
POINTS = (
    "attempt_recorded",  # attempt row + cluster name written, nothing provisioned yet
    "provisioned",  # cluster up and job submitted, not yet recorded
    "running_recorded",  # attempt RUNNING and job RUNNING written
    "preemption_recorded",  # attempt marked preempted, job RECOVERING, old cluster not torn down
    "job_finished",  # the cluster job ended, nothing recorded yet
    "teardown_done",  # final teardown done, terminal status not written
    "replace_intent_recorded",  # in-place replacement recorded, nothing replaced yet
    "nodes_replaced",  # lost nodes replaced and gang resubmitted, not yet recorded
    "drain_ended",  # a drained (noticed) attempt marked ENDED, its cluster not torn down
    "cancel_attempts_ended",  # cancel: attempts ended and torn down, CANCELLED not written
    # the DEADLINE strategy (controller/deadline.py)
    "deadline_decided",  # a policy decision logged, not acted on yet
    "switch_intent_recorded",  # ON_DEMAND -> SPOT: the spot cluster's name written, nothing asked
    "switch_decided",  # the spot gang is set up; on-demand attempt SWITCHED, still up
    "switch_old_down",  # the on-demand cluster is down, the spot job not yet submitted
    "switch_attempt_recorded",  # the spot attempt's row written, not yet RUNNING
)


class SimulatedCrash(BaseException):
    """Raised by the in-process crash action (BaseException: no `except Exception` eats it)."""


def _die() -> None:
    os._exit(137)


class CrashPoints:
    def __init__(self, spec: str | None = None, action: Callable[[], None] = _die) -> None:
        spec = os.environ.get(ENV) if spec is None else spec
        self.point: str | None = None
        self.nth = 1
        if spec:
            name, _, n = spec.partition(":")
            if name not in POINTS:
                raise ValueError(f"{ENV}: unknown crash point {name!r}; known: {', '.join(POINTS)}")
            self.point = name
            self.nth = int(n) if n else 1
        self.action = action
        self._seen: Counter[str] = Counter()

    def hit(self, name: str) -> None:
        """Mark reaching `name`; dies there if configured to."""
        if self.point != name:
            return
        self._seen[name] += 1
        if self._seen[name] == self.nth:
            self.action()
