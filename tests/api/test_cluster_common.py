"""launcher/api/cluster_common.py: why an existing cluster cannot run a task, in the
catalog's words (accelerator names as the catalog spells them, not as typed)."""

from __future__ import annotations

import time

from launcher.api.cluster_common import fit_problem
from launcher.state.db import ClusterRecord, ClusterStatus
from launcher.task.model import Task


def cluster(accelerator: str | None, count: float = 0) -> ClusterRecord:
    now = time.time()
    return ClusterRecord(
        name="c", cloud="local", region="local", zone=None, instance_type="local",
        num_nodes=1, use_spot=False, accelerator=accelerator, accelerator_count=count,
        status=ClusterStatus.UP, hourly_cost=0.0, autostop_minutes=None, autostop_down=False,
        launched_at=now, status_changed_at=now, task_name=None, resources="1x local",
        ssh_key_path=None, owner=None,
    )


def task(accelerators: str) -> Task:
    return Task.from_yaml_str(f"resources:\n  accelerators: {accelerators}\nrun: echo\n")


def test_mismatch_names_the_accelerator_as_the_catalog_spells_it() -> None:
    assert fit_problem(cluster(None), task("h100:1")) == "it asks for H100:1"
    assert fit_problem(cluster("A100", 8), task("a100-80gb:8")) == "it asks for A100-80GB:8"


def test_same_accelerator_in_another_spelling_fits() -> None:
    assert fit_problem(cluster("H100", 8), task("h100:8")) is None
    assert fit_problem(cluster("H100", 8), task("h100:4")) is None
