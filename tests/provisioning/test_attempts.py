"""Idempotency tokens: recorded before the cloud call, stable for one attempt, reused
by a call resumed after the process died, never reused once the nodes were torn down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.clouds.base import CapacityError, ClusterInfo, ProvisionRequest
from launcher.provisioning import attempts as attempt_log
from launcher.provisioning.failover import provision_with_failover
from launcher.provisioning.teardown import terminate_everywhere
from launcher.state.db import StateDB
from tests.provisioning.test_failover import FakeCloud, FakeTask, _clouds, fake_plan


class RecordingCloud(FakeCloud):
    """Notes each request's token and what the state DB held for it at call time."""

    def __init__(self, name: str, errors: dict[tuple[str, str | None], Exception] | None = None) -> None:
        super().__init__(name, dict(errors or {}))  # type: ignore[arg-type]
        self.tokens: list[str | None] = []
        self.recorded_before_call: list[bool] = []

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        self.tokens.append(req.idempotency_token)
        with StateDB() as db:
            rows = attempt_log.history(db, req.cluster_name)
        self.recorded_before_call.append(
            any(r.token == req.idempotency_token and r.outcome is None for r in rows))
        return super().provision(req)


def test_each_attempt_gets_its_own_token_recorded_before_the_call() -> None:
    clouds = _clouds()
    aws = RecordingCloud("aws", {("us-east-1", "us-east-1a"): CapacityError("none", cloud="aws")})
    clouds["aws"] = aws
    with StateDB() as db:
        provision_with_failover(FakeTask(), "tok1", db, plan_fn=fake_plan,
                                cloud_fn=clouds.__getitem__)
        rows = attempt_log.history(db, "tok1")
    assert aws.tokens == [attempt_log.idempotency_token("tok1", 1),
                          attempt_log.idempotency_token("tok1", 2)]
    assert aws.tokens[0] != aws.tokens[1]
    assert aws.recorded_before_call == [True, True]
    assert [(r.attempt, r.zone, r.outcome, r.error_class) for r in rows] == [
        (1, "us-east-1a", "failed", "CapacityError"), (2, "us-east-1b", "ok", None)]
    # the token fits EC2's ClientToken (<= 64 ASCII characters) and depends on the name
    assert len(aws.tokens[0] or "") <= 64
    assert attempt_log.idempotency_token("other", 1) != aws.tokens[0]


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from launcher.provisioning.failover import provision_with_failover
    from launcher.state import StateDB
    from tests.provisioning.test_failover import FakeCloud, FakeTask, fake_plan

    class Hangs(FakeCloud):
        def provision(self, req):
            Path(sys.argv[1]).write_text(req.idempotency_token)
            time.sleep(60)  # killed here, mid-call, like a client killed during run_instances

    with StateDB() as db:
        provision_with_failover(FakeTask(), "tok2", db, plan_fn=fake_plan,
                                cloud_fn={"aws": Hangs("aws")}.__getitem__)
""")


def test_a_resumed_call_reuses_the_pending_token_until_teardown(tmp_path: Path) -> None:
    marker = tmp_path / "token"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    try:
        deadline = time.time() + 60
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the child never reached the cloud call"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first = marker.read_text()
    with StateDB() as db:
        assert [r.outcome for r in attempt_log.history(db, "tok2")] == [None]  # pending
    aws = RecordingCloud("aws")
    with StateDB() as db:
        provision_with_failover(FakeTask(), "tok2", db, plan_fn=fake_plan,
                                cloud_fn={"aws": aws}.__getitem__)
    assert aws.tokens == [first]  # the same attempt: the cloud can return what it made
    # once the cluster is torn down, a new launch of the same name never reuses it
    with StateDB() as db:
        terminate_everywhere(db, db.require_cluster("tok2"), {"aws": aws}.__getitem__)
        db.delete_cluster("tok2")
        provision_with_failover(FakeTask(), "tok2", db, plan_fn=fake_plan,
                                cloud_fn={"aws": aws}.__getitem__)
    assert len(aws.tokens) == 2 and aws.tokens[1] != first


def test_a_pending_attempt_for_another_placement_is_not_reused() -> None:
    with StateDB() as db:
        row = attempt_log.begin(db, "tok3", "aws", "us-west-2", "us-west-2a", "gpu.x")
        again = attempt_log.begin(db, "tok3", "aws", "us-west-2", "us-west-2a", "gpu.x")
        other = attempt_log.begin(db, "tok3", "aws", "us-east-1", "us-east-1a", "gpu.x")
        rows = attempt_log.history(db, "tok3")
    assert again.token == row.token and other.token != row.token
    assert [r.outcome for r in rows] == ["abandoned", None]


def test_a_pending_attempt_of_an_earlier_incarnation_is_not_reused() -> None:
    """The cluster was forgotten (row deleted without a teardown) and launched again:
    its new row is younger than the pending attempt, so a fresh token is used."""
    with StateDB() as db:
        row = attempt_log.begin(db, "tok4", "aws", "r", "z", "gpu.x")
        later = attempt_log.begin(db, "tok4", "aws", "r", "z", "gpu.x",
                                  not_before=row.started_at + 1)
    assert later.token != row.token and later.attempt == row.attempt + 1


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tokens_are_stable_per_name_and_attempt(n: int) -> None:
    assert attempt_log.idempotency_token("c", n) == attempt_log.idempotency_token("c", n)
    assert attempt_log.idempotency_token("c", n) != attempt_log.idempotency_token("c", n + 1)
