"""RunPod's error bodies through the real failover loop (`provision_with_failover`) and
RunPodCloud against the GraphQL fake: no capacity in two data centers then the third,
insufficient funds blocks the cloud (the balance is account-wide), a refused key moves
to the next cloud, an invalid request stops at once. After each, the fake holds only
the winning pod. Also: the message -> error mapping on RunPod's real messages."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    CloudQuotaError,
    InvalidRequestError,
    ProvisionFailedError,
)
from launcher.clouds.runpod.cloud import RunPodCloud
from launcher.clouds.runpod.errors import classify, from_http
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.clouds.aws.test_aws_failover import FakeTask, OtherCloud, _placement, plan_over
from tests.clouds.runpod.test_runpod_provision import FAST
from tests.runpod_fake import NO_CAPACITY, RunPodFake


def _rp(zone: str, region: str = "US") -> Any:
    p = _placement("runpod", region, zone)
    it = "1x_A100-80GB_SECURE"
    return dataclasses.replace(p, instance_type=it, num_nodes=1, accelerator="A100-80GB",
                               offer=dataclasses.replace(p.offer, instance_type=it))


@dataclasses.dataclass
class OneNodeTask(FakeTask):
    num_nodes: int = 1


@pytest.fixture
def cloud(runpod_fake: RunPodFake) -> RunPodCloud:
    return RunPodCloud(node_waiter=lambda info, deadline: info, timeouts=FAST)


def _run(name: str, placements: list[Any], clouds: dict[str, Any]) -> Any:
    with StateDB() as db:
        return provision_with_failover(OneNodeTask(), name, db,  # type: ignore[arg-type]
                                       plan_fn=plan_over(placements),
                                       cloud_fn=clouds.__getitem__)


def test_capacity_in_two_data_centers_then_the_third(runpod_fake: RunPodFake,
                                                     cloud: RunPodCloud) -> None:
    runpod_fake.capacity.update({"US-KS-2": 0, "US-GA-1": 0})
    got = _run("cap", [_rp("US-KS-2"), _rp("US-GA-1"), _rp("CA-MTL-1", "CA")],
               {"runpod": cloud})
    assert [(a.zone, a.error_type) for a in got.attempts] == [
        ("US-KS-2", "CapacityError"), ("US-GA-1", "CapacityError")]
    assert got.cluster.zone == "CA-MTL-1"
    (pod,) = runpod_fake.pods.values()
    assert pod["dataCenterId"] == "CA-MTL-1"
    cloud.terminate("cap")


def test_insufficient_funds_blocks_the_cloud(runpod_fake: RunPodFake, cloud: RunPodCloud) -> None:
    runpod_fake.fail("podFindAndDeployOnDemand", "Insufficient funds: your balance is too low "
                     "to rent this pod.")
    got = _run("q", [_rp("US-KS-2"), _rp("US-GA-1"), _placement("ssh", "lab", None)],
               {"runpod": cloud, "ssh": OtherCloud()})
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("runpod", "CloudQuotaError")]
    assert got.cluster.cloud == "ssh" and runpod_fake.inventory() == []


def test_refused_key_moves_to_the_next_cloud(runpod_fake: RunPodFake, cloud: RunPodCloud,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", "revoked")
    got = _run("au", [_rp("US-KS-2"), _rp("US-GA-1"), _placement("ssh", "lab", None)],
               {"runpod": cloud, "ssh": OtherCloud()})
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("runpod", "AuthError")]
    assert got.cluster.cloud == "ssh" and runpod_fake.inventory() == []


def test_invalid_request_stops_at_once(runpod_fake: RunPodFake, cloud: RunPodCloud) -> None:
    runpod_fake.fail("podFindAndDeployOnDemand", 'Variable "$input" got invalid value '
                     '"nope:latest" at "input.imageName"; image does not exist')
    with pytest.raises(ProvisionFailedError) as err:
        _run("bad", [_rp("US-KS-2"), _rp("US-GA-1")], {"runpod": cloud})
    assert [a.error_type for a in err.value.attempts] == ["InvalidRequestError"]
    assert runpod_fake.inventory() == []


@pytest.mark.parametrize(("message", "code", "kind"), [
    (NO_CAPACITY, "", CapacityError),
    ("There are no longer any instances available with enough disk space.", "", CapacityError),
    ("This machine does not have the resources to deploy your pod. Please try a different "
     "machine.", "", CapacityError),
    ("Your bid price is below the minimum bid price for this GPU.", "", CapacityError),
    ("Insufficient funds: add credits to continue", "", CloudQuotaError),
    ("Unauthorized", "", AuthError),
    ("Invalid API key", "", AuthError),
    ('Cannot query field "foo" on type "Pod".', "GRAPHQL_VALIDATION_FAILED", InvalidRequestError),
    ("Something went wrong. Please try again later.", "INTERNAL_SERVER_ERROR", CloudError),
])
def test_message_mapping(message: str, code: str, kind: type) -> None:
    err = classify(message, code, region="US", zone="US-KS-2")
    assert type(err) is kind and err.cloud == "runpod" and err.zone == "US-KS-2"


def test_http_mapping() -> None:
    assert type(from_http(401, "")) is AuthError
    assert type(from_http(403, "")) is AuthError
    assert type(from_http(502, "bad gateway")) is CloudError
