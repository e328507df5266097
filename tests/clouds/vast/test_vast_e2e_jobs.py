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
from tests import netns
from tests.vast_fake import VastFake
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]


@pytest.fixture
def spot_env(vast_cloud: VastFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[VastFake]:
    from launcher.api.catalog_refresh import catalog_refresh

    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    catalog_refresh(cloud="vast")
    try:
        yield vast_cloud
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)


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

        final = api.jobs_wait(job.id, timeout=90)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED", reasons
        assert final.recoveries == 1, reasons
        attempts = store.attempts(job.id)
        assert len(attempts) == 2 and attempts[1].cause == "preemption"
        assert attempts[0].outcome and "PREEMPT" in attempts[0].outcome.upper(), attempts[0]
        assert attempts[1].region == "Vietnam, VN, AS", [(a.region, a.outcome) for a in attempts]
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("step 20" in ln for ln in lines), lines[-10:]
        wait_until(lambda: fake.instances == {}, 30, "nothing left rented on the Vast fake")
        print(f"vast spot job with one outbid: {time.monotonic() - t0:.1f}s", *reasons, sep="\n")
    finally:
        store.close()
