"""launcher/task/cloud_names.py and the unknown-cloud errors that use it: company and
product names suggest the cloud launcher means (`amazon` -> aws), typos the close ones."""

from __future__ import annotations

import pytest

from launcher.errors import TaskValidationError
from launcher.task.cloud_names import cloud_did_you_mean, cloud_suggestions
from launcher.task.model import Task
from launcher.task.resources_parser import KNOWN_CLOUDS


@pytest.mark.parametrize("word,cloud", [
    ("amazon", "aws"), ("EC2", "aws"), ("Amazon Web Services", "aws"), ("google", "gcp"),
    ("gce", "gcp"), ("google_cloud", "gcp"), ("microsoft", "azure"), ("k8s", "kubernetes"),
    ("lambdalabs", "lambda"), ("digitalocean", "do"), ("oracle", "oci"), ("gcpp", "gcp"),
    ("azrue", "azure"),
])
def test_suggestions(word: str, cloud: str) -> None:
    assert cloud_suggestions(word, KNOWN_CLOUDS)[0] == cloud


def test_nothing_close_suggests_nothing() -> None:
    assert cloud_suggestions("zzzzzz", KNOWN_CLOUDS) == []
    assert cloud_did_you_mean("zzzzzz", KNOWN_CLOUDS) == ""
    assert cloud_suggestions("amazon", ["gcp"]) == []  # only clouds that are known there


@pytest.mark.parametrize("field", ["cloud: amazon", "infra: amazon/us-east-1"])
def test_task_error_suggests_aws(field: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml_str(f"resources:\n  {field}\nrun: echo\n")
    assert "unknown cloud 'amazon' — did you mean 'aws'?" in str(err.value)
