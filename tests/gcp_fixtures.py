"""GCP for tests: the Compute REST fake (tests/gcp_fake.py), the product pointed at it
through its documented settings only, and bodies.

- `gcp_server` (session): one `GCPFake` on 127.0.0.1 for the session; its instances'
  IPs lie in the netns lab's /24 (or 10.123.255.0/24 without a lab: no bodies then).
- `gcp_env` (function): the fake reset; `CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`
  (gcloud's own endpoint override, which the product honours) pointing at it;
  `GOOGLE_APPLICATION_CREDENTIALS` = a service-account key file (a fresh RSA key)
  whose `token_uri` is the fake's `/token` (google-auth's real JWT-bearer flow, against
  the fake; authorized-user files cannot name their token endpoint);
  `CLOUDSDK_CONFIG` an empty dir; `$LAUNCHER_HOME/config.yaml` with
  `gcp: {project: launcher-test, use_internal_ips: true, ssh_user: root}`.
- `gcp_cloud` (function, needs network namespaces): `gcp_env` plus a `CloudBodies`
  watcher (an sshd node per PROVISIONING/STAGING/RUNNING instance at its networkIP with
  its `ssh-keys` metadata key authorized for root), and a ConnectGuard: this process
  connects to loopback and the lab only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gcp_fake import PROJECT, ZONE_OFFSETS, GCPFake

RESERVED = (".64/26", ".128/25")  # the zones' /28s (the same ranges AWS's fixture reserves)


_PEM: list[str] = []


def _rsa_pem() -> str:
    """One RSA key per session (the service-account key file's)."""
    if not _PEM:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _PEM.append(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()).decode())
    return _PEM[0]


def _lab_or_none(request: pytest.FixtureRequest) -> Any:
    try:
        lab = request.getfixturevalue("netns_lab")
    except pytest.skip.Exception:
        return None
    return lab if lab.netns_mode else None


@pytest.fixture(scope="session")
def gcp_server(request: pytest.FixtureRequest) -> Iterator[GCPFake]:
    lab = _lab_or_none(request)
    subnet = lab.subnet if lab is not None else "10.123.255.0/24"
    if lab is not None:
        for suffix in RESERVED:
            lab.reserve(lab.prefix + suffix)
    assert max(ZONE_OFFSETS.values()) + 16 <= 256
    fake = GCPFake(subnet).serve()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def gcp_env(gcp_server: GCPFake, launcher_home: Path, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[GCPFake]:
    gcp_server.reset()
    from launcher.clouds.gcp import network

    network._known.clear()  # the product's per-process "rule exists" cache: a new project
    gcloud = tmp_path / "gcloud"
    gcloud.mkdir()
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "k1",
        "private_key": _rsa_pem(), "client_email": f"launcher@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": f"{gcp_server.endpoint}/token"}))
    for var in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_ACTIVE_CONFIG_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(gcloud))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    monkeypatch.setenv("CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE",
                       f"{gcp_server.endpoint}/compute/v1/")
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth: never probe the metadata server
    config = launcher_home / "config.yaml"
    body: dict[str, Any] = (yaml.safe_load(config.read_text()) if config.exists() else {}) or {}
    body["gcp"] = {"project": PROJECT, "use_internal_ips": True, "ssh_user": "root"}
    config.write_text(yaml.safe_dump(body))
    from launcher.clouds import registry

    registry.get_cloud.cache_clear()  # a cloud object built under another test's settings
    try:
        yield gcp_server
    finally:
        registry.get_cloud.cache_clear()


@pytest.fixture
def gcp_cloud(request: pytest.FixtureRequest, gcp_env: GCPFake) -> Iterator[GCPFake]:
    from tests.aws_moto import ConnectGuard
    from tests.cloud_bodies import CloudBodies

    lab = _lab_or_none(request)
    if lab is None:
        pytest.skip("GCP bodies need network-namespace sshd nodes (netns lab unavailable)")
    bodies = CloudBodies(lab, gcp_env.list_instances, name="gcp").start()
    gcp_env.on_delete.append(bodies.kill)
    gcp_env.bodies = bodies  # type: ignore[attr-defined]
    try:
        with ConnectGuard(lab.subnet) as guard:
            yield gcp_env
    finally:
        gcp_env.on_delete.clear()
        gcp_env.bodies = None  # type: ignore[attr-defined]
        bodies.close()
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"
