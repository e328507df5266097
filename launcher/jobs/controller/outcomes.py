"""How an attempt ends, and recording that decision (crash-safety rule 2: an outcome is
written before any of its side effects; the loop applies it, see finish.Finisher)."""

from __future__ import annotations

from collections.abc import Callable

from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptRow, JobRow, JobStore


class Outcome:
    """How an attempt ended (attempt.outcome)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # user code failed, no restarts left
    ERROR_RESTART = "ERROR_RESTART"  # user code failed, restarted
    EXIT_CODE = "EXIT_CODE"  # exit code listed in recover_on_exit_codes
    PREEMPTED = "PREEMPTED"
    SETUP_FAILED = "SETUP_FAILED"
    NO_RESOURCE = "NO_RESOURCE"  # final: FAILED_NO_RESOURCE
    NO_RESOURCE_RETRY = "NO_RESOURCE_RETRY"  # during recovery: try again later
    LAUNCH_ERROR = "LAUNCH_ERROR"  # transient launch failure, retried
    LAUNCH_FAILED = "LAUNCH_FAILED"  # final
    CANCELLED = "CANCELLED"
    SWITCHED = "SWITCHED"  # DEADLINE: the policy moved the job off this gang (not an end)


# Outcome -> the job status it leads to (None: the job goes on with a new attempt).
FINAL_STATUS: dict[str, S] = {
    Outcome.SUCCEEDED: S.SUCCEEDED,
    Outcome.FAILED: S.FAILED,
    Outcome.SETUP_FAILED: S.FAILED_SETUP,
    Outcome.NO_RESOURCE: S.FAILED_NO_RESOURCE,
    Outcome.LAUNCH_FAILED: S.FAILED,
    Outcome.CANCELLED: S.CANCELLED,
}
# Outcome of the previous attempt -> cause of the next one.
CAUSE_AFTER = {
    Outcome.PREEMPTED: "preemption",
    Outcome.ERROR_RESTART: "error-restart",
    Outcome.EXIT_CODE: "exit-code",
    Outcome.SWITCHED: "switch",
}

# Called with (job, attempt, outcome, reason) right before an outcome is recorded.
DecidedHook = Callable[[JobRow, AttemptRow, str, str], None]


class Decisions:
    """Records attempt outcomes. Every part that decides how an attempt ends calls
    `decide`; nothing else happens here (the side effects are the finisher's)."""

    def __init__(self, store: JobStore, on_decided: DecidedHook | None = None) -> None:
        self.store = store
        self.on_decided = on_decided

    def decide(self, job: JobRow, att: AttemptRow, outcome: str, *, reason: str,
               exit_code: int | None = None,
               attempt_fields: dict[str, object] | None = None) -> None:
        """Record the attempt's outcome (before any side effect); the loop applies it."""
        if self.on_decided is not None:
            self.on_decided(job, att, outcome, reason)
        self.store.update_attempt(job.id, att.attempt, outcome=outcome, exit_code=exit_code,
                                  outcome_reason=reason, **(attempt_fields or {}))
