from __future__ import annotations

import pytest

from launcher.jobs.state_machine import (
    TERMINAL,
    IllegalTransitionError,
    allowed_targets,
    check_transition,
)
from launcher.jobs.state_machine import (
    ManagedJobStatus as S,
)
from launcher.jobs.store import JobStore


def test_happy_path_and_recovery_loop_are_allowed() -> None:
    chain = [S.PENDING, S.STARTING, S.RUNNING, S.RECOVERING, S.RUNNING, S.RECOVERING,
             S.RUNNING, S.SUCCEEDED]
    for a, b in zip(chain, chain[1:], strict=False):
        check_transition(1, a, b)


@pytest.mark.parametrize(
    "a,b",
    [(S.PENDING, S.RUNNING), (S.RUNNING, S.STARTING), (S.PENDING, S.RECOVERING),
     (S.RUNNING, S.FAILED_SETUP), (S.RUNNING, S.RUNNING), (S.RECOVERING, S.SUCCEEDED)],
)
def test_illegal_transitions_raise(a: S, b: S) -> None:
    with pytest.raises(IllegalTransitionError, match=f"{a} -> {b}"):
        check_transition(7, a, b)


def test_terminal_states_go_nowhere() -> None:
    for t in TERMINAL:
        assert allowed_targets(t) == frozenset()
        assert t.is_terminal
    assert not S.RECOVERING.is_terminal


def test_every_live_state_can_be_cancelled() -> None:
    for s in S:
        if not s.is_terminal:
            assert S.CANCELLED in allowed_targets(s)


def test_store_rejects_illegal_transition_and_writes_events(launcher_home) -> None:
    st = JobStore()
    job = st.add_job(name="j", task_yaml="run: x", task_source=None, strategy="FAILOVER",
                     max_restarts_on_errors=0, recover_on_exit_codes=(3,))
    with pytest.raises(IllegalTransitionError):
        st.transition(job.id, S.RUNNING, "skip starting")
    assert st.job(job.id).status == S.PENDING
    st.transition(job.id, S.STARTING, "picked up")
    st.transition(job.id, S.RUNNING, "up")
    ev = st.events(job.id)
    assert [(e.from_status, e.to_status) for e in ev] == [
        (None, "PENDING"), ("PENDING", "STARTING"), ("STARTING", "RUNNING")]
    assert all(e.at > 0 and e.reason for e in ev)
    assert [e.at for e in ev] == sorted(e.at for e in ev)
