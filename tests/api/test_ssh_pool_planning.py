"""SSH pools in planning and listings (issue 8, items 10 and 11): a CPU-only task fits a
GPU pool's hosts; messages about the user's machines never speak of "the catalog";
`gpus` filters accept the ssh cloud and the pool names its listing shows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.api import gpus
from launcher.api.planning import plan
from launcher.catalog.locations import UnknownLocationError
from launcher.errors import NoPlacementError
from launcher.task.model import Task


@pytest.fixture
def gpu_pool(launcher_home: Path) -> None:
    (launcher_home / "config.yaml").write_text(yaml.safe_dump({"ssh_node_pools": {
        "lab": {"user": "root", "gpus": {"H100": 8}, "cpus": 32, "memory_gib": 256,
                "hosts": ["192.0.2.10", "192.0.2.11"]},
    }}))


def _task(resources: str, num_nodes: int = 1) -> Task:
    return Task.from_yaml_str(f"num_nodes: {num_nodes}\nresources:\n{resources}run: echo hi\n")


def test_a_cpu_only_task_fits_a_gpu_pool(gpu_pool: None) -> None:
    p = plan(_task("  infra: ssh\n  cpus: 4+\n  memory: 16+\n", num_nodes=2))
    chosen = p.chosen_placement
    assert chosen is not None and (chosen.cloud, chosen.region) == ("ssh", "lab")
    assert chosen.num_nodes == 2
    # no cpus asked at all: any host fits
    assert plan(_task("  infra: ssh/lab\n")).chosen_placement is not None


def test_a_cpu_only_task_larger_than_the_hosts_says_why_without_the_catalog(
        gpu_pool: None) -> None:
    with pytest.raises(NoPlacementError) as err:
        plan(_task("  infra: ssh\n  cpus: 64+\n"))
    message = str(err.value)
    assert "at most 32 vCPUs" in message and "catalog" not in message


def test_a_gpu_the_pools_lack_is_explained_in_terms_of_pools(gpu_pool: None) -> None:
    with pytest.raises(NoPlacementError) as err:
        plan(_task("  infra: ssh\n  accelerators: A100:1\n"))
    message = str(err.value)
    assert "catalog" not in message and "ssh" in message


def test_gpus_filters_accept_the_ssh_cloud_and_its_pools(gpu_pool: None) -> None:
    unfiltered = [(r.offer.cloud, r.offer.region) for r in gpus("H100", 8).rows]
    assert ("ssh", "lab") in unfiltered
    by_cloud = gpus("H100", 8, cloud="ssh").rows
    assert [(r.offer.cloud, r.offer.region) for r in by_cloud] == [("ssh", "lab")]
    by_region = gpus("H100", 8, region="lab").rows
    assert [(r.offer.cloud, r.offer.region) for r in by_region] == [("ssh", "lab")]
    assert [r.offer.region for r in gpus("H100", cloud="SSH", region="LAB").rows] == ["lab"]
    with pytest.raises(UnknownLocationError, match="Unknown region 'lba'.*lab"):
        gpus("H100", cloud="ssh", region="lba")
    # catalog regions still work beside the pools
    assert {r.offer.region for r in gpus("H100", 8, cloud="aws", region="us-east-1").rows} == {
        "us-east-1"}
