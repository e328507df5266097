"""`launcher clouds cleanup gcp`: the network's shared firewall rules (SSH and internal
traffic to the `launcher` tag), which `down` never deletes, are deleted on demand unless
a launcher instance still exists in the project; the next launch creates them again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.api.cleanup import DELETED, KEPT, cleanup_leftovers
from tests.clouds.gcp.test_gcp_provision import make_cloud, req
from tests.gcp_fake import GCPFake

SHARED = ["launcher-default-internal", "launcher-default-ssh"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"})


def _rules(fake: GCPFake) -> list[str]:
    return sorted(fake.state.firewalls)


def test_rules_kept_while_an_instance_lives_then_deleted_and_recreated(
        gcp_env: GCPFake, tmp_path: Path) -> None:
    cloud = make_cloud(gcp_env)
    gcp_env.state.firewalls["my-rule"] = {"name": "my-rule", "targetTags": ["web"],
                                          "network": "global/networks/default"}
    cloud.provision(req("c1", n=2))
    assert [r for r in _rules(gcp_env) if r in SHARED] == SHARED
    report = cleanup_leftovers("gcp")
    assert [(i.name.split()[0], i.action) for i in report.items] == [
        (SHARED[0], KEPT), (SHARED[1], KEPT)]
    assert all(i.reason == "used by instance(s) c1-0, c1-1" for i in report.items)
    cloud.terminate("c1")
    out = _cli("clouds", "cleanup", "gcp", "--dryrun")
    assert out.returncode == 0, out
    for name in SHARED:
        assert f"would delete: firewall rule {name} (network default) in all regions" \
            in out.stdout
    assert "my-rule" not in out.stdout  # not launcher's: never listed
    out = _cli("clouds", "cleanup", "gcp", "-y", "--json")
    assert out.returncode == 0, out
    assert [i["action"] for i in json.loads(out.stdout)["items"]] == [DELETED, DELETED]
    assert _rules(gcp_env) == ["my-rule"]
    cloud.provision(req("c2", n=1))  # the next launch creates them again
    assert [r for r in _rules(gcp_env) if r in SHARED] == SHARED
    cloud.terminate("c2")
