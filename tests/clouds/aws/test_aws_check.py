"""`AWSCloud.check()` and the `aws:` config section.

No credentials: the answer comes without network and without importing boto3 (a
fresh interpreter shows it). With credentials: the STS identity (moto).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.clouds.aws import session
from launcher.clouds.aws.cloud import AWSCloud
from launcher.config.settings import AWSSettings, parse_config
from launcher.errors import ConfigError
from tests.clouds.aws.aws_fixtures import aws_env  # noqa: F401

_AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
             "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
             "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_SHARED_CREDENTIALS_FILE",
             "AWS_CONFIG_FILE")


@pytest.fixture
def no_creds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in _AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(session, "_is_ec2_host", lambda: False)
    return tmp_path


def test_no_credentials_no_network(no_creds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    status = AWSCloud().check()
    assert status.enabled is False and "no AWS credentials" in status.reason


def test_no_credentials_imports_no_boto3(no_creds: Path) -> None:
    code = ("import sys; from launcher.clouds.aws import session; "
            "session._is_ec2_host = lambda: False; "
            "from launcher.clouds.registry import credential_status; "
            "s = credential_status('aws'); "
            "print(s.enabled, sorted(m for m in sys.modules if m.split('.')[0] in "
            "('boto3', 'botocore')))")
    env = {k: v for k, v in os.environ.items() if k not in _AWS_VARS}
    env["HOME"] = str(no_creds)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    assert out.strip() == "False []"


def test_credentials_files_count_as_a_source(no_creds: Path) -> None:
    (no_creds / ".aws").mkdir()
    (no_creds / ".aws" / "config").write_text("[default]\nregion = us-east-1\n")
    assert session.local_credentials_source() == str(no_creds / ".aws" / "config")


def test_identity_with_credentials(aws_env: None) -> None:  # noqa: F811
    status = AWSCloud().check()
    assert status.enabled, status.reason
    assert "arn:aws:sts::123456789012" in status.reason and "account 123456789012" in status.reason


def test_aws_config_section() -> None:
    cfg = parse_config(
        "aws:\n  use_internal_ips: true\n  ssh_user: ec2-user\n  vpc_name: train\n"
        "  security_group_name: lab\n  ssh_cidr: 203.0.113.0/24\n"
        "  iam_instance_profile: s3-role\n")
    assert cfg.aws == AWSSettings(use_internal_ips=True, ssh_user="ec2-user", vpc_name="train",
                                  security_group_name="lab", ssh_cidr="203.0.113.0/24",
                                  iam_instance_profile="s3-role")
    assert parse_config("").aws == AWSSettings()


@pytest.mark.parametrize("text,field", [
    ("aws:\n  use_internal_ips: yes-please\n", "aws.use_internal_ips"),
    ("aws:\n  vpc: x\n", "aws.vpc"),
    ("aws:\n  vpc_name: a\n  vpc_id: vpc-1\n", "aws.vpc_id"),
    ("aws:\n  vpc_id: subnet-1\n", "aws.vpc_id"),
    ("aws:\n  ssh_cidr: everywhere\n", "aws.ssh_cidr"),
    ("aws:\n  ssh_user: ''\n", "aws.ssh_user"),
    ("aws: [1]\n", "aws"),
])
def test_aws_config_errors_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError, match=f"field '{field}'"):
        parse_config(text)
