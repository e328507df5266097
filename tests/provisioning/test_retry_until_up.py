"""`retry_until_up`: whole-plan rounds with capped exponential backoff while capacity or
quota is short; stops at once for errors waiting cannot cure; Ctrl-C leaves nothing."""

from __future__ import annotations

import pytest

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    ClusterInfo,
    InvalidRequestError,
    ProvisionFailedError,
    ProvisionRequest,
    QuotaError,
)
from launcher.provisioning.failover import Backoff, provision_with_failover
from launcher.state.db import StateDB
from tests.provisioning.test_failover import FakeCloud, FakeTask, _clouds, fake_plan


class ShortUntil(FakeCloud):
    """Capacity (or quota) errors everywhere until `rounds_short` rounds have passed."""

    def __init__(self, name: str, rounds_short: int, err: type = CapacityError) -> None:
        super().__init__(name)
        self.rounds_short = rounds_short
        self.err = err
        self.calls = 0

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        self.calls += 1
        if self.rounds_short > 0:
            self.instances[req.cluster_name] = ["half"]
            raise self.err(f"no capacity in {req.zone or req.region}", cloud=self.name)
        return super().provision(req)


def _short_clouds(rounds: int) -> tuple[dict[str, FakeCloud], list[ShortUntil]]:
    clouds = _clouds()
    short = [ShortUntil(n, rounds, QuotaError if n == "gcp" else CapacityError)
             for n in ("aws", "gcp", "azure")]
    for c in short:
        clouds[c.name] = c
    return clouds, short


def test_backoff_doubles_and_is_capped() -> None:
    b = Backoff()
    assert [b.delay(n) for n in range(1, 9)] == [30, 60, 120, 240, 480, 600, 600, 600]


def test_rounds_until_capacity_comes_back() -> None:
    clouds, short = _short_clouds(rounds=2)
    waits: list[float] = []
    events: list[str] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        for c in short:
            c.rounds_short -= 1

    with StateDB() as db:
        got = provision_with_failover(
            FakeTask(), "r1", db, plan_fn=fake_plan, cloud_fn=clouds.__getitem__,
            retry_until_up=True, sleep=sleep, on_event=events.append)
        events_in_db = [e.kind for e in db.events("r1")]
    assert got.placement.cloud == "aws" and got.placement.zone == "us-east-1a"
    assert waits == [30, 60]
    rounds = [e for e in events if e.startswith("Round ")]
    assert len(rounds) == 2 and "retrying in 30s" in rounds[0] and "QuotaError" in rounds[0]
    assert events_in_db.count("retry-round") == 2
    # every round tried the whole plan again: 5 enabled placements per failed round
    assert sum(c.calls for c in short) == 5 + 5 + 1
    assert all(not c.instances.get("half") for c in short)


def test_without_the_flag_one_round_only() -> None:
    clouds, _ = _short_clouds(rounds=1)
    with StateDB() as db, pytest.raises(ProvisionFailedError):
        provision_with_failover(FakeTask(), "r2", db, plan_fn=fake_plan,
                                cloud_fn=clouds.__getitem__,
                                sleep=lambda s: pytest.fail("slept without --retry-until-up"))


@pytest.mark.parametrize("err", [InvalidRequestError, AuthError])
def test_errors_waiting_cannot_cure_are_not_retried(err: type) -> None:
    clouds = {n: ShortUntil(n, 99, err) for n in ("aws", "gcp", "azure", "lambda")}
    with StateDB() as db, pytest.raises(ProvisionFailedError):
        provision_with_failover(FakeTask(), "r3", db, plan_fn=fake_plan,
                                cloud_fn=clouds.__getitem__, retry_until_up=True,
                                sleep=lambda s: pytest.fail("retried an incurable error"))


def test_ctrl_c_while_waiting_leaves_nothing() -> None:
    clouds, short = _short_clouds(rounds=99)

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    with StateDB() as db, pytest.raises(KeyboardInterrupt):
        provision_with_failover(FakeTask(), "r4", db, plan_fn=fake_plan,
                                cloud_fn=clouds.__getitem__, retry_until_up=True,
                                sleep=interrupted)
    assert all(not c.instances for c in clouds.values())
