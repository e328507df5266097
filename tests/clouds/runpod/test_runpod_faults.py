"""Fault injection at every GraphQL call of the provisioning path (spot and on-demand):
each call in turn answers a capacity error, an internal error, a validation error, or
429 until the retries run out. After each, the fake holds no pod, the cluster record is
gone, and `terminate` is a no-op. Prints steps x faults."""

from __future__ import annotations

import pytest

from launcher.clouds.base import CloudError
from launcher.clouds.runpod import api, records
from launcher.clouds.runpod.cloud import RunPodCloud
from tests.clouds.runpod.test_runpod_provision import FAST, req
from tests.runpod_fake import NO_CAPACITY, RunPodFake

FAULTS = {
    "capacity": NO_CAPACITY,
    "internal": "Something went wrong. Please try again later or contact support.",
    "validation": 'Variable "$input" got invalid value; injected',
}


def test_a_fault_at_every_call_leaves_nothing(runpod_fake: RunPodFake,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(api, "BACKOFF_S", 0.001)
    monkeypatch.setattr(api, "RETRIES", 3)
    cloud = RunPodCloud(node_waiter=lambda info, deadline: info, timeouts=FAST)
    runs = 0
    for spot in (False, True):
        start = len(runpod_fake.calls)
        cloud.provision(req("f", use_spot=spot))
        steps = list(dict.fromkeys(runpod_fake.calls[start:]))
        cloud.terminate("f")
        assert runpod_fake.inventory() == []
        assert {"pod"} < set(steps) and len(steps) == (3 if spot else 2), steps
        for op in steps:
            for name, message in [*FAULTS.items(), ("429", "")]:
                if name == "429":
                    runpod_fake.rate_limit(op, times=3)
                else:
                    runpod_fake.fail(op, message)
                with pytest.raises(CloudError):
                    cloud.provision(req("f", use_spot=spot))
                assert runpod_fake.inventory() == [], (op, name)
                assert records.read("f") is None, (op, name)
                cloud.terminate("f")
                runs += 1
    with capsys.disabled():
        print(f"\nrunpod fault injection: 5 distinct steps (2 on-demand, 3 spot) x 4 faults "
              f"= {runs} runs, nothing left after any")
