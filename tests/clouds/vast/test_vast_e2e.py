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

from launcher.api import clusters as api
from launcher.api.launch import launch
from tests.cloud_e2e import NETNS_ONLY, down_all, exec_and_queue, workdir_task
from tests.vast_fake import VastFake

pytestmark = NETNS_ONLY
RESOURCES = {"cloud": "vast", "region": "Florida, US, NA", "instance_type": "1x-H100_SXM-32-65536"}


def test_one_node_launch_exec_down_on_vast(vast_cloud: VastFake, tmp_path: Path) -> None:
    fake = vast_cloud
    task = workdir_task(tmp_path, RESOURCES,
                        'echo "rank=$LAUNCHER_NODE_RANK n=$LAUNCHER_NUM_NODES f=$(cat f.txt)"',
                        setup="echo setup > ~/setup.txt")
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
        jobs = exec_and_queue("vae2e")
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
        down_all()
