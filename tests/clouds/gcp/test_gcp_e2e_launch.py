"""GCP end to end, minus the VM: the real launch path against the Compute REST fake
(tests/gcp_fake.py, reached through CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE and an ADC
file whose token_uri is the fake's), with sshd bodies at the instances' networkIPs and
the `ssh-keys` metadata key authorized. launch -> exec -> queue/logs -> down; then
the fake lists no instance, no placement policy, no per-cluster firewall rule, and
the bodies are gone. Nothing is reached but loopback and the lab.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.task import Task
from tests import netns
from tests.gcp_fake import GCPFake

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(netns.unavailable_reason() is not None,
                       reason=f"sshd nodes unavailable: {netns.unavailable_reason()}"),
]

RESOURCES = {"cloud": "gcp", "region": "us-central1", "instance_type": "n2-standard-2"}
REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def test_two_node_launch_exec_logs_down_on_gcp(gcp_cloud: GCPFake, tmp_path: Path) -> None:
    bodies = gcp_cloud.bodies  # type: ignore[attr-defined]
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict({
        "name": "e2e", "num_nodes": 2, "workdir": str(work), "resources": RESOURCES,
        "setup": "echo setup on $(hostname) > ~/setup.txt",
        "run": 'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt)"',
    })
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
        hostnames = {n.hostname for n in nodes.values()}
        for rank in (0, 1):
            got = [ln for ln in lines if ln.startswith(f"(rank {rank}) rank={rank} host=")]
            assert len(got) == 1 and got[0].endswith("f=synced"), lines
            assert got[0].split("host=")[1].split()[0] in hostnames
        for node in nodes.values():
            assert (node.home / "setup.txt").read_text().startswith("setup on ")
        # the firewall rules of the network exist (created once, kept)
        assert {"launcher-default-ssh", "launcher-default-internal"} <= set(
            gcp_cloud.state.firewalls)

        out: list[str] = []
        r = exec_("gcpe2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on " in ln for ln in out), out
        jobs = api.queue("gcpe2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        first: list[str] = []
        api.logs("gcpe2e", jobs[0].id, follow=False, on_line=first.append)
        assert sum("rank=" in ln for ln in first) == 2, first

        # the CLI as its own process (only the documented settings reach the fake):
        # queue, logs, a status refresh that asks GCE, check naming project and account
        assert len(json.loads(_cli("queue", "gcpe2e", "--json").stdout)) == 2
        assert "exec on " in _cli("logs", "gcpe2e", str(jobs[1].id)).stdout
        rows = json.loads(_cli("status", "--refresh", "--json").stdout)
        assert [r["name"] for r in rows] == ["gcpe2e"] and rows[0]["status"] == "UP", rows
        check = _cli("check").stdout
        assert "project launcher-test, account launcher@launcher-test" in check, check

        api.down("gcpe2e")
        bodies.sync()
        assert gcp_cloud.leaks() == {"instances": [], "policies": [], "firewalls": []}
        assert not bodies.live_nodes()
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole {time.monotonic() - t0:.2f}s", *events, sep="\n")
    finally:
        for row in api.status():
            api.down(row.name)
