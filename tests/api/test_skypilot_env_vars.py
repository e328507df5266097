"""Every SKYPILOT_* variable of setup and of run, as SkyPilot sets it (its docs'
"Environment variables for setup / for run"), each with its LAUNCHER_* twin: on the
local cloud (2 nodes with 2 GPUs each) and on sshd nodes in network namespaces.

One launch per cloud dumps the environment of setup (every node) and of run (a 2-node
job, then a 1-node job on the same cluster); each variable is its own test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.task.model import Task

DUMP = 'python3 -c "import json, os; print(json.dumps(dict(os.environ)))" > ~/{name}.json'


@dataclass
class Dumps:
    cloud: str
    cluster: str
    ips: list[str]
    gpus: str
    setup: list[dict[str, str]]  # per node rank
    run: list[dict[str, str]]  # the 2-node job, per rank
    run1: dict[str, str]  # a 1-node job on the same cluster
    job_id: int


def _collect(cloud: str, homes: list[Path], infra: str, resources: dict[str, object],
             ips: list[str], gpus: str) -> Dumps:
    task = Task.from_dict({"num_nodes": 2, "resources": {"infra": infra, **resources},
                           "setup": DUMP.format(name="setup"), "run": DUMP.format(name="run")})
    result = launch(task, "envs")
    assert result.exit_code == 0, result
    one = Task.from_dict({"num_nodes": 1, "resources": {"infra": infra, **resources},
                          "run": DUMP.format(name="run1")})
    assert exec_("envs", one).exit_code == 0

    def load(home: Path, name: str) -> dict[str, str]:
        return dict(json.loads((home / f"{name}.json").read_text()))

    dumps = Dumps(cloud, "envs", ips, gpus, [load(h, "setup") for h in homes],
                  [load(h, "run") for h in homes], load(homes[0], "run1"),
                  int(result.job_id or 0))
    api.down("envs")
    return dumps


@pytest.fixture(scope="module", params=["local", "ssh"])
def dumps(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Dumps]:
    home = tmp_path_factory.mktemp("lhome")
    home.chmod(0o700)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAUNCHER_HOME", str(home))
        if request.param == "local":
            mp.setenv("LAUNCHER_LOCAL_GPUS", "T4:4")
            homes = [home / "local" / "envs" / f"node-{r}" for r in (0, 1)]
            yield _collect("local", homes, "local", {"accelerators": "T4:2"},
                           ["127.0.0.1", "127.0.0.1"], "2")
            return
        nodes = request.getfixturevalue("ssh_nodes")(2)
        hosts = "\n".join(f'      - {{host: {n.host}, port: {n.port}, host_key: "{n.host_key}"}}'
                          for n in nodes)
        (home / "config.yaml").write_text(
            "ssh_node_pools:\n  lab:\n    user: root\n"
            f"    identity_file: {nodes.client_key_path}\n    hosts:\n{hosts}\n")
        try:
            yield _collect("ssh", [n.home for n in nodes], "ssh/lab", {},
                           [n.host for n in nodes], "0")
        finally:
            nodes.close()


def _both(env: dict[str, str], name: str) -> str:
    """The value of SKYPILOT_<name>, checked equal to LAUNCHER_<name>."""
    assert f"SKYPILOT_{name}" in env, sorted(k for k in env if k.startswith("SKYPILOT_"))
    assert env[f"LAUNCHER_{name}"] == env[f"SKYPILOT_{name}"], name
    return env[f"SKYPILOT_{name}"]


# ---------------------------------------------------------------- setup


def test_setup_node_rank(dumps: Dumps) -> None:
    assert [_both(e, "SETUP_NODE_RANK") for e in dumps.setup] == ["0", "1"]


def test_setup_node_ips(dumps: Dumps) -> None:
    for e in dumps.setup:  # every node of the cluster, rank order, one per line
        assert _both(e, "SETUP_NODE_IPS") == "\n".join(dumps.ips)


def test_setup_num_gpus_per_node(dumps: Dumps) -> None:
    assert [_both(e, "SETUP_NUM_GPUS_PER_NODE") for e in dumps.setup] == [dumps.gpus] * 2


def test_setup_num_nodes(dumps: Dumps) -> None:
    assert [_both(e, "NUM_NODES") for e in dumps.setup] == ["2", "2"]


def test_setup_cluster_info(dumps: Dumps) -> None:
    for e in dumps.setup:
        info = json.loads(_both(e, "CLUSTER_INFO"))
        assert info["cluster_name"] == "envs" and info["cloud"] == dumps.cloud
        assert {"region", "zone"} <= set(info)


def test_setup_task_id_only_for_managed_jobs(dumps: Dumps) -> None:
    # a plain launch gets its task id when the job is submitted, after setup (SkyPilot's
    # docs: set in setup for managed jobs; tests/jobs/test_preempt_by_job.py checks those)
    assert all("SKYPILOT_TASK_ID" not in e and "LAUNCHER_TASK_ID" not in e for e in dumps.setup)


def test_setup_also_has_the_run_names(dumps: Dumps) -> None:
    # older SkyPilot task files (e.g. its failed_worker_setup.yaml) read these in setup
    assert [_both(e, "NODE_RANK") for e in dumps.setup] == ["0", "1"]
    assert [_both(e, "NUM_GPUS_PER_NODE") for e in dumps.setup] == [dumps.gpus] * 2


def test_setup_has_no_serve_replica_id(dumps: Dumps) -> None:
    assert all("SKYPILOT_SERVE_REPLICA_ID" not in e for e in dumps.setup + dumps.run)


def test_setup_pythonunbuffered(dumps: Dumps) -> None:
    assert [e.get("PYTHONUNBUFFERED") for e in dumps.setup + dumps.run] == ["1"] * 4


# ---------------------------------------------------------------- run


def test_run_node_rank(dumps: Dumps) -> None:
    assert [_both(e, "NODE_RANK") for e in dumps.run] == ["0", "1"]
    assert _both(dumps.run1, "NODE_RANK") == "0"


def test_run_node_ips(dumps: Dumps) -> None:
    assert [_both(e, "NODE_IPS") for e in dumps.run] == ["\n".join(dumps.ips)] * 2
    assert _both(dumps.run1, "NODE_IPS") == dumps.ips[0]  # the job's nodes only


def test_run_num_nodes(dumps: Dumps) -> None:
    assert [_both(e, "NUM_NODES") for e in dumps.run] == ["2", "2"]
    assert _both(dumps.run1, "NUM_NODES") == "1"


def test_run_num_gpus_per_node(dumps: Dumps) -> None:
    assert [_both(e, "NUM_GPUS_PER_NODE") for e in dumps.run] == [dumps.gpus] * 2


def test_run_task_id(dumps: Dumps) -> None:
    ids = [_both(e, "TASK_ID") for e in dumps.run]
    assert ids[0] == ids[1]  # one task, one id on every rank
    assert ids[0].startswith("launcher-") and ids[0].endswith(f"_envs_{dumps.job_id}")
    assert _both(dumps.run1, "TASK_ID").endswith(f"_envs_{dumps.job_id + 1}")


def test_run_cluster_info(dumps: Dumps) -> None:
    for e in dumps.run:
        info = json.loads(_both(e, "CLUSTER_INFO"))
        assert info["cluster_name"] == "envs" and info["cloud"] == dumps.cloud


def test_run_has_no_setup_names(dumps: Dumps) -> None:
    for e in dumps.run:
        assert not [k for k in e if k.startswith(("SKYPILOT_SETUP_", "LAUNCHER_SETUP_"))]
