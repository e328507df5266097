"""Vast end to end, minus the container: the real launch path against the Vast API fake
(tests/vast_fake.py), with an sshd body at the instance's public IP and mapped port.

`launch` plans on the bundled catalog (1x-H100_SXM in "Florida, US, NA"), registers the
user's key on the account, searches offers, rents the cheapest, waits for `running`,
connects (direct SSH: public IP + the host port mapped to 22/tcp), syncs the workdir,
runs setup and the task; then exec, logs, status --refresh, down: nothing left.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.task import Task
from tests import netns
from tests.vast_fake import VastFake

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]
RESOURCES = {"cloud": "vast", "region": "Florida, US, NA", "instance_type": "1x-H100_SXM-32-65536"}


def test_one_node_launch_exec_down_on_vast(vast_cloud: VastFake, tmp_path: Path) -> None:
    fake = vast_cloud
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict({
        "name": "e2e", "workdir": str(work), "resources": RESOURCES,
        "setup": "echo setup > ~/setup.txt",
        "run": 'echo "rank=$LAUNCHER_NODE_RANK n=$LAUNCHER_NUM_NODES f=$(cat f.txt)"',
    })
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "vae2e", on_line=lines.append)
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.cloud == "vast" and result.region == "Florida, US, NA"
        (inst,) = fake.live()
        assert inst["label"] == "launcher-vae2e-0" and not inst["is_bid"]
        node = fake.bodies.wait_for([str(inst["id"])])[str(inst["id"])]
        assert any(ln.endswith("rank=0 n=1 f=synced") for ln in lines), lines
        assert (node.home / "setup.txt").read_text() == "setup\n"
        out: list[str] = []
        r = exec_("vae2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on " in ln for ln in out), out
        jobs = api.queue("vae2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        logs: list[str] = []
        api.logs("vae2e", jobs[0].id, follow=False, on_line=logs.append)
        assert any("f=synced" in ln for ln in logs), logs
        assert [r.name for r in api.status(refresh=True)] == ["vae2e"]
        api.down("vae2e")
        fake.bodies.sync()
        assert fake.instances == {} and fake.bodies.live_nodes() == {} and node.destroyed
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        for row in api.status():
            api.down(row.name)
