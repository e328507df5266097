"""The local cloud's nodes are processes: any cpus/memory request up to this machine's
size fits, exact (`cpus: 1`) or at least (`8+`); a larger one does not. Other clouds'
rows keep exact matching."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.catalog.local import _memory_gib, local_offers
from launcher.optimizer.ranking import rank
from launcher.task.model import Task

REPO = Path(__file__).resolve().parents[1]
CPUS = os.cpu_count() or 1
MEM = _memory_gib() or 0.0


@pytest.fixture(autouse=True)
def _no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "none")


def _local(resources: dict[str, object]) -> Task:
    return Task.from_dict({"resources": {"infra": "local", **resources}, "run": "true"})


@pytest.mark.parametrize("resources", [
    {"cpus": 1},
    {"cpus": "1"},
    {"cpus": CPUS},
    {"cpus": f"{CPUS}+"},
    {"memory": 1},
    {"memory": "512MB"},
    {"cpus": 1, "memory": max(1, int(MEM // 2))},
    {"cpus": 0.5, "memory": "1+"},
])
def test_requests_up_to_the_machine_fit_the_local_cloud(resources: dict[str, object]) -> None:
    r = rank(_local(resources), local_offers())
    assert [p.offer.instance_type for p in r.placements] == ["local"], r.rejected


@pytest.mark.parametrize(("resources", "reason"), [
    ({"cpus": CPUS + 1}, f"{CPUS} vCPUs < {CPUS + 1}"),
    ({"cpus": f"{CPUS * 4}+"}, f"{CPUS} vCPUs < {CPUS * 4}"),
    ({"memory": int(MEM) + 64}, "GiB <"),
])
def test_requests_beyond_the_machine_do_not(resources: dict[str, object], reason: str) -> None:
    r = rank(_local(resources), local_offers())
    assert r.placements == []
    assert any(reason in rej.reason for rej in r.rejected), r.rejected


def test_other_clouds_keep_exact_cpu_matching() -> None:
    row = replace(local_offers()[0], cloud="aws", region="us-east-1", zone="us-east-1a",
                  instance_type="m7i.large", vcpus=2.0, memory_gib=8.0, price=0.1,
                  spot_price=0.05)
    task = Task.from_dict({"resources": {"cloud": "aws", "cpus": 1}, "run": "true"})
    r = rank(task, [row])
    assert r.placements == [] and "2 vCPUs != 1" in r.rejected[0].reason


@pytest.mark.skipif(MEM < 8, reason="the issue's request needs a machine with 8 GiB")
def test_the_issue_request_launches_on_the_local_cloud() -> None:
    p = subprocess.run([sys.executable, "-c", "import sys; from launcher.cli import main; "
                        "main(sys.argv[1:])", "launch", "tests/task_files/small_request.yaml",
                        "--infra", "local", "-c", "small", "-y", "--down"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "(rank 0) fits" in p.stdout
