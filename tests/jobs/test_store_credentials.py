"""A checkpoint store's credentials are checked before any machine is paid for: `jobs
launch` (a real CLI subprocess) refuses a store this machine has no credentials for, or
whose credentials the store rejects, naming the field; the cloud fake never sees an
instance. And the controller checks again before it provisions an attempt."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from tests.aws_moto import AWSFake, aws_moto, moto_server  # noqa: F401 - the fixtures
from tests.gcp_fake import GCPFake
from tests.gcp_fixtures import gcp_env, gcp_server  # noqa: F401 - the fixtures
from tests.gcs_fake import GCSFake, gcs  # noqa: F401 - the fixture
from tests.moto_s3 import S3Server, s3  # noqa: F401 - the fixture
from tests.runtime.test_s3_stdlib import moto_auth  # noqa: F401 - the fixture
from tests.waiting import wait_until

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
ALL_EC2_STATES = ("pending", "running", "shutting-down", "terminated", "stopping", "stopped")
ON_AWS = "resources: {cloud: aws, region: us-east-1, instance_type: m6i.large}\n"
ON_GCP = "resources: {cloud: gcp, region: us-central1, instance_type: n2-standard-2}\n"


def _task(tmp_path: Path, resources: str, store: str) -> str:
    path = tmp_path / "ckpt.yaml"
    path.write_text(f"name: ckpt\n{resources}checkpoint: {{path: /root/ckpt, store: {store}}}\n"
                    "run: echo hi\n")
    return str(path)


def _jobs_launch(task: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "jobs", "launch", "-y", "-d", task], capture_output=True,
                          text=True, timeout=120)


def _refused(out: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert out.returncode != 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    for fragment in ("checkpoint.store", *fragments):
        assert fragment in out.stderr, out.stderr
    assert api.jobs_queue() == []  # nothing was submitted


@pytest.fixture
def no_google(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LAUNCHER_GCS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")


def test_gs_store_without_google_credentials_fails_before_any_ec2_instance(
        aws_moto: AWSFake, no_google: None, tmp_path: Path) -> None:  # noqa: F811
    _refused(_jobs_launch(_task(tmp_path, ON_AWS, "gs://ckpt-bkt/run")),
             "Google credentials", "gcloud auth application-default login")
    assert aws_moto.instances(ALL_EC2_STATES) == []


def test_gs_store_whose_token_gcs_rejects_fails_before_any_ec2_instance(
        aws_moto: AWSFake, gcs: GCSFake, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_GCS_TOKEN", "ya29.revoked")  # GCS answers 401
    _refused(_jobs_launch(_task(tmp_path, ON_AWS, "gs://ckpt-bkt/run")), "HTTP 401")
    assert aws_moto.instances(ALL_EC2_STATES) == []
    monkeypatch.setenv("LAUNCHER_GCS_TOKEN", gcs.token)  # the same task, good credentials
    out = subprocess.run([*CLI, "jobs", "launch", "--dryrun", _task(tmp_path, ON_AWS,
                                                                     "gs://ckpt-bkt/run")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_s3_store_without_aws_credentials_fails_before_any_gcp_instance(
        gcp_env: GCPFake, no_aws: None, tmp_path: Path) -> None:  # noqa: F811
    _refused(_jobs_launch(_task(tmp_path, ON_GCP, "s3://ckpt-bkt/run")),
             "AWS credentials", "aws configure")
    assert gcp_env.live() == []
    assert not [c for c in gcp_env.calls if c.kind == "instances.insert"]


def test_s3_store_with_a_wrong_secret_fails_before_any_gcp_instance(
        gcp_env: GCPFake, moto_auth: tuple[str, str], s3: S3Server,  # noqa: F811
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_id, _ = moto_auth
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    _refused(_jobs_launch(_task(tmp_path, ON_GCP, "s3://auth-bkt/run")),
             "SignatureDoesNotMatch")
    assert gcp_env.live() == []
    assert not [c for c in gcp_env.calls if c.kind == "instances.insert"]


@pytest.fixture
def controller(launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "30")
    try:
        yield
    finally:
        api.jobs_controller_stop()


def test_the_controller_checks_again_before_it_provisions(
        aws_moto: AWSFake, gcs: GCSFake, controller: None, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    # submitted with credentials; the controller then starts in an environment without
    job = api.jobs_launch(_task(tmp_path, ON_AWS, "gs://ckpt-bkt/run"), start_controller=False)
    monkeypatch.delenv("LAUNCHER_GCS_TOKEN")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    api.jobs_controller_start()
    wait_until(lambda: api.jobs_status(job.id).status.startswith("FAILED"), timeout=60,
               what="the job to fail")
    detail = api.jobs_detail(job.id)
    assert any("Google credentials" in e.reason for e in detail.events), detail.events
    assert aws_moto.instances(ALL_EC2_STATES) == []
