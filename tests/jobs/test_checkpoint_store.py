"""Which bucket prefix a managed job's checkpoint directory is synced with, and the
`jobs:` config section that sets the default store and the save interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.settings import parse_config
from launcher.errors import ConfigError
from launcher.jobs.checkpoint_store import CONFIG_FIELD, checkpoint_store_for, stores_to_check
from launcher.task.model import Task


def _task(checkpoint: object) -> Task:
    d: dict[str, object] = {"run": "echo"}
    if checkpoint is not None:
        d["checkpoint"] = checkpoint
    return Task.from_dict(d)


def test_task_store_gets_the_task_id_appended(launcher_home: Path) -> None:
    store, interval = checkpoint_store_for("local", _task({"store": "s3://b/run/"}), "mj-1-ab")
    assert (store, interval) == ("s3://b/run/mj-1-ab", None)


def test_default_store_from_config_else_a_warning(launcher_home: Path) -> None:
    warnings: list[str] = []
    assert checkpoint_store_for("aws", _task("~/ck"), "t1", warnings.append) == (None, None)
    assert "lost with them" in warnings[0]
    (launcher_home / "config.yaml").write_text(
        "jobs:\n  checkpoint_store: s3://team-ckpt/jobs\n  checkpoint_save_interval: 2m\n")
    assert checkpoint_store_for("aws", _task("~/ck"), "t1") == ("s3://team-ckpt/jobs/t1", 120.0)
    assert checkpoint_store_for("runpod", _task("~/ck"), "t1") == ("s3://team-ckpt/jobs/t1",
                                                                  120.0)
    # the local cloud's own directory is already durable; an SSH pool's hosts are yours
    assert checkpoint_store_for("local", _task("~/ck"), "t1") == (None, None)
    assert checkpoint_store_for("ssh", _task("~/ck"), "t1") == (None, None)
    assert checkpoint_store_for("aws", _task(None), "t1") == (None, None)  # no checkpoint asked


@pytest.mark.parametrize("store", ["gs://team-ckpt/jobs", "az://acct/ckpts/jobs",
                                   "https://acct.blob.core.windows.net/ckpts/jobs"])
def test_the_default_store_may_be_gcs_or_azure(launcher_home: Path, store: str) -> None:
    (launcher_home / "config.yaml").write_text(f"jobs:\n  checkpoint_store: {store}\n")
    assert checkpoint_store_for("gcp", _task("~/ck"), "t1") == (f"{store}/t1", None)
    # the stores a submission checks: the default only where a candidate may use it
    assert stores_to_check(_task("~/ck")) == [(store, CONFIG_FIELD)]
    on_local = Task.from_dict({"run": "echo", "checkpoint": "~/ck",
                               "resources": {"infra": "local"}})
    assert stores_to_check(on_local) == []
    assert stores_to_check(_task({"store": "s3://own/x"})) == [("s3://own/x", "checkpoint.store")]


def test_gcs_and_azure_stores_are_synced_other_schemes_not_yet(launcher_home: Path) -> None:
    assert checkpoint_store_for("gcp", _task({"store": "gs://b/x"}), "t1") == ("gs://b/x/t1", None)
    assert checkpoint_store_for("azure", _task({"store": "az://acct/c/x"}), "t1") == (
        "az://acct/c/x/t1", None)
    https = "https://acct.blob.core.windows.net/c/x"
    assert checkpoint_store_for("aws", _task({"store": https}), "t1") == (f"{https}/t1", None)
    warnings: list[str] = []
    got = checkpoint_store_for("aws", _task({"store": "r2://b/x"}), "t1", warnings.append)
    assert got == (None, None) and "not synced" in warnings[0]


@pytest.mark.parametrize(("text", "fragment"), [
    ("jobs: {checkpoint_store: r2://b/x}", "jobs.checkpoint_store"),
    ("jobs: {checkpoint_store: az://acct}", "jobs.checkpoint_store"),
    ("jobs: {checkpoint_store: 'https://example.com/c/x'}", "jobs.checkpoint_store"),
    ("jobs: {checkpoint_save_interval: 0}", "jobs.checkpoint_save_interval"),
    ("jobs: {checkpoint_save_interval: soon}", "jobs.checkpoint_save_interval"),
    ("jobs: {checkpoint_sotre: s3://b}", "checkpoint_sotre"),
    ("jobs: [1]", "jobs"),
])
def test_bad_jobs_config_names_the_field(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_config(text)


def test_jobs_config_parses_durations() -> None:
    assert parse_config("jobs: {checkpoint_save_interval: 90s}").jobs.checkpoint_save_interval == 90
    assert parse_config("jobs: {checkpoint_save_interval: 1h}").jobs.checkpoint_save_interval == 3600
    assert parse_config("").jobs.checkpoint_store is None
