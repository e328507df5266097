"""The `slurm:` config section, task placement on slurm, and job-state mapping."""

from __future__ import annotations

import pytest

from launcher.clouds.base import NodeState
from launcher.clouds.slurm.cloud import end_reason, node_state
from launcher.clouds.slurm.offers import parse_instance_type
from launcher.clouds.slurm.parse import parse_jobs
from launcher.config.settings import parse_config
from launcher.errors import ConfigError
from launcher.task.model import Task
from tests.clouds.slurm.test_slurm_parse import read

FULL = """\
slurm:
  clusters:
    lab:
      login: login1.example.org
      user: alice
      identity_file: ~/.ssh/id_ed25519
      partitions: [gpu, preempt]
      pricing: 1.5
      fabric: {gpu: {fabric: infiniband, gbps: 400}}
      provision_timeout: 120
      gpu_models: {preempt: A100}
      time_limit: 1d2h30s
"""


def test_full_section_parses() -> None:
    c = parse_config(FULL).slurm.clusters["lab"]
    assert (c.login, c.user, c.partitions, c.pricing, c.provision_timeout) == (
        "login1.example.org", "alice", ("gpu", "preempt"), 1.5, 120.0)
    assert c.fabric["gpu"].fabric == "infiniband" and c.fabric["gpu"].gbps == 400
    assert c.identity_file is not None and not c.identity_file.startswith("~")
    assert c.gpu_models == {"preempt": "A100"} and not c.local
    assert c.time_limit == 26 * 60 + 1  # whole minutes, rounded up (Slurm's unit)
    assert parse_config("slurm: {clusters: {here: {login: localhost}}}").slurm.clusters["here"].local


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("slurm: {clusters: {lab: {user: a}}}", "slurm.clusters.lab.login"),
        ("slurm: {clusters: {lab: {login: h, pricing: -1}}}", "slurm.clusters.lab.pricing"),
        ("slurm: {clusters: {lab: {login: h, port: 0}}}", "slurm.clusters.lab.port"),
        ("slurm: {clusters: {lab: {login: h, partitions: 3}}}", "slurm.clusters.lab.partitions"),
        ("slurm: {clusters: {lab: {login: h, fabric: {gpu: {fabric: myrinet}}}}}",
         "slurm.clusters.lab.fabric.gpu.fabric"),
        ("slurm: {clusters: {lab: {login: h, fabric: {gpu: {fabric: roce, gbps: 0}}}}}",
         "slurm.clusters.lab.fabric.gpu.gbps"),
        ("slurm: {clusters: {lab: {login: h, colour: red}}}", "slurm.clusters.lab.colour"),
        ("slurm: {clusters: {lab: {login: h, provision_timeout: 0}}}", "slurm.clusters.lab.provision_timeout"),
        ("slurm: {clusters: {'bad name': {login: h}}}", "slurm.clusters.bad name"),
        ("slurm: {clusters: {lab: {login: h, time_limit: 90}}}", "slurm.clusters.lab.time_limit"),
        ("slurm: {clusters: {lab: {login: h, time_limit: 2 days}}}", "slurm.clusters.lab.time_limit"),
        ("slurm: {clusters: {lab: {login: h, host_key: AAAAC3Nz}}}", "slurm.clusters.lab.host_key"),
        ("slurm: {clusters: {lab: {login: h, command_timeout: 0}}}", "slurm.clusters.lab.command_timeout"),
        ("slurm: {nodes: 3}", "slurm.nodes"),
        ("slurm: [1]", "slurm"),
    ],
)
def test_bad_values_name_their_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    assert f"field '{field}'" in str(err.value)


@pytest.mark.parametrize(
    ("where", "region", "zone"),
    [("infra: slurm/lab", "lab", None), ("infra: slurm/lab/gpu", "lab", "gpu"),
     ("cloud: slurm\n  region: lab", "lab", None)],
)
def test_tasks_name_slurm_clusters_and_partitions(where: str, region: str, zone: str | None) -> None:
    task = Task.from_yaml_str(f"resources:\n  {where}\nrun: x\n", require_values=False)
    r = task.resources.base
    assert (r.cloud, r.region, r.zone) == ("slurm", region, zone)


def test_job_states_map_to_node_states() -> None:
    jobs = {j.job_id: j for j in parse_jobs(read("20.11", "jobs"))}
    assert node_state(jobs["4101"]) == NodeState.RUNNING
    assert node_state(jobs["4098"]) == NodeState.TERMINATED
    assert "NODE_FAIL" in end_reason(jobs["4098"])
    assert end_reason(jobs["4097"]) == "Slurm job 4097 TIMEOUT: killed at its time limit (30 min)"
    requeued = {j.job_id: j for j in parse_jobs(read("23.02", "jobs"))}["901"]
    assert node_state(requeued) == NodeState.PREEMPTED  # Restarts=1: the gang was lost once
    later = {j.job_id: j for j in parse_jobs(read("24.05", "jobs"))}
    assert node_state(later["76990"]) == NodeState.TERMINATED
    assert end_reason(later["76990"]).endswith("CANCELLED: cancelled")


def test_instance_types_round_trip() -> None:
    assert parse_instance_type("a100x2of4") == ("a100", 2, 4)
    assert parse_instance_type("gpux1of8") == (None, 1, 8)
    assert parse_instance_type("cpu") == (None, 0, 0)
    with pytest.raises(ValueError, match="not a Slurm instance type"):
        parse_instance_type("p4d.24xlarge")


def test_a_task_sets_its_own_time_limit_in_whole_minutes() -> None:
    task = Task.from_yaml_str("config:\n  slurm:\n    time_limit: 90.5m\nrun: x\n")
    assert task.config is not None and task.config.provider_overrides() == {"slurm": {"time_limit": 91}}
    with pytest.raises(Exception, match="config.slurm.time_limit.*needs a unit"):
        Task.from_yaml_str("config:\n  slurm:\n    time_limit: 90\nrun: x\n")


def test_a_job_completing_after_its_time_limit_is_already_timeout() -> None:
    from launcher.clouds.slurm.parse import JobRecord

    job = JobRecord("12", "launcher-x", "COMPLETING", "TimeLimit", "ltn1", 0,
                    "launcher-cluster=x,limit=task", 1, 1)
    assert end_reason(job) == "Slurm job 12 TIMEOUT: killed at its time limit (1 min)"
    assert node_state(job) == NodeState.TERMINATED
    other = JobRecord("13", "launcher-x", "COMPLETING", "None", "ltn1", 0, "", 1, 1)
    assert end_reason(other).startswith("Slurm job 13 COMPLETING")
