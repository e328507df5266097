"""Issue 12: SkyPilot task features beyond the basics, each with a task file written
here (never a copy of SkyPilot's) and an assertion on the plan or the task model:
per-task `config:`, git `workdir`, `volumes`, TPU names, OCI and unknown clouds,
Kubernetes-only tasks, and the fields that stay refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.api.planning import plan
from launcher.errors import NoPlacementError, TaskValidationError
from launcher.provisioning.failover import provision_request
from launcher.provisioning.offers import KUBERNETES_NOT_LAUNCHABLE
from launcher.provisioning.planning import KUBERNETES_PLAN_ONLY, TPU_NOT_LAUNCHABLE
from launcher.task.config_section import apply_overrides
from launcher.task.git_workdir import clone_script
from launcher.task.model import Task
from launcher.task.volumes import VOLUMES_NOT_LAUNCHABLE

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]


def load(text: str, **kw: object) -> Task:
    return Task.from_yaml_str(textwrap.dedent(text), source="t.yaml", require_values=False, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- config:


CONFIG_TASK = """\
    resources:
      accelerators: H100:8
    config:
      aws:
        use_internal_ips: true
        vpc_name: research-vpc
      docker:
        run_options: [--shm-size=16g, --ipc=host]
      kubernetes:
        pod_config: {spec: {containers: [{resources: {limits: {vpc.amazonaws.com/efa: 4}}}]}}
      jobs:
        controller:
          resources: {cpus: 4+}
    run: nvidia-smi
    """


def test_config_applied_keys_reach_the_provisioning_request() -> None:
    task = load(CONFIG_TASK)
    assert task.config is not None
    assert task.config.provider_overrides() == {
        "aws": {"use_internal_ips": True, "vpc_name": "research-vpc"},
    }
    p = plan(task)
    req = provision_request("c1", p.placements[0], None, task.config.provider_overrides())
    assert req.settings["aws"] == {"use_internal_ips": True, "vpc_name": "research-vpc"}
    # the AWS provisioner applies its section over config.yaml's with apply_overrides
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Settings:
        use_internal_ips: bool = False
        vpc_name: str | None = None
        ssh_user: str = "ubuntu"

    assert apply_overrides(Settings(), req.settings["aws"]) == Settings(True, "research-vpc")


def test_config_keys_with_no_effect_are_planned_with_a_note() -> None:
    task = load(CONFIG_TASK)
    p = plan(task)
    assert any(n.startswith("config.kubernetes has no effect here") for n in p.notes)
    assert any(n.startswith("config.docker.run_options has no effect here") for n in p.notes)
    assert any(n.startswith("config.jobs.controller has no effect here") and "local process" in n
               for n in p.notes)
    assert p.placements and all(pl.accelerator == "H100" for pl in p.placements)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ("aws:\n    ssh_proxy_command: ssh -W %h:%p jump", "config.aws.ssh_proxy_command",
         "SkyPilot setting launcher doesn't support"),
        ("aws:\n    remote_identity: LOCAL_CREDENTIALS", "config.aws.remote_identity",
         "iam_instance_profile"),
        ("aws:\n    vpc_nmae: x", "config.aws.vpc_nmae", "did you mean 'vpc_name'"),
        ("admin_policy: my.Policy", "config.admin_policy", "unknown config section"),
        ("aws:\n    use_internal_ips: 1", "config.aws.use_internal_ips", "true or false"),
    ],
)
def test_config_refuses_unknown_and_unsupported_keys_by_name(body: str, field: str,
                                                              words: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(f"config:\n  {body}\nrun: x\n")
    assert err.value.field == field and words in str(err.value)


def test_config_round_trips_through_to_dict() -> None:
    task = load(CONFIG_TASK)
    again = Task.from_dict(task.to_dict(), require_values=False)
    assert again.config is not None
    assert again.config.provider_overrides() == task.config.provider_overrides()  # type: ignore[union-attr]


# ---------------------------------------------------------------- git workdir


def test_git_workdir_model_and_clone_script() -> None:
    task = load("""\
        envs: {BRANCH: release-2}
        workdir:
          url: https://git.example.com/team/trainer.git
          ref: $BRANCH
        setup: pip install -e .
        run: python train.py
        """)
    assert task.workdir is None  # nothing local is synced
    assert task.git_workdir is not None
    assert (task.git_workdir.url, task.git_workdir.ref) == (
        "https://git.example.com/team/trainer.git", "release-2")
    script = task.node_setup()
    assert script is not None and script.endswith("pip install -e .")
    assert "GIT_TOKEN" in script and "http.extraHeader" in script  # token only as a header
    assert "fetch --quiet origin release-2" in script
    assert task.to_dict()["workdir"] == {"url": "https://git.example.com/team/trainer.git",
                                         "ref": "release-2"}
    assert plan(task).placements  # placement does not depend on the workdir


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def test_git_workdir_is_cloned_at_the_ref_on_the_nodes(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Real run on the local cloud: setup and run start in the clone, at the tag."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "version.txt").write_text("one\n")
    _git(repo, "add", "version.txt")
    _git(repo, "commit", "-qm", "one")
    _git(repo, "tag", "v1")
    (repo / "version.txt").write_text("two\n")
    _git(repo, "commit", "-qam", "two")
    task_file = tmp_path / "task.yaml"
    task_file.write_text(textwrap.dedent(f"""\
        workdir:
          url: file://{repo}
          ref: v1
        setup: echo "setup sees $(cat version.txt)"
        run: echo "run sees $(cat version.txt) in $(basename $PWD)"
        """))
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {**os.environ, "LAUNCHER_HOME": str(home)}
    try:
        out = subprocess.run([*CLI, "launch", str(task_file), "-y", "-c", "gitwd"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "(setup) setup sees one" in out.stdout
        assert "run sees one in sky_workdir" in out.stdout
    finally:
        subprocess.run([*CLI, "down", "gitwd", "-y"], env=env, capture_output=True, timeout=60)


def test_git_workdir_refusals() -> None:
    with pytest.raises(TaskValidationError, match="not a git URL") as err:
        load("workdir:\n  url: ../local/dir\n")
    assert err.value.field == "workdir.url"
    with pytest.raises(TaskValidationError, match="unknown field 'branch'"):
        load("workdir:\n  url: https://h/r.git\n  branch: main\n")


def test_clone_script_without_ref_takes_the_default_branch() -> None:
    from launcher.task.git_workdir import GitWorkdir

    script = clone_script(GitWorkdir("git@host.example:team/r.git"))
    assert "fetch --quiet origin HEAD" in script and "GIT_TOKEN" in script


# ---------------------------------------------------------------- volumes


VOLUME_TASK = """\
    envs: {PREFIX: exp7}
    resources:
      accelerators: A100:1
    volumes:
      /mnt/datasets: shared-datasets
      /mnt/ckpt:
        name: ${PREFIX}-checkpoints
        sub_path: run-1
      /mnt/scratch:
        size: 200Gi
        labels: {team: vision}
    run: ls /mnt
    """


def test_volumes_are_planned_and_launch_is_refused() -> None:
    task = load(VOLUME_TASK)
    assert [(v.path, v.name, v.sub_path, v.size) for v in task.volumes] == [
        ("/mnt/datasets", "shared-datasets", None, None),
        ("/mnt/ckpt", "exp7-checkpoints", "run-1", None),
        ("/mnt/scratch", None, None, "200Gi"),
    ]
    p = plan(task)
    assert VOLUMES_NOT_LAUNCHABLE in p.notes and p.placements
    with pytest.raises(TaskValidationError) as err:
        task.check_values()  # what every real launch and `jobs launch` call first
    assert err.value.field == "volumes" and "cannot create or attach volumes" in str(err.value)
    assert Task.from_dict(task.to_dict(), require_values=False).volumes == task.volumes


def test_launch_refuses_volumes_from_the_cli(tmp_path: Path) -> None:
    f = tmp_path / "v.yaml"
    f.write_text("volumes:\n  /data: vol1\nrun: ls /data\n")
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    out = subprocess.run([*CLI, "launch", str(f), "-y"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "field 'volumes'" in out.stderr
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- TPUs, OCI, other clouds


def test_tpu_names_are_planned_on_gcp_and_never_launchable() -> None:
    task = load("resources:\n  accelerators: tpu-v5p-8\nrun: python train.py\n")
    p = plan(task)
    assert p.placements and {pl.cloud for pl in p.placements} == {"gcp"}
    assert {pl.instance_type for pl in p.placements} == {"TPU-VM"}
    assert not any(p.enabled) and p.chosen is None
    assert TPU_NOT_LAUNCHABLE in p.notes
    with pytest.raises(TaskValidationError, match="unknown TPU 'tpu-v9-8'"):
        plan(load("resources:\n  accelerators: tpu-v9-8\n"))


def test_tpu_in_a_set_with_a_gpu_keeps_the_gpu_launchable() -> None:
    p = plan(load("resources:\n  accelerators: {tpu-v6e-8, A100:8}\n"))
    tpus = [i for i, pl in enumerate(p.placements) if pl.accelerator == "tpu-v6e-8"]
    assert tpus and all(not p.enabled[i] for i in tpus)


def test_oci_tasks_are_planned_with_oci_prices_and_not_launchable() -> None:
    task = load("""\
        resources:
          cloud: oci
          region: ap-seoul-1
          zone: abcd:AP-SEOUL-1-AD-1
          accelerators: A10:1
        run: nvidia-smi
        """)
    p = plan(task)
    best = p.placements[0]
    assert (best.cloud, best.instance_type, best.zone, best.hourly_cost) == (
        "oci", "VM.GPU.A10.1", "AP-SEOUL-1-AD-1", 2.0)
    assert p.chosen is None and p.reasons == ["no provisioner"]
    assert "no provisioner" in p.disabled_reasons["oci"]


def test_fluidstack_is_refused_by_name_and_skipped_as_an_alternative() -> None:
    with pytest.raises(TaskValidationError) as err:
        plan(load("resources:\n  cloud: fluidstack\n  accelerators: H100:8\n"))
    assert err.value.field == "resources.cloud"
    assert "fluidstack: launcher has no prices" in str(err.value)
    p = plan(load("""\
        resources:
          accelerators: H100:8
          any_of:
            - cloud: fluidstack
            - cloud: lambda
        """))
    assert {pl.cloud for pl in p.placements} == {"lambda"}
    assert any("any_of[0] (fluidstack) is skipped" in n for n in p.notes)


def test_kubernetes_task_is_planned_from_its_own_request_and_never_enabled() -> None:
    task = load("""\
        resources:
          infra: k8s/arn:aws:eks:us-east-1:1:cluster/team
          accelerators: H100:8
          cpus: 32+
          memory: 256+
        run: nvidia-smi
        """)
    p = plan(task)
    assert len(p.placements) == 1 and p.chosen is None and p.enabled == [False]
    k = p.placements[0]
    assert (k.cloud, k.region, k.instance_type, k.accelerator, k.accelerator_count) == (
        "kubernetes", "arn:aws:eks:us-east-1:1:cluster/team", "pod", "H100", 8)
    assert (k.offer.vcpus, k.offer.memory_gib, k.node_price) == (32, 256, 0.0)
    assert KUBERNETES_PLAN_ONLY in p.notes
    assert p.disabled_reasons["kubernetes"] == KUBERNETES_NOT_LAUNCHABLE
    row = p.to_json()["placements"][0]
    assert (row["node_price"], row["hourly_cost"], row["enabled"]) == (None, None, False)
    cpu = plan(load("resources:\n  cloud: kubernetes\n  cpus: 2\nrun: x\n"))
    assert [(pl.region, pl.accelerator) for pl in cpu.placements] == [("in-cluster", None)]


def test_kubernetes_is_never_a_placement_of_a_task_that_does_not_name_it() -> None:
    p = plan(load("""\
        resources:
          accelerators: H100:8
          any_of:
            - infra: k8s/ctx
            - {}
        """))
    k8s = [pl for pl in p.placements if pl.cloud == "kubernetes"]
    assert len(k8s) == 1 and k8s[0].candidate.cloud == "kubernetes"
    plain = plan(load("resources:\n  accelerators: H100:8\n"))
    assert "kubernetes" not in {pl.cloud for pl in plain.placements}


def test_kubernetes_gang_with_network_tier_best_is_planned_unchecked() -> None:
    task = load("""\
        num_nodes: 2
        resources:
          infra: k8s
          accelerators: H200:8
          network_tier: best
        run: all_reduce_perf
        """)
    p = plan(task)
    assert [(pl.cloud, pl.num_nodes, pl.fabric) for pl in p.placements] == [
        ("kubernetes", 2, None)]
    assert "network asked for is not checked" in KUBERNETES_PLAN_ONLY
    # the clouds' own rows are still held to the fabric
    aws = plan(load("num_nodes: 2\nresources:\n  accelerators: H100:8\n  network_tier: best\n"))
    assert all(pl.fabric in ("efa", "infiniband", "roce", "tcpx") for pl in aws.placements)


def test_kubernetes_pod_keys_are_accepted_with_a_note_only_on_kubernetes() -> None:
    task = load("""\
        resources:
          cloud: kubernetes
          cpus: 1
          preemption: {hook: echo bye, hook_timeout: 60}
          termination_hook: {command: echo bye, timeout: 90}
        """)
    assert any(n.startswith("resources.preemption configures the Kubernetes pod")
               for n in task.notes)
    assert any(n.startswith("resources.termination_hook configures") for n in task.notes)
    assert plan(task).placements[0].cloud == "kubernetes"
    with pytest.raises(TaskValidationError) as err:
        load("resources:\n  cloud: gcp\n  termination_hook: {command: x}\n")
    assert err.value.field == "resources.termination_hook"


def test_kubernetes_launch_is_refused_with_the_reason(tmp_path: Path) -> None:
    f = tmp_path / "k.yaml"
    f.write_text("resources:\n  infra: k8s\n  cpus: 1\nrun: echo hi\n")
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    out = subprocess.run([*CLI, "launch", str(f), "-y"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and KUBERNETES_NOT_LAUNCHABLE in out.stderr
    assert "Traceback" not in out.stderr
    dry = subprocess.run([*CLI, "launch", str(f), "--dryrun"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0 and "kubernetes  in-cluster" in dry.stdout


def test_b100_resolves_and_is_dropped_from_a_set_with_a_note() -> None:
    p = plan(load("resources:\n  accelerators: {B100:8, H100:8}\n"))
    assert {pl.accelerator for pl in p.placements} == {"H100"}
    assert any("B100:8" in n and "the catalog has no B100" in n for n in p.notes)
    with pytest.raises(NoPlacementError, match="the catalog has no B100"):
        plan(load("resources:\n  accelerators: B100:8\n"))


# ---------------------------------------------------------------- still refused


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("inputs: {s3://b/in: 10}\nrun: x\n", "inputs"),
        ("outputs: {s3://b/out: 1}\nrun: x\n", "outputs"),
        ("api_server_access: true\nrun: x\n", "api_server_access"),
        ("resources:\n  cloud: aws\n  preemption: {hook: echo}\n", "resources.preemption"),
    ],
)
def test_skypilot_only_fields_stay_refused_by_name(text: str, field: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(text)
    assert err.value.field == field and "SkyPilot feature" in str(err.value)


def test_every_refused_field_is_in_the_task_format_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "task-format.md").read_text()
    for name in ("pool", "candidates", "inputs", "outputs", "api_server_access", "accelerator_args",
                 "volumes", "config", "event_callback", "file_mounts_mapping",
                 "experimental", "preemption", "termination_hook"):
        assert f"`{name}`" in doc or f"`resources.{name}`" in doc, name


# ---------------------------------------------------------------- placeholder bucket names


PLACEHOLDER_TASK = """\
    envs:
      OUT_BUCKET:
    file_mounts:
      /out:
        name: $OUT_BUCKET
        mode: MOUNT
      /empty:
        name:
      /braced:
        name: ${NOT_DEFINED}-ckpt
        store: gcs
      /fill:
        name: YOUR_OWN_BUCKET_NAME
        source: ./src
        mode: COPY
      /none:
        mode: MOUNT
      /real:
        name: my-real-bucket-1
    run: ls /out
    """


def test_placeholder_bucket_names_are_planned_with_a_note_per_mount() -> None:
    task = load(PLACEHOLDER_TASK)
    problems = {t: m.placeholder for t, m in task.storage_mounts.items()}
    assert problems["/real"] is None
    assert problems["/out"] == "'$OUT_BUCKET' holds a variable with no value"
    assert problems["/empty"] == "the bucket name is empty"
    assert problems["/braced"] == "'${NOT_DEFINED}-ckpt' holds a variable with no value"
    assert problems["/fill"] is not None and "not a valid bucket name" in problems["/fill"]
    assert problems["/none"] is not None and "no 'name' given" in problems["/none"]
    assert task.storage_mounts["/braced"].store == "gcs"
    p = plan(task)
    assert p.placements
    for target in ("/out", "/empty", "/braced", "/fill", "/none"):
        assert any(n.startswith(f"file_mounts.{target}.name:") and "a launch needs a real "
                   "bucket name" in n for n in p.notes), target
    assert not any(n.startswith("file_mounts./real.") for n in p.notes)
    again = Task.from_dict(task.to_dict(), require_values=False)
    assert {t: m.placeholder for t, m in again.storage_mounts.items()} == problems


def test_placeholder_bucket_name_refused_at_launch_naming_the_field() -> None:
    task = load("file_mounts:\n  /results:\n    name: $BUCKET\n    mode: MOUNT\nrun: x\n")
    with pytest.raises(TaskValidationError) as err:
        task.check_values()  # what every real launch and `jobs launch` call first
    assert err.value.field == "file_mounts./results.name"
    assert "real bucket name" in str(err.value)
    filled = load("envs:\n  B: my-bucket-7\nfile_mounts:\n  /r:\n    name: $B\nrun: x\n")
    assert filled.storage_mounts["/r"].name == "my-bucket-7"
    filled.check_values()


def test_launch_refuses_a_placeholder_bucket_from_the_cli(tmp_path: Path) -> None:
    f = tmp_path / "b.yaml"
    f.write_text("file_mounts:\n  /outputs:\n    name:\n    mode: MOUNT\nrun: ls /outputs\n")
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    dry = subprocess.run([*CLI, "cost", str(f)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0 and "file_mounts./outputs.name" in dry.stdout
    out = subprocess.run([*CLI, "launch", str(f), "-y"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "field 'file_mounts./outputs.name'" in out.stderr
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- candidates, Inferentia, pool


def test_candidates_is_planned_as_any_of_with_a_note() -> None:
    task = load("""\
        resources:
          cloud: aws
          candidates:
            - {accelerators: A10G:4}
            - {accelerators: L4:4}
        run: python bench.py
        """)
    assert [a.accelerators and str(a.accelerators.choices[0]) for a in
            task.resources.alternatives] == ["A10G:4", "L4:4"]
    assert not task.resources.ordered
    p = plan(task)
    assert {(pl.cloud, pl.accelerator) for pl in p.placements} == {("aws", "A10G"), ("aws", "L4")}
    assert all(pl.candidate.preference == 0 for pl in p.placements)  # price decides
    assert any(n.startswith("resources.candidates (SkyPilot Benchmark") for n in p.notes)
    with pytest.raises(TaskValidationError) as err:
        load("resources:\n  any_of: [{cloud: aws}]\n  candidates: [{cloud: gcp}]\n")
    assert err.value.field == "resources.candidates"


def test_inferentia_count_only_inf2_has_resolves_to_inferentia2() -> None:
    p = plan(load("resources:\n  accelerators: Inferentia:6\nrun: x\n"))
    assert {(pl.instance_type, pl.accelerator, pl.accelerator_count)
            for pl in p.placements} == {("inf2.24xlarge", "Inferentia2", 6)}
    assert any("Inferentia:6 is read as Inferentia2:6" in n for n in p.notes)
    inf1 = plan(load("resources:\n  accelerators: Inferentia:4\nrun: x\n"))
    assert {pl.instance_type for pl in inf1.placements} == {"inf1.6xlarge"}
    assert not any("Inferentia2" in n for n in inf1.notes)
    with pytest.raises(NoPlacementError, match="Inferentia comes in"):
        plan(load("resources:\n  accelerators: Inferentia:5\nrun: x\n"))


def test_pool_is_planned_as_a_plain_task_and_refused_at_launch() -> None:
    task = load("pool:\n  workers: 3\nresources:\n  accelerators: L4:1\nsetup: pip list\n")
    p = plan(task)
    assert p.placements and {pl.accelerator for pl in p.placements} == {"L4"}
    assert all(pl.num_nodes == 1 for pl in p.placements)
    assert any(n.startswith("pool: SkyPilot worker pools are not supported") and "3 workers"
               in n for n in p.notes)
    with pytest.raises(TaskValidationError) as err:
        task.check_values()
    assert err.value.field == "pool" and "worker pool" in str(err.value)
    with pytest.raises(TaskValidationError) as bad:
        load("pool:\n  workers: many\nrun: x\n")
    assert bad.value.field == "pool.workers"
    with pytest.raises(TaskValidationError) as typo:
        load("pool:\n  worker: 2\nrun: x\n")
    assert typo.value.field == "pool.worker"


def test_job_group_stays_refused_naming_execution(tmp_path: Path) -> None:
    f = tmp_path / "group.yaml"
    f.write_text("name: g\nexecution: parallel\n---\nname: a\nrun: x\n---\nname: b\nrun: y\n")
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    out = subprocess.run([*CLI, "jobs", "launch", str(f), "--dryrun"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "field 'execution'" in out.stderr
    assert "job group" in out.stderr and "Traceback" not in out.stderr
