"""botocore retries throttling and transient errors, never capacity or quota errors.

EC2 answers `InsufficientInstanceCapacity` with HTTP 500 (its XML error body), which
botocore's retry modes count as transient: without launcher/clouds/aws/session.py's
`needs-retry` veto, one RunInstances in a zone without capacity was sent 8 times with
backoff (~20 s, measured by benchmarks/aws_moto.py: 5 capacity errors took 14 s before
failover reached the 6th placement). Against moto's server, whose answers
tests/moto_meter.py replaces with EC2's error for the calls under test, counting the
requests that reached it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from launcher.clouds.aws.session import ClientFactory
from tests.aws_moto import TEST_AMI, AWSFake, MotoServer
from tests.moto_meter import MotoMeter

RUN = ("ec2", "RunInstances")


@pytest.fixture
def meter(moto_server: MotoServer) -> Iterator[MotoMeter]:
    m = MotoMeter.install(moto_server)
    try:
        yield m
    finally:
        m.uninstall()


def _run(factory: ClientFactory) -> None:
    factory.ec2("us-east-1").run_instances(ImageId=TEST_AMI, InstanceType="m6i.large",
                                           MinCount=2, MaxCount=2)


@pytest.mark.parametrize(("code", "status"), [("InsufficientInstanceCapacity", 500),
                                              ("InsufficientHostCapacity", 500),
                                              ("VcpuLimitExceeded", 400),
                                              ("MaxSpotInstanceCountExceeded", 500)])
def test_capacity_and_quota_errors_are_sent_once(
    aws_moto: AWSFake, meter: MotoMeter, code: str, status: int
) -> None:
    meter.reset()
    meter.fail(RUN, 8, code, status)
    t0 = time.monotonic()
    with pytest.raises(ClientError) as err:
        _run(ClientFactory())
    assert err.value.response["Error"]["Code"] == code
    assert meter.calls.count(RUN) == 1, meter.calls
    # no backoff sleep either (~0.2 s alone; client creation alone can take seconds on a
    # loaded CI machine running 4 test workers)
    assert time.monotonic() - t0 < 5.0


def test_transient_errors_are_still_retried(aws_moto: AWSFake, meter: MotoMeter) -> None:
    meter.reset()
    meter.fail(RUN, 1, "InternalError", 500)  # then moto answers: success on the retry
    _run(ClientFactory())
    assert meter.calls.count(RUN) == 2, meter.calls
