"""A managed spot job on AWS (moto + sshd bodies), preempted the way EC2 does it.

The controller (its own background process, reaching moto's server through
AWS_ENDPOINT_URL like the client) launches a 2-node spot gang; the test kills both
bodies and terminates the instances in moto with StateReason
Server.SpotInstanceTermination (no notice: the worst case). The controller must see
PREEMPTED in EC2's own view, block the zone, relaunch in another AZ of us-east-1 (the
task pins the region; with the default EAGER_NEXT_REGION there is no other region, so
other zones of it come next, the preempted one last; FAILOVER tries the same region
first) and finish the job, which resumes from the checkpoint the nodes saved to S3
(moto's S3, on the lab's gateway, reached from inside the node namespaces) with the
stdlib S3 client: the bodies' python3 has neither boto3 nor the aws CLI.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs import paths
from launcher.jobs.store import JobStore
from tests.aws_moto import CLUSTER_TAG, AWSFake
from tests.cloud_e2e import (
    NETNS_ONLY,
    assert_recovered_once,
    managed_jobs,
    resumable_task,
    s3_saved_count,
)
from tests.waiting import wait_until as _wait

pytestmark = NETNS_ONLY

BUCKET = "launcher-test-ckpt"
COUNT_TO = 30


@pytest.fixture
def spot_env(
    aws_cloud: AWSFake, launcher_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[AWSFake]:
    with managed_jobs(monkeypatch, log_sync=True, launcher_home=launcher_home):
        aws_cloud.client("s3").create_bucket(Bucket=BUCKET)
        yield aws_cloud


def _task(tmp_path: Path, strategy: str | None = None) -> str:
    return resumable_task(
        tmp_path, "spot",
        "  cloud: aws\n  region: us-east-1\n  instance_type: m6i.large\n  use_spot: true\n"
        + (f"  job_recovery:\n    strategy: {strategy}\n" if strategy else ""),
        f"s3://{BUCKET}/jobs", COUNT_TO)


def _cluster_instances(fake: AWSFake, cluster: str) -> list[str]:
    return [
        i.id
        for i in fake.instances()
        if any(t.get("key") == CLUSTER_TAG and t.get("value") == cluster for t in i.get_tags())
    ]


def _saved_count(fake: AWSFake) -> int:
    return s3_saved_count(fake, BUCKET)


def _synced_counts(job_id: int) -> int:
    """The `count` lines of attempt 1's output the controller has saved so far."""
    path = paths.attempt_log_path(job_id, 1)
    if not path.exists():
        return 0
    return sum(ln.startswith("(rank 0) count ") for ln in path.read_text().splitlines())


@pytest.mark.parametrize("strategy", [None, "FAILOVER"], ids=["default", "failover"])
def test_spot_gang_preempted_by_ec2_relaunches_in_another_az_and_resumes_from_s3(
    spot_env: AWSFake, tmp_path: Path, strategy: str | None
) -> None:
    fake = spot_env
    t0 = time.monotonic()
    job = api.jobs_launch(_task(tmp_path, strategy))
    store = JobStore()
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", 30, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "aws" and first.region == "us-east-1" and first.use_spot
        ids = _cluster_instances(fake, first.cluster_name)
        assert len(ids) == 2
        assert all(fake.instance(i).lifecycle == "spot" for i in ids)
        _wait(lambda: _saved_count(fake) >= 5, 20, "a checkpoint saved to S3")
        # the controller keeps the output as it runs: wait for a sync that has the counts
        # (under load the first syncs can lag the job), then the head dies with its disk
        _wait(lambda: _synced_counts(job.id) >= 3, 30, "attempt 1's output synced")
        saved = _saved_count(fake)

        fake.preempt(ids)  # no notice: the bodies die, EC2 says SpotInstanceTermination
        reasons, attempts = assert_recovered_once(job.id, store, timeout=60)
        assert attempts[1].region == "us-east-1" and attempts[1].zone != first.zone, [
            (a.zone, a.outcome) for a in attempts
        ]
        assert not set(_cluster_instances(fake, attempts[1].cluster_name)) & set(ids)

        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        resumed = [ln for ln in lines if "resum" in ln.lower()]
        assert resumed, lines[-20:]
        # the second attempt started from what S3 held, not from 0
        start = max(int("".join(c for c in ln.split("resum")[-1] if c.isdigit()) or 0)
                    for ln in resumed)
        assert start >= saved, (saved, resumed)
        # the bodies' python3 has no boto3 and no aws CLI (as Canonical's Ubuntu): the
        # restore went through bucket_sync's stdlib S3 client
        assert any("restored" in ln and "(stdlib S3 client)" in ln for ln in lines), lines[-20:]
        assert _saved_count(fake) == COUNT_TO

        # attempt 1's output was kept as it ran (its head died with its disk, no notice)
        first_log = paths.attempt_log_path(job.id, 1).read_text().splitlines()
        assert len([ln for ln in first_log if ln.startswith("(rank 0) count ")]) >= 3, first_log
        assert "head node was lost" in first_log[-1], first_log[-3:]
        recovered = [r for r in reasons if "after the preemption" in r]
        assert recovered and float(recovered[-1].split(" s after")[0].split()[-1]) < 10.0

        _wait(lambda: fake.leaks().empty(), 20, "no instance, EIP or body left")
        print(f"spot job with one preemption: {time.monotonic() - t0:.1f}s", *reasons, sep="\n")
    finally:
        store.close()


def test_spot_gang_whose_head_alone_is_preempted_keeps_attempt_1s_synced_output(
    spot_env: AWSFake, tmp_path: Path
) -> None:
    """Issue 16 (4.2): EC2 reclaims only the head of the 2-node gang. AWS cannot replace a
    node in place, so the controller relaunches the whole cluster and says so (no
    "replacing only those nodes", no "gang restarted after the node(s) were replaced");
    `jobs logs` shows attempt 1's lines synced before the loss, then the lost-head line."""
    fake = spot_env
    job = api.jobs_launch(_task(tmp_path))
    store = JobStore()
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", 30, "RUNNING")
        (first,) = store.attempts(job.id)
        synced = paths.attempt_log_path(job.id, 1)

        def counted() -> int:
            text = synced.read_text() if synced.exists() else ""
            return sum(ln.startswith("(rank 0) count ") for ln in text.splitlines())

        _wait(lambda: counted() >= 3, 30, "attempt 1's output synced")
        fake.preempt([first.node_ids[0]])  # the head only; the worker keeps running
        final = api.jobs_wait(job.id, timeout=90)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED", reasons
        assert not any("replacing only those nodes" in r for r in reasons), reasons
        assert len(store.attempts(job.id)) == 2, reasons

        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        end = next(i for i, ln in enumerate(lines) if ln.startswith("=== attempt 1 ended"))
        attempt1 = lines[:end]
        assert sum(ln.startswith("(rank 0) count ") for ln in attempt1) >= 3, lines
        assert sum("head node was lost" in ln for ln in attempt1) == 1, attempt1
        assert not any("gang restarted" in ln for ln in lines), lines
        assert not paths.gang_run_log_path(job.id, 1, 1).exists()
        _wait(lambda: fake.leaks().empty(), 20, "no instance, EIP or body left")
    finally:
        store.close()
