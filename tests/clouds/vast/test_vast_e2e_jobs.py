"""A managed spot job on Vast (API fake + an sshd body), outbid the way Vast does it.

The catalog is refreshed from the fake's offer search first (bid prices become spot
prices: the bundled snapshot has none for Vast). The controller (its own background
process: key from VAST_API_KEY, endpoint from config.yaml) rents the cheapest
interruptible offer in Florida; the test outbids it (Vast stops the container:
`actual_status` exited, `intended_status` still running; the body dies). The controller
must read PREEMPTED from Vast's own view (query), block that location, relaunch
elsewhere, and finish the job; nothing is left rented at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.cloud_e2e import NETNS_ONLY, assert_recovered_once, managed_jobs
from tests.vast_fake import VastFake
from tests.waiting import wait_until

pytestmark = NETNS_ONLY


@pytest.fixture
def spot_env(vast_cloud: VastFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[VastFake]:
    from launcher.api.catalog_refresh import catalog_refresh

    with managed_jobs(monkeypatch):
        catalog_refresh(cloud="vast")
        yield vast_cloud


def test_outbid_interruptible_instance_recovers_elsewhere(spot_env: VastFake,
                                                          tmp_path: Path) -> None:
    fake = spot_env
    path = tmp_path / "spot.yaml"
    path.write_text(
        "name: vaspot\n"
        "resources:\n  cloud: vast\n  instance_type: 1x-H100_SXM-32-65536\n  use_spot: true\n"
        "run: |\n  for i in $(seq 1 20); do echo step $i; sleep 0.2; done\n")
    t0 = time.monotonic()
    job = api.jobs_launch(str(path))
    store = JobStore()
    try:
        wait_until(lambda: api.jobs_status(job.id).status == "RUNNING", 60, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "vast" and first.use_spot and first.region == "Florida, US, NA"
        (inst,) = fake.live()
        assert inst["is_bid"] and inst["dph_total"] == 0.90
        fake.outbid(str(inst["id"]))

        reasons, attempts = assert_recovered_once(job.id, store)
        assert attempts[1].region == "Vietnam, VN, AS", [(a.region, a.outcome) for a in attempts]
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("step 20" in ln for ln in lines), lines[-10:]
        wait_until(lambda: fake.instances == {}, 30, "nothing left rented on the Vast fake")
        print(f"vast spot job with one outbid: {time.monotonic() - t0:.1f}s", *reasons, sep="\n")
    finally:
        store.close()
