"""The local cloud's spot-capacity switch (fault injection for the DEADLINE strategy's
tests): while off, spot launches fail with a CapacityError, on-demand ones do not."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.clouds.base import CapacityError, ProvisionRequest
from launcher.clouds.local import LocalCloud, local_root, set_spot_capacity, spot_capacity

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
REQ = ProvisionRequest(cluster_name="s", cloud="local", region="local", zone=None,
                       instance_type="local", num_nodes=1, use_spot=True, accelerator=None,
                       accelerator_count=0)


def test_spot_launches_are_refused_while_capacity_is_off(launcher_home: Path) -> None:
    cloud = LocalCloud()
    assert spot_capacity()
    set_spot_capacity(False)
    assert not spot_capacity()
    with pytest.raises(CapacityError, match="no spot capacity"):
        cloud.provision(REQ)
    assert not (local_root() / "s").exists()  # nothing left behind
    info = cloud.provision(dataclasses.replace(REQ, cluster_name="od", use_spot=False))
    assert not info.use_spot  # on-demand is not affected
    cloud.terminate("od")
    set_spot_capacity(True)
    set_spot_capacity(True)  # idempotent
    assert cloud.provision(REQ).use_spot
    cloud.terminate("s")


def test_cli_switches_capacity_and_refuses_a_bad_value(launcher_home: Path) -> None:
    out = subprocess.run([*CLI, "local", "spot-capacity", "off"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "off" in out.stderr and not spot_capacity()
    out = subprocess.run([*CLI, "local", "spot-capacity", "maybe"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "'on' or 'off'" in out.stderr
    assert "Traceback" not in out.stderr and not spot_capacity()
    out = subprocess.run([*CLI, "local", "spot-capacity", "on"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and spot_capacity()
