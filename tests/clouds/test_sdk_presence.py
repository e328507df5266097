"""launcher.clouds.sdk (a missing SDK extra as one typed error) and
launcher.clouds.presence (credentials configured, from env and files only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.catalog.refreshed import CatalogFetchError
from launcher.clouds import presence, sdk
from launcher.clouds.registry import credential_status
from launcher.clouds.sdk import MissingSDKError, as_missing_sdk, error_text, missing_sdk


@pytest.mark.parametrize("cloud", sorted(sdk.SDKS))
def test_installed_sdks_are_found_and_hidden_ones_are_not(
    cloud: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert missing_sdk(cloud) is None  # the test environment has every extra
    hidden = sdk.SDKS[cloud].modules[-1]
    monkeypatch.setitem(sys.modules, hidden, None)  # `import X` now fails, find_spec says None
    err = missing_sdk(cloud)
    assert isinstance(err, MissingSDKError) and err.cloud == cloud and err.extra == cloud
    assert err.module == hidden
    assert str(err).endswith(f"install it with: pip install 'launcher[{cloud}]'")
    assert "\n" not in str(err)


def test_clouds_without_an_extra_have_no_sdk_to_miss() -> None:
    assert missing_sdk("lambda") is None and missing_sdk("local") is None


def _raise_in(module_name: str, missing: str) -> BaseException:
    """A ModuleNotFoundError raised by code whose module is `module_name`."""
    code = f"import {missing}\n"
    try:
        exec(compile(code, "<cloud code>", "exec"), {"__name__": module_name})
    except ModuleNotFoundError as exc:
        return exc
    raise AssertionError("the import did not fail")


def test_a_dependency_missing_inside_a_cloud_package_is_that_clouds_sdk() -> None:
    """A module no SDK table names (a dependency of the SDK), imported by Azure's code."""
    exc = _raise_in("launcher.clouds.azure.session", "no_such_dependency_xyz")
    err = as_missing_sdk(exc)
    assert err is not None and err.cloud == "azure" and err.module == "no_such_dependency_xyz"


def test_a_missing_module_is_mapped_by_its_name_outside_the_cloud_packages() -> None:
    err = as_missing_sdk(ModuleNotFoundError("No module named 'botocore'", name="botocore"))
    assert err is not None and err.cloud == "aws"
    err = as_missing_sdk(ModuleNotFoundError("x", name="google.cloud.compute_v1"))
    assert err is not None and err.cloud == "gcp"


def test_what_is_not_a_missing_sdk_stays_itself() -> None:
    assert as_missing_sdk(ModuleNotFoundError("x", name="launcher.nope")) is None  # our bug
    assert as_missing_sdk(ModuleNotFoundError("x", name="numpy")) is None
    assert as_missing_sdk(ValueError("x")) is None
    assert error_text(ValueError("bad"), "aws") == "ValueError: bad"


def test_a_wrapped_import_error_is_found_through_its_cause() -> None:
    try:
        try:
            import no_such_module_abc  # noqa: F401
        except ModuleNotFoundError as exc:
            raise CatalogFetchError(f"ModuleNotFoundError: {exc}") from exc
    except CatalogFetchError as wrapped:
        err = as_missing_sdk(wrapped, "gcp")
    assert err is not None and err.cloud == "gcp"


def test_sdk_boundary_converts_and_passes_the_rest() -> None:
    with pytest.raises(MissingSDKError, match=r"launcher\[nebius\]"), sdk.sdk_boundary("nebius"):
        import no_such_nebius_part  # noqa: F401
    with pytest.raises(KeyError), sdk.sdk_boundary("nebius"):
        raise KeyError("x")


# ---------------------------------------------------------------- presence


def _bare_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in [v for v in os.environ if v.startswith(
            ("AWS_", "AZURE_", "GOOGLE_", "NEBIUS_", "RUNPOD_", "LAMBDA_", "VAST_", "MSI_",
             "IDENTITY_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    from launcher.clouds.aws import session

    monkeypatch.setattr(session, "_is_ec2_host", lambda: False)


@pytest.mark.parametrize(("cloud", "env", "says"), [
    ("aws", {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}, "environment variables"),
    ("nebius", {"NEBIUS_IAM_TOKEN": "t"}, "NEBIUS_IAM_TOKEN"),
    ("lambda", {"LAMBDA_API_KEY": "k"}, "LAMBDA_API_KEY"),
    ("vast", {"VAST_API_KEY": "k"}, "VAST_API_KEY"),
    ("runpod", {"RUNPOD_API_KEY": "k"}, "RUNPOD_API_KEY"),
    ("azure", {"AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t", "AZURE_CLIENT_SECRET": "s",
               "AZURE_SUBSCRIPTION_ID": "sub"}, "service principal"),
])
def test_presence_from_the_environment(cloud: str, env: dict[str, str], says: str,
                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _bare_home(tmp_path, monkeypatch)
    absent = presence.credentials_present(cloud)
    assert absent is not None and not absent.enabled
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    found = presence.credentials_present(cloud)
    assert found is not None and found.enabled and says in found.reason, found
    # configured but unverified: what a dry run uses; check() would ask the cloud
    assert credential_status(cloud, verify=False) == found


def test_presence_with_credentials_but_no_sdk_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bare_home(tmp_path, monkeypatch)
    monkeypatch.setenv("NEBIUS_IAM_TOKEN", "t")
    monkeypatch.setitem(sys.modules, "nebius", None)
    for status in (presence.credentials_present("nebius"), credential_status("nebius")):
        assert status is not None and not status.enabled
        assert "NEBIUS_IAM_TOKEN" in status.reason
        assert "pip install 'launcher[nebius]'" in status.reason


def test_local_and_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = presence.credentials_present("local")
    assert local is not None and local.enabled
    ssh = presence.credentials_present("ssh")
    assert ssh is not None and not ssh.enabled and "ssh_node_pools" in ssh.reason
    assert presence.credentials_present("oci") is None  # no probe: no provisioner
