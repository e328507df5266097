"""GCP end to end, minus the VM: the real launch path against the Compute REST fake
(tests/gcp_fake.py, reached through CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE and an ADC
file whose token_uri is the fake's), with sshd bodies at the instances' networkIPs and
the `ssh-keys` metadata key authorized. launch -> exec -> queue/logs -> down; then
the fake lists no instance, no placement policy, no per-cluster firewall rule, and
the bodies are gone. Nothing is reached but loopback and the lab.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from launcher.api import clusters as api
from launcher.api.launch import launch
from tests.cloud_e2e import (
    GANG_RUN,
    NETNS_ONLY,
    assert_cli_status_up,
    assert_job_logged_ranks,
    assert_ranks_ran,
    assert_setup_ran,
    cli,
    down_all,
    exec_and_queue,
    workdir_task,
)
from tests.gcp_fake import GCPFake

pytestmark = NETNS_ONLY

RESOURCES = {"cloud": "gcp", "region": "us-central1", "instance_type": "n2-standard-2"}


def test_two_node_launch_exec_logs_down_on_gcp(gcp_cloud: GCPFake, tmp_path: Path) -> None:
    bodies = gcp_cloud.bodies  # type: ignore[attr-defined]
    task = workdir_task(tmp_path, RESOURCES, GANG_RUN, num_nodes=2)
    lines: list[str] = []
    events: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "gcpe2e", on_line=lines.append,
                        on_event=lambda e: events.append(f"{time.monotonic() - t0:.2f} {e}"))
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, (lines, events)
        assert result.cloud == "gcp" and result.region == "us-central1"

        live = gcp_cloud.live()
        assert len(live) == 2 and len({i["zone"] for i in live}) == 1
        assert all(i["labels"]["launcher-cluster"] == "gcpe2e" for i in live)
        assert sorted(i["labels"]["launcher-rank"] for i in live) == ["0", "1"]
        assert all(i["tags"]["items"][0] == "launcher" for i in live)
        assert "accessConfigs" not in live[0]["networkInterfaces"][0]  # use_internal_ips
        nodes = bodies.wait_for([i["id"] for i in live])
        assert_ranks_ran(lines, {n.hostname for n in nodes.values()})
        assert_setup_ran(nodes.values())
        # the firewall rules of the network exist (created once, kept)
        assert {"launcher-default-ssh", "launcher-default-internal"} <= set(
            gcp_cloud.state.firewalls)

        jobs = exec_and_queue("gcpe2e")
        assert_job_logged_ranks("gcpe2e", jobs[0].id)

        # the CLI as its own process (only the documented settings reach the fake):
        # queue, logs, a status refresh that asks GCE, check naming project and account
        assert len(json.loads(cli("queue", "gcpe2e", "--json").stdout)) == 2
        assert "exec on " in cli("logs", "gcpe2e", str(jobs[1].id)).stdout
        assert_cli_status_up("gcpe2e")
        check = cli("check").stdout
        assert "project launcher-test, account launcher@launcher-test" in check, check

        api.down("gcpe2e")
        bodies.sync()
        assert gcp_cloud.leaks() == {"instances": [], "policies": [], "firewalls": []}
        assert not bodies.live_nodes()
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole {time.monotonic() - t0:.2f}s", *events, sep="\n")
    finally:
        down_all()
