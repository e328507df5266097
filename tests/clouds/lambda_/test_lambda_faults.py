"""Lambda's real error bodies through LambdaCloud and the failover loop, and a fault at
every API call of the provisioning path. After each failure the fake holds no live
instance and the cluster record is gone; `terminate` is then a no-op."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    InvalidRequestError,
    ProvisionFailedError,
    QuotaError,
)
from launcher.clouds.lambda_.cloud import RECORDS
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.clouds.aws.test_aws_failover import FakeTask, OtherCloud, _placement, plan_over
from tests.clouds.lambda_.test_lambda_provision import cloud, req
from tests.lambda_fake import BAD_KEY, CAPACITY, QUOTA, LambdaFake, err

UNKNOWN = err(500, "global/unknown", "Unknown error.")
INVALID = err(400, "global/invalid-parameters", "Invalid parameters.")
ERRORS: dict[str, tuple[tuple[int, Any], type[CloudError]]] = {
    "capacity": (CAPACITY, CapacityError), "quota": (QUOTA, QuotaError),
    "auth": (BAD_KEY, AuthError), "invalid": (INVALID, InvalidRequestError),
    "unknown-500": (UNKNOWN, CloudError),
}


@pytest.mark.parametrize("kind", ERRORS)
def test_error_bodies_map_to_typed_errors(lambda_fake: LambdaFake, kind: str) -> None:
    (status, body), cls = ERRORS[kind]
    lambda_fake.fail("launch", status, body, skip=1)  # the second node of the gang
    with pytest.raises(cls) as e:
        cloud().provision(req("e"))
    assert type(e.value) is cls and e.value.cloud == "lambda"
    assert body["error"]["code"] in str(e.value)
    assert lambda_fake.live() == [] and RECORDS.entries("e") is None


def test_fault_at_every_call_leaves_nothing(lambda_fake: LambdaFake,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    c = cloud()
    start = len(lambda_fake.calls)
    c.provision(req("f"))
    steps = [name for name, _ in lambda_fake.calls[start:]]
    c.terminate("f")
    lambda_fake.ssh_keys.clear()  # so the key registration is a step each time
    assert steps[:3] == ["instance-types", "ssh-keys", "ssh-keys POST"], steps
    assert steps.count("launch") == 2 and "instances" in steps
    faults = {"500": (UNKNOWN, False), "capacity": (CAPACITY, False),
              "answer-lost": (UNKNOWN, True)}
    runs = 0
    for i, name in enumerate(steps):
        skip = steps[:i].count(name)
        for fault, ((status, body), apply) in faults.items():
            if fault == "capacity" and name != "launch":
                continue
            lambda_fake.ssh_keys.clear()
            lambda_fake.fail(name, status, body, skip=skip, apply=apply)
            with pytest.raises(CloudError):
                c.provision(req("f"))
            assert lambda_fake.live() == [], (name, skip, fault)
            assert RECORDS.entries("f") is None, (name, skip, fault)
            c.terminate("f")
            lambda_fake.faults.clear()
            runs += 1
    with capsys.disabled():
        print(f"\nlambda fault injection: {len(steps)} steps x faults = {runs} runs, "
              "nothing left after any")


def _lambda(region: str) -> Any:
    p = _placement("lambda", region, None)
    return dataclasses.replace(p, instance_type="gpu_1x_a10",
                               offer=dataclasses.replace(p.offer, instance_type="gpu_1x_a10"))


def test_failover_capacity_then_quota_then_success(lambda_fake: LambdaFake) -> None:
    lambda_fake.no_capacity.add(("gpu_1x_a10", "us-east-1"))
    lambda_fake.fail("launch", *QUOTA)
    plan = plan_over([_lambda(r) for r in ("us-east-1", "us-west-1", "us-south-1")])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "fo", db, plan_fn=plan,  # type: ignore[arg-type]
                                      cloud_fn={"lambda": cloud()}.__getitem__)
    assert [(a.region, a.error_type) for a in got.attempts] == [
        ("us-east-1", "CapacityError"), ("us-west-1", "QuotaError")]
    assert got.cluster.region == "us-south-1"
    assert {i["region"]["name"] for i in lambda_fake.live()} == {"us-south-1"}


def test_auth_moves_on_and_invalid_stops(lambda_fake: LambdaFake) -> None:
    lambda_fake.fail("instance-types", *BAD_KEY)
    plan = plan_over([_lambda("us-east-1"), _lambda("us-west-1"), _placement("ssh", "lab", None)])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "au", db, plan_fn=plan,  # type: ignore[arg-type]
                                      cloud_fn={"lambda": cloud(), "ssh": OtherCloud()}.__getitem__)  # type: ignore[arg-type]
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("lambda", "AuthError")]
    lambda_fake.fail("launch", *INVALID)
    with StateDB() as db, pytest.raises(ProvisionFailedError) as e:
        provision_with_failover(FakeTask(), "bad", db,  # type: ignore[arg-type]
                                plan_fn=plan_over([_lambda("us-east-1"), _lambda("us-west-1")]),
                                cloud_fn={"lambda": cloud()}.__getitem__)
    assert [a.error_type for a in e.value.attempts] == ["InvalidRequestError"]
    assert lambda_fake.live() == []
