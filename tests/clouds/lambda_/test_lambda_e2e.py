"""Lambda end to end, minus the VM: the real launch path against the Lambda API fake
(tests/lambda_fake.py), with sshd bodies at the private IPs the fake hands out.

`launch` plans on the bundled catalog (cpu_4x_general in us-east-1), registers the
user's key, launches one instance per node, waits for `active`, connects to the private
IPs (`lambda.use_internal_ips`) where an sshd node runs with the registered key, syncs the
workdir, runs setup and the 2-node gang; then exec, queue, logs (also through the CLI in
its own process), status --refresh, and down, after which the fake holds nothing.
"""

from __future__ import annotations

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
from tests.lambda_fake import LambdaFake

pytestmark = NETNS_ONLY


def test_two_node_launch_exec_logs_down_on_lambda(lambda_cloud: LambdaFake,
                                                  tmp_path: Path) -> None:
    fake = lambda_cloud
    task = workdir_task(tmp_path, {"cloud": "lambda", "region": "us-east-1",
                                   "instance_type": "cpu_4x_general"}, GANG_RUN, num_nodes=2)
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "lme2e", on_line=lines.append)
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.cloud == "lambda" and result.region == "us-east-1"
        live = fake.live()
        assert sorted(i["name"] for i in live) == ["launcher-lme2e-0", "launcher-lme2e-1"]
        nodes = fake.bodies.wait_for([i["id"] for i in live])
        assert_ranks_ran(lines, {n.hostname for n in nodes.values()})
        assert_setup_ran(nodes.values())

        jobs = exec_and_queue("lme2e")
        assert_job_logged_ranks("lme2e", jobs[0].id)
        assert "exec on " in cli("logs", "lme2e", str(jobs[1].id)).stdout
        assert_cli_status_up("lme2e")
        assert "LAMBDA_API_KEY" in cli("check").stdout

        api.down("lme2e")
        fake.bodies.sync()
        assert fake.live() == [] and fake.bodies.live_nodes() == {}
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        down_all()
