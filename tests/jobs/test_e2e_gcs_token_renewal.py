"""The GCS token shipped to nodes without a metadata server is renewed while the job runs.

A managed job on the local cloud (whose nodes have no GCE metadata server, like any
node off GCP) saves its checkpoint to the GCS fake every 0.5 s. The client mints tokens
from a service-account ADC file whose `token_uri` is the fake's; the fake hands out
tokens that live 8 s and refuses them afterwards. The job runs for several lifetimes:
its saves after the first token expired must still succeed, with tokens the controller
minted later and wrote to the nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.api import jobs as api
from tests.checkpoint_view import committed_now
from tests.gcp_fixtures import _rsa_pem
from tests.gcs_fake import GCSFake, gcs  # noqa: F401 - the fixture

from .test_e2e_local import _status, _task, fast_controller  # noqa: F401

LIFETIME_S = 8.0
COUNT_TO = 60  # 0.3 s a step: about 18 s, more than two token lifetimes


@pytest.fixture
def short_tokens(gcs: GCSFake, tmp_path: Path,  # noqa: F811
                 monkeypatch: pytest.MonkeyPatch) -> GCSFake:
    gcs.token_lifetime = LIFETIME_S
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({
        "type": "service_account", "project_id": "proj", "private_key_id": "k1",
        "private_key": _rsa_pem(), "client_email": "ckpt@proj.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": f"{gcs.url}/token"}))
    monkeypatch.delenv("LAUNCHER_GCS_TOKEN")  # the fixed token the fake always accepts
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server anywhere
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    return gcs


def test_saves_after_the_first_token_expired_still_succeed(
        tmp_path: Path, launcher_home: Path, short_tokens: GCSFake) -> None:
    gcs = short_tokens  # noqa: F811
    (launcher_home / "config.yaml").write_text("jobs:\n  checkpoint_save_interval: 0.5\n")
    task = Path(_task(tmp_path, count_to=COUNT_TO, step_s=0.3))
    task.write_text(task.read_text().replace(
        "name: counter", "name: counter\ncheckpoint: {store: gs://ckpt-bucket/run}"))
    job = api.jobs_launch(str(task))
    final = api.jobs_wait(job.id, timeout=120)
    assert final.status == "SUCCEEDED", _status(job.id)

    first_token, (_, first_expiry) = min(gcs.minted.items(), key=lambda kv: kv[1][0])
    late = [(token, req, status) for at, token, req, status in gcs.auth
            if at > first_expiry + 1]
    assert late, "no save ran after the first token expired"
    # saves went on after the first token expired (the fake refuses it by then), with
    # tokens the controller minted later and put on the nodes
    renewed = {token for token, req, status in late
               if req.startswith("POST /upload/") and status == 200}
    assert renewed and first_token not in renewed, sorted({(t, s) for t, _, s in late})
    assert len(gcs.minted) >= 3  # the launch's token, then renewals at half-life
    view = committed_now(lambda: gcs.keys("ckpt-bucket", "run/"),
                         lambda k: gcs.read("ckpt-bucket", k), "run/", per_task=True)
    assert json.loads(view["count.json"])["count"] == COUNT_TO  # the save at exit worked


def test_renewal_is_due_at_half_life_and_at_once_for_an_adopted_cluster(
        gcs: GCSFake, launcher_home: Path) -> None:  # noqa: F811
    import time

    from launcher.jobs.node_credentials import NodeCredentials

    creds = NodeCredentials()
    now = time.time()
    creds.track("launched", "gs://b/run/t1")  # LAUNCHER_GCS_TOKEN: taken to live 55 min
    due = creds.due("launched")
    assert due is not None and abs(due - (now + 1650)) < 5
    creds.track("adopted", "gs://b/run/t1", shipped_now=False)  # what it holds is unknown
    assert creds.due("adopted") == 0.0
    creds.track("on-s3", "s3://b/run/t1")  # keys that do not expire: nothing to renew
    assert creds.due("on-s3") is None
    creds.forget("launched")
    assert creds.due("launched") is None
