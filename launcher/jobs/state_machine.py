"""The managed-job state machine: statuses and the transitions allowed between them.

    PENDING -> STARTING -> RUNNING -> (RECOVERING -> RUNNING)* ->
        SUCCEEDED | FAILED | FAILED_SETUP | FAILED_NO_RESOURCE | CANCELLED

`check_transition` is pure; the store calls it before writing a transition and
its event row in one SQL transaction, so an illegal transition never reaches the DB.
"""

from __future__ import annotations

import enum

from launcher.errors import LauncherError


class ManagedJobStatus(enum.StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_NO_RESOURCE = "FAILED_NO_RESOURCE"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL

    @property
    def is_failure(self) -> bool:
        return self in (
            ManagedJobStatus.FAILED,
            ManagedJobStatus.FAILED_SETUP,
            ManagedJobStatus.FAILED_NO_RESOURCE,
        )


S = ManagedJobStatus

TERMINAL: frozenset[ManagedJobStatus] = frozenset(
    {S.SUCCEEDED, S.FAILED, S.FAILED_SETUP, S.FAILED_NO_RESOURCE, S.CANCELLED}
)

# Every job may be cancelled or fail from any live state; the rest is the chain above.
# RUNNING -> STARTING does not exist: a restart after a user-code error goes
# through RECOVERING (with the reason saying it was an error, not a preemption).
_ALLOWED: dict[ManagedJobStatus, frozenset[ManagedJobStatus]] = {
    S.PENDING: frozenset({S.STARTING, S.CANCELLED, S.FAILED}),
    S.STARTING: frozenset(
        {S.RUNNING, S.RECOVERING, S.FAILED, S.FAILED_SETUP, S.FAILED_NO_RESOURCE, S.CANCELLED}
    ),
    S.RUNNING: frozenset({S.RECOVERING, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.RECOVERING: frozenset(
        {S.RUNNING, S.FAILED, S.FAILED_SETUP, S.FAILED_NO_RESOURCE, S.CANCELLED}
    ),
}


class IllegalTransitionError(LauncherError):
    """A transition the state machine does not allow (a controller bug, never user input)."""

    def __init__(self, job_id: int, current: ManagedJobStatus, target: ManagedJobStatus) -> None:
        super().__init__(
            f"Managed job {job_id}: illegal status transition {current} -> {target}."
        )
        self.current = current
        self.target = target


def allowed_targets(current: ManagedJobStatus) -> frozenset[ManagedJobStatus]:
    """Statuses reachable from `current` in one step (empty for terminal ones)."""
    return _ALLOWED.get(current, frozenset())


def check_transition(job_id: int, current: ManagedJobStatus, target: ManagedJobStatus) -> None:
    """Raise IllegalTransitionError unless `current -> target` is allowed."""
    if target not in allowed_targets(current):
        raise IllegalTransitionError(job_id, current, target)
