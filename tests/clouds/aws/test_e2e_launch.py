"""AWS end to end, minus the VM: the real launch path against moto, with sshd bodies.

`launch` plans on the bundled catalog, provisions through EC2 (moto's server, reached
through AWS_ENDPOINT_URL only), connects to the instances' private IPs (the config's
`use_internal_ips`) where tests/cloud_bodies.py started an sshd node with the imported
key pair as root's authorized key, syncs the workdir, runs setup and the 2-node gang;
then exec, queue, logs, and down, after which moto has no pending/running instance
and the bodies are gone. Nothing is reached but loopback and the lab's bridge.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from launcher.api import clusters as api
from launcher.api.launch import launch
from tests.aws_moto import AWSFake
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

pytestmark = NETNS_ONLY

RESOURCES = {"cloud": "aws", "region": "us-east-1", "instance_type": "m6i.large"}


def test_two_node_launch_exec_queue_logs_down_on_aws(aws_cloud: AWSFake, tmp_path: Path) -> None:
    assert aws_cloud.bodies is not None
    task = workdir_task(tmp_path, RESOURCES, GANG_RUN, num_nodes=2,
                        setup="echo setup on $(hostname) > ~/setup.txt; echo setup on $(hostname)")
    lines: list[str] = []
    setup_lines: list[str] = []
    events: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(
            task, "awse2e", on_line=lines.append, on_setup_line=setup_lines.append,
            on_event=lambda e: events.append(f"{time.monotonic() - t0:.2f} {e}"),
        )
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, (lines, events)
        assert result.cloud == "aws" and result.region == "us-east-1"

        # two instances in one AZ of the test VPC, each with a body at its private IP
        live = sorted(aws_cloud.instances(), key=lambda i: i.private_ip)
        # moto's Instance: `placement` is an InstancePlacement object (its str() is a repr
        # unique per instance); `availability_zone` is the zone name
        zones = {i.availability_zone for i in live}
        assert len(live) == 2 and len(zones) == 1 and None not in zones, zones
        nodes = aws_cloud.bodies.wait_for([i.id for i in live])
        hostnames = {nodes[i.id].hostname for i in live}
        assert_ranks_ran(lines, hostnames)
        assert {ln.split(" on ")[1] for ln in setup_lines if "setup on" in ln} == hostnames
        # workdir and setup reached every body's own /root
        assert_setup_ran([nodes[inst.id] for inst in live], prefix="setup on ip-")

        jobs = exec_and_queue("awse2e", marker="exec on ip-")
        assert_job_logged_ranks("awse2e", jobs[0].id)

        # the CLI, as its own process (standard AWS variables only): queue, logs, and a
        # status refresh that asks EC2 (moto) for the cluster's instances
        queue = json.loads(cli("queue", "awse2e", "--json").stdout)
        assert len(queue) == 2, queue
        assert "exec on ip-" in cli("logs", "awse2e", str(jobs[1].id)).stdout
        assert_cli_status_up("awse2e")

        api.down("awse2e")
        aws_cloud.bodies.sync()
        leaks = aws_cloud.leaks()
        assert leaks.empty(), leaks
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        total_s = time.monotonic() - t0
        # ~10 s alone; a generous bound (a loaded CI machine runs 4 test workers, and this
        # path starts 3 CLI processes): it catches a hang or a timeout waited out, not jitter
        assert total_s < 90, (launch_s, total_s)
        print(f"launch {launch_s:.2f}s, whole test path {total_s:.2f}s", *events, sep="\n")
    finally:
        down_all()
