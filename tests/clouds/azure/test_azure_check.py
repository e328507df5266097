"""`check()`: decided from env and files first (no SDK import, no network without
credentials), then a token from DefaultAzureCredential whose claims name the identity."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.clouds.azure.cloud import AzureCloud
from launcher.clouds.azure.session import local_credentials_source, subscription_id
from launcher.config.azure import AzureSettings
from tests.azure_fake import SUBSCRIPTION, USER, AzureFake


def test_no_credentials_answers_without_the_sdk(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in [v for v in os.environ if v.startswith(("AZURE_", "MSI_", "IDENTITY_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    for mod in [m for m in sys.modules if m == "azure" or m.startswith("azure.")]:
        monkeypatch.delitem(sys.modules, mod)
    status = AzureCloud(settings=AzureSettings()).check()
    assert not status.enabled and "az login" in status.reason
    assert not [m for m in sys.modules if m.startswith("azure.")]


def test_cli_login_names_identity_and_subscription(azure_fake: AzureFake) -> None:
    assert local_credentials_source() == "Azure CLI login"
    assert subscription_id(AzureSettings()) == SUBSCRIPTION
    status = AzureCloud().check()
    assert status.enabled, status
    assert USER in status.reason and SUBSCRIPTION in status.reason


def test_env_subscription_and_config_win(azure_fake: AzureFake,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", "env-sub")
    assert subscription_id(AzureSettings()) == "env-sub"
    assert subscription_id(AzureSettings(subscription_id="cfg-sub")) == "cfg-sub"


def test_unusable_service_principal_is_reported(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("AZURE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("AZURE_CLIENT_ID", "app")
    monkeypatch.setenv("AZURE_TENANT_ID", "not a tenant!")  # refused before any network
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "s")
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", "sub")
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "EnvironmentCredential")
    status = AzureCloud(settings=AzureSettings()).check()
    assert not status.enabled and "unusable" in status.reason, status
