"""SkyPilot task fields that launcher accepts with SkyPilot's meaning.

Each test writes a small task of its own and asserts what the plan (or the task
model) does with it, not just that it loads.
"""

from __future__ import annotations

import textwrap

import pytest

from launcher.api.planning import plan
from launcher.errors import TaskValidationError
from launcher.task.model import Task
from launcher.task.resources import NetworkRequest
from launcher.task.service import IGNORED_NOTE


def load(text: str) -> Task:
    return Task.from_yaml_str(textwrap.dedent(text), source="t.yaml", require_values=False)


def test_service_section_is_validated_and_ignored_with_a_note() -> None:
    task = load(
        """\
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 20
            headers: {Authorization: Bearer x}
          replica_policy:
            min_replicas: 2
            max_replicas: 4
            target_qps_per_replica: 1
          load_balancing_policy: round_robin
          ports: 8080
        resources:
          accelerators: A100:1
          ports: 8080
        run: python3 -m http.server 8080
        """
    )
    assert task.notes == (IGNORED_NOTE,)
    result = plan(task)
    assert IGNORED_NOTE in result.notes
    assert result.placements and all(p.accelerator == "A100" for p in result.placements)


def test_service_short_forms() -> None:
    task = load("service:\n  readiness_probe: /v1/models\n  replicas: 2\nrun: x\n")
    assert task.notes == (IGNORED_NOTE,)
    assert load("run: x\n").notes == ()


def test_gpus_is_accelerators() -> None:
    a = load("resources:\n  gpus: H100:8\n").candidates()
    b = load("resources:\n  accelerators: H100:8\n").candidates()
    assert [(c.accelerator, c.accelerator_count) for c in a] == [("H100", 8.0)]
    assert a == b
    alt = load("resources:\n  any_of:\n    - gpus: A100:8\n    - gpus: H100:8\n").candidates()
    assert sorted(c.accelerator or "" for c in alt) == ["A100", "H100"]


def test_network_tier_best_takes_each_clouds_best_fabric() -> None:
    """SkyPilot's `network_tier: best` on GCP H100 nodes means GPUDirect-TCPX: the plan
    must find a3 machines, not refuse the task for lacking RDMA."""
    task = load(
        """\
        num_nodes: 2
        resources:
          accelerators: H100:8
          network_tier: best
          infra: gcp
        """
    )
    (cand,) = task.candidates()
    assert cand.network == NetworkRequest("best")
    result = plan(task)
    assert result.placements
    assert {p.fabric for p in result.placements} == {"tcpx"}
    anywhere = plan(load("num_nodes: 2\nresources:\n  accelerators: H100:8\n  network_tier: best\n"))
    fabrics = {p.fabric for p in anywhere.placements}
    assert fabrics <= {"infiniband", "efa", "roce", "tcpx"}
    assert {"efa", "infiniband", "tcpx"} <= fabrics


def test_network_requirement_is_moot_on_one_node() -> None:
    task = load("resources:\n  accelerators: H100:8\n  network: {fabric: infiniband}\n  infra: gcp\n")
    result = plan(task)
    assert result.placements  # GCP has no InfiniBand, but one node needs no fabric
    assert any("moot on a one-node task" in n for n in result.notes)


def test_fractional_gpu_lands_on_a_node_with_that_gpu() -> None:
    result = plan(load("resources:\n  accelerators: A100:0.5\n"))
    assert result.placements
    assert all(p.accelerator == "A100" and p.accelerator_count >= 0.5 for p in result.placements)
    cheapest = result.placements[0]
    assert cheapest.accelerator_count == 1


def test_kubernetes_alternative_is_planned_only_beside_the_clouds() -> None:
    task = load(
        """\
        resources:
          accelerators: A100:8
          any_of:
            - infra: aws
            - infra: kubernetes
            - cloud: k8s
            - infra: gcp
        """
    )
    assert len(task.resources.alternatives) == 4
    assert {a.cloud for a in task.resources.alternatives} == {"aws", "kubernetes", "gcp"}
    result = plan(task)
    assert {p.cloud for p in result.placements} == {"aws", "gcp", "kubernetes"}
    k8s = [i for i, p in enumerate(result.placements) if p.cloud == "kubernetes"]
    assert k8s and not any(result.enabled[i] for i in k8s)


def test_unplaceable_alternatives_are_named_in_the_plan() -> None:
    """A set member or an ordered entry that no offer serves is noted with the reason;
    one whose offers a better twin took is not."""
    result = plan(load("resources:\n  accelerators: {K80: 1, A100: 8}\n"))
    assert any(n.startswith("Alternative '1 node of K80:1' cannot be placed") for n in result.notes)
    ordered = plan(
        load(
            """\
            resources:
              ordered:
                - {accelerators: H100:5, cloud: aws}
                - {accelerators: A100:8}
            """
        )
    )
    assert ordered.placements and all(p.accelerator == "A100" for p in ordered.placements)
    assert any("H100:5 on aws' cannot be placed: H100 comes on aws in" in n for n in ordered.notes)
    twins = plan(load("resources:\n  accelerators: A100:8\n  any_of:\n    - {}\n    - cloud: aws\n"))
    assert not any(n.startswith("Alternative") for n in twins.notes)


def test_json_rows_group_zones_and_are_capped() -> None:
    """A CPU-only task has tens of thousands of placements: `--json` shows the best 100
    rows (zones of one offer folded into one row), the totals say how many there are."""
    result = plan(load("resources:\n  cpus: 2+\n"))
    capped = result.to_json()
    full = result.to_json(None)
    assert len(capped["placements"]) == 100 and capped["truncated"] is True
    assert capped["placements_total"] == full["placements_total"] == len(full["placements"])
    assert full["truncated"] is False
    assert capped["placements"] == full["placements"][:100]
    keys = [
        (r["cloud"], r["region"], r["instance_type"], r["use_spot"], r["node_price"], r["preference"])
        for r in full["placements"]
    ]
    assert len(keys) == len(set(keys))
    assert sum(max(1, len(r["zones"])) for r in full["placements"]) == len(result.placements)
    gpu = plan(load("resources:\n  accelerators: H100:8\n  infra: aws/us-east-1\n")).to_json()
    (row,) = [r for r in gpu["placements"] if r["instance_type"] == "p5.48xlarge" and not r["use_spot"]]
    assert len(row["zones"]) > 1 and row["zone"] == row["zones"][0]


def test_skypilot_accelerator_names_resolve() -> None:
    for written, catalog in (("A100-40GB", "A100"), ("a100-40gb", "A100"), ("MI300", "MI300X")):
        result = plan(load(f"resources:\n  accelerators: {written}:8\n"))
        assert result.placements
        assert {p.accelerator for p in result.placements} == {catalog}


def test_gpus_listing_takes_the_same_names() -> None:
    from launcher.api.gpu_listing import gpus

    listing = gpus("A100-40GB", 8)
    assert listing.rows and {r.offer.accelerator for r in listing.rows} == {"A100"}


def test_skyserve_experimental_and_newer_service_fields_are_set_aside() -> None:
    # SkyServe fields beyond the basics: a probe cadence, the load balancer's stream
    # timeout, the older `https` form of `tls`, external load balancers with a Route 53
    # zone, and the SpotHedge policy knobs; all validated for shape, then ignored.
    task = load(
        """\
        service:
          readiness_probe:
            path: /ping
            endpoint_probe_interval_seconds: 5
            consecutive_failure_threshold_timeout: 60
          load_balancer: {stream_timeout_seconds: 600}
          https: {key: k.pem, cert: c.pem}
          route53_hosted_zone: example.org
          port: 8080
          auth_key: not-a-real-key
          external_load_balancers:
            - resources: {cloud: aws, region: us-east-2}
              load_balancing_policy: least_load
          replica_policy:
            min_replicas: 1
            max_replicas: 3
            init_replicas: 2
            min_on_demand_replicas: 1
            spot_policy: SpotHedge
        resources:
          cloud: aws
          accelerators: L4:1
        run: python3 serve.py
        """
    )
    assert task.notes == (IGNORED_NOTE,)
    result = plan(task)
    assert IGNORED_NOTE in result.notes
    assert result.placements
    assert all(p.cloud == "aws" and p.accelerator == "L4" for p in result.placements)


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("https: {key: k.pem, certificate: c.pem}", "service.https.certificate"),
        ("external_load_balancers: {resources: {cloud: aws}}", "service.external_load_balancers"),
        ("replica_policy: {min_replicas: 1, init_replicas: -1}", "service.replica_policy.init_replicas"),
        ("route53_hosted_zone: [a, b]", "service.route53_hosted_zone"),
        ("port: 70000", "service.port"),
        ("auth_key: {a: b}", "service.auth_key"),
    ],
)
def test_bad_service_fields_are_named(section: str, field: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(f"service:\n  readiness_probe: /\n  {section}\nrun: x\n")
    assert err.value.field == field


def test_config_sections_for_other_backends_have_no_effect_with_a_note() -> None:
    task = load(
        """\
        resources:
          accelerators: A100:1
        config:
          gcp:
            enable_gvnic: true
          ssh:
            pod_config: {spec: {}}
          vast:
            datacenter_only: true
          active_workspace: team-a
        run: nvidia-smi
        """
    )
    assert task.config is not None and task.config.provider_overrides() == {}
    notes = plan(task).notes
    for key in ("gcp.enable_gvnic", "ssh", "vast", "active_workspace"):
        assert any(n.startswith(f"config.{key} has no effect here") for n in notes), key




def test_list_of_local_sources_is_planned_and_refused_at_launch(tmp_path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    text = textwrap.dedent(
        """\
        resources:
          cloud: gcp
          cpus: 4+
        file_mounts:
          /inputs:
            name: team-inputs-bucket
            source: [./data, ./notes.txt]
            store: gcs
            mode: COPY
        run: ls /inputs
        """
    )
    (tmp_path / "t.yaml").write_text(text)
    task = Task.from_yaml(str(tmp_path / "t.yaml"), require_values=False)
    mount = task.storage_mounts["/inputs"]
    assert mount.source is None and mount.name == "team-inputs-bucket"
    assert mount.source_list == (str(tmp_path / "data"), str(tmp_path / "notes.txt"))
    assert mount.to_yaml_value()["source"] == list(mount.source_list)
    result = plan(task)
    assert result.placements and all(p.cloud == "gcp" for p in result.placements)
    assert any(n.startswith("file_mounts./inputs.source: a list of local sources is planned")
               for n in result.notes)
    task.check_local_paths()  # both paths exist
    with pytest.raises(TaskValidationError) as err:
        task.check_values()
    assert err.value.field == "file_mounts./inputs.source"
    assert "cannot upload several paths" in str(err.value)


@pytest.mark.parametrize(
    ("source", "field", "words"),
    [
        ("[]", "file_mounts./inputs.source", "empty"),
        ("[./a, 's3://b/c']", "file_mounts./inputs.source[1]", "local paths only"),
    ],
)
def test_bad_lists_of_sources_are_named(source: str, field: str, words: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(f"file_mounts:\n  /inputs:\n    name: b-bucket\n    source: {source}\nrun: x\n")
    assert err.value.field == field and words in str(err.value)


def test_nebius_and_coreweave_buckets_are_planned_and_refused_at_launch() -> None:
    task = load(
        """\
        resources:
          accelerators: H100:1
        file_mounts:
          /ckpt:
            source: nebius://team-checkpoints
            mode: MOUNT_CACHED
          /out:
            name: team-outputs
            store: coreweave
            mode: COPY
        run: ls /ckpt /out
        """
    )
    ckpt, out = task.storage_mounts["/ckpt"], task.storage_mounts["/out"]
    assert (ckpt.store, ckpt.bucket_uri, ckpt.name) == ("nebius", "nebius://team-checkpoints", None)
    assert (out.store, out.bucket_uri) == ("coreweave", "cw://team-outputs")
    result = plan(task)
    assert result.placements and all(p.accelerator == "H100" for p in result.placements)
    from launcher.runtime.execution import FileMountError
    from launcher.runtime.storage_nodes import plan_bucket_copies

    with pytest.raises(FileMountError) as err:
        plan_bucket_copies(task)
    assert "file_mounts./ckpt.store" in str(err.value) and "not supported yet" in str(err.value)


def test_coreweave_gpu_label_resolves_to_the_h100() -> None:
    task = load("resources:\n  infra: k8s\n  accelerators: H100_NVLINK_80GB:8\nrun: x\n")
    result = plan(task)
    assert result.placements
    assert all(p.accelerator == "H100" and p.accelerator_count == 8 for p in result.placements)


def test_deprecated_autostop_hook_is_read_as_termination_hook_on_kubernetes() -> None:
    task = load(
        """\
        resources:
          cloud: kubernetes
          cpus: 2
          autostop:
            idle_minutes: 30
            hook: echo saving state
            hook_timeout: 90
        run: sleep 60
        """
    )
    assert task.notes[0] == ("resources.autostop.hook is SkyPilot's deprecated spelling of "
                             "termination_hook; it is read as resources.termination_hook.")
    assert any(n.startswith("resources.termination_hook configures the Kubernetes pod")
               for n in task.notes)
    assert task.autostop is not None and task.autostop.idle_minutes == 30
    result = plan(task)
    assert result.placements and all(p.cloud == "kubernetes" for p in result.placements)


def test_autostop_hook_beside_termination_hook_or_off_kubernetes_is_refused() -> None:
    with pytest.raises(TaskValidationError) as err:
        load("resources:\n  cloud: kubernetes\n  autostop: {hook: a}\n"
             "  termination_hook: {command: b}\nrun: x\n")
    assert err.value.field == "resources.autostop.hook" and "not both" in str(err.value)
    with pytest.raises(TaskValidationError) as err:
        load("resources:\n  cloud: aws\n  autostop: {hook: a}\nrun: x\n")
    assert err.value.field == "resources.autostop.hook"


# ------------------------------------------------- planned, refused only at launch (issue 12)


@pytest.fixture
def clouds_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cloud with a provisioner counts as enabled (as if credentials were set)."""
    from launcher.clouds.base import CredentialStatus
    from launcher.provisioning import planning

    def status(cloud: str) -> CredentialStatus:
        return CredentialStatus(cloud in ("aws", "gcp", "azure"), "test")

    monkeypatch.setattr(planning, "_credential_status", status)
    monkeypatch.setattr(planning, "_credential_presence", status)


def _launch_refusal(task: Task) -> str:
    """The error a real launch of `task` stops with (no cloud may be called)."""
    from launcher.errors import NoPlacementError
    from launcher.provisioning.failover import provision_with_failover
    from launcher.state.db import StateDB

    def no_cloud(name: str) -> object:
        raise AssertionError(f"the launch reached the {name} provisioner")

    with StateDB() as db, pytest.raises(NoPlacementError) as err:
        provision_with_failover(task, "c1", db, cloud_fn=no_cloud)  # type: ignore[arg-type]
    return str(err.value)


def test_job_recovery_min_nodes_is_accepted_and_the_whole_gang_recovers() -> None:
    task = load(
        """\
        num_nodes: 4
        resources:
          accelerators: A100:8
          job_recovery:
            strategy: DYNAMIC_NODE_SET
            min_nodes: 2
            max_restarts_on_errors: 3
        run: x
        """
    )
    rec = task.job_recovery
    assert rec is not None and rec.strategy == "FAILOVER" and rec.min_nodes == 2
    assert rec.max_restarts_on_errors == 3
    note = ("job_recovery.min_nodes: 2 accepted: launcher always recovers the whole gang")
    assert any(n.startswith(note) for n in task.notes)
    result = plan(task)
    assert any(n.startswith(note) for n in result.notes)
    assert result.placements and all(p.num_nodes == 4 for p in result.placements)
    # the task round-trips with SkyPilot's spelling
    again = Task.from_dict(task.to_dict(), require_values=False)
    assert again.job_recovery == rec
    # the strategy alone is read the same way, with its own note
    alone = load("resources:\n  job_recovery: DYNAMIC_NODE_SET\nrun: x\n")
    assert alone.job_recovery is not None and alone.job_recovery.strategy == "FAILOVER"
    assert any("job_recovery.strategy: DYNAMIC_NODE_SET accepted" in n for n in alone.notes)


@pytest.mark.parametrize(
    ("recovery", "field", "words"),
    [
        ("{strategy: FAILOVER, min_nodes: 0}", "resources.job_recovery.min_nodes", "at least 1"),
        ("{strategy: deadline, deadline: 10h, duration: 2h, min_nodes: 2}",
         "resources.job_recovery.min_nodes", "deadline strategy"),
    ],
)
def test_bad_min_nodes_is_named(recovery: str, field: str, words: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(f"resources:\n  job_recovery: {recovery}\nrun: x\n")
    assert err.value.field == field and words in str(err.value), str(err.value)


GCP_DIRECT = """\
    num_nodes: 2
    resources:
      cloud: gcp
      cpus: 8
    config:
      gcp:
        enable_gpu_direct: true
        managed_instance_group:
          run_duration: 3600
    run: x
    """


def test_gcp_gpu_direct_and_mig_are_planned_with_a_note_and_refused_at_launch(
    clouds_enabled: None,
) -> None:
    task = load(GCP_DIRECT)
    for key in ("gcp.enable_gpu_direct", "gcp.managed_instance_group"):
        assert any(n.startswith(f"config.{key} is planned only") for n in task.notes), key
    result = plan(task)
    assert result.placements and all(p.cloud == "gcp" for p in result.placements)
    assert not any(result.enabled) and result.chosen is None
    assert "config.gcp.enable_gpu_direct" in result.disabled_reasons["gcp"]
    assert "GPUDirect" in result.disabled_reasons["gcp"]
    message = _launch_refusal(task)
    assert "config.gcp.enable_gpu_direct" in message and "GPUDirect" in message
    assert "config.gcp.managed_instance_group" in message and "managed instance groups" in message


def test_a_gcp_only_key_leaves_the_other_clouds_launchable(clouds_enabled: None) -> None:
    task = load("resources: {cpus: 8}\nconfig:\n  gcp:\n    enable_gpu_direct: true\nrun: x\n")
    result = plan(task)
    gcp = [i for i, p in enumerate(result.placements) if p.cloud == "gcp"]
    others = [i for i, p in enumerate(result.placements) if p.cloud in ("aws", "azure")]
    assert gcp and others
    assert not any(result.enabled[i] for i in gcp)
    assert all(result.enabled[i] for i in others)
    assert result.chosen is not None and result.placements[result.chosen].cloud != "gcp"


def test_azure_remote_identity_is_planned_and_refused_at_launch_on_azure(
    clouds_enabled: None,
) -> None:
    task = load("resources: {cloud: azure, cpus: 4}\n"
                "config:\n  azure:\n    remote_identity: SERVICE_ACCOUNT\nrun: x\n")
    assert any(n.startswith("config.azure.remote_identity is planned only") for n in task.notes)
    result = plan(task)
    assert result.placements and not any(result.enabled)
    message = _launch_refusal(task)
    assert "config.azure.remote_identity" in message and "does not manage identities" in message
    # NO_UPLOAD asks for what launcher does anyway: no effect, launchable
    same = load("resources: {cloud: azure, cpus: 4}\n"
                "config:\n  azure:\n    remote_identity: NO_UPLOAD\nrun: x\n")
    assert any(n.startswith("config.azure.remote_identity has no effect here: NO_UPLOAD")
               for n in same.notes)
    assert all(plan(same).enabled)


def test_accelerator_args_are_planned_with_the_tpu_and_refused_at_launch(
    clouds_enabled: None,
) -> None:
    from launcher.provisioning.planning import TPU_NOT_LAUNCHABLE

    task = load(
        """\
        resources:
          accelerators: tpu-v5p-8
          accelerator_args:
            runtime_version: tpu-vm-base
            tpu_vm: true
            tpu_name: my-tpu
        run: x
        """
    )
    assert any(n.startswith("resources.accelerator_args (runtime_version: tpu-vm-base, "
                            "tpu_vm: True, tpu_name: my-tpu) is checked and planned")
               for n in task.notes)
    result = plan(task)
    assert result.placements and all(p.accelerator == "tpu-v5p-8" for p in result.placements)
    assert not any(result.enabled) and TPU_NOT_LAUNCHABLE in result.notes
    assert TPU_NOT_LAUNCHABLE in _launch_refusal(task)


def test_accelerator_args_on_an_any_of_entry_inherit_the_base_tpu() -> None:
    task = load("resources:\n  accelerators: tpu-v2-8\n  any_of:\n"
                "    - {region: us-central1, accelerator_args: {runtime_version: v2-alpha}}\n")
    assert any("resources.any_of[0].accelerator_args" in n for n in task.notes)


def test_tpu_node_host_vm_is_planned_as_the_tpu_with_a_note() -> None:
    task = load("resources:\n  instance_type: n1-highmem-8\n  accelerators: tpu-v2-8\n"
                "  accelerator_args: {runtime_version: 2.12.0, tpu_vm: false}\nrun: x\n")
    assert task.resources.base.instance_type is None
    assert any(n.startswith("resources.instance_type 'n1-highmem-8' is the host VM of a TPU "
                            "Node") for n in task.notes)
    result = plan(task)
    assert result.placements and all(p.accelerator == "tpu-v2-8" for p in result.placements)
    assert not any(result.enabled)
    # a TPU VM keeps its instance_type as written (and no offer has n1 with a TPU)
    vm = load("resources:\n  instance_type: n1-highmem-8\n  accelerators: tpu-v2-8\n"
              "  accelerator_args: {tpu_vm: true}\nrun: x\n")
    assert vm.resources.base.instance_type == "n1-highmem-8"


@pytest.mark.parametrize(
    ("resources", "field", "words"),
    [
        ("{accelerators: A100:1, accelerator_args: {runtime_version: x}}",
         "resources.accelerator_args", "asks for no TPU"),
        ("{accelerators: tpu-v2-8, accelerator_args: {tpu_topology: 2x2}}",
         "resources.accelerator_args.tpu_topology", "unknown field"),
        ("{accelerators: tpu-v2-8, accelerator_args: {tpu_vm: maybe}}",
         "resources.accelerator_args.tpu_vm", "true or false"),
    ],
)
def test_bad_accelerator_args_are_named(resources: str, field: str, words: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(f"resources: {resources}\nrun: x\n")
    assert err.value.field == field and words in str(err.value), str(err.value)


DUPLICATED = """\
    envs:
      A: one
    resources:
      cpus: 4
      cpus: 8
    envs:
      B: two
    run: echo $B
    """


def test_a_duplicated_key_keeps_the_last_value_with_a_warning() -> None:
    task = load(DUPLICATED)
    assert task.envs == {"B": "two"}
    assert task.resources.base.cpus == 8
    warnings = [n for n in task.notes if n.startswith("Warning: duplicate key")]
    assert warnings == [
        "Warning: duplicate key 'resources.cpus' at lines 4 and 5: the value at line 5 is used "
        "and the one at line 4 is ignored (SkyPilot's loader also keeps the last one); remove "
        "one of them.",
        "Warning: duplicate key 'envs' at lines 1 and 6: the value at line 6 is used and the one "
        "at line 1 is ignored (SkyPilot's loader also keeps the last one); remove one of them.",
    ]
    assert task.line_of("envs.B") == 7 and task.line_of("envs.A") is not None  # ancestor's line
    assert task.line_of("envs") == 6
    result = plan(task)
    assert all(w in result.notes for w in warnings)


def test_a_duplicated_key_is_a_warning_in_the_dry_run_output(tmp_path) -> None:
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "dup.yaml"
    path.write_text(textwrap.dedent(DUPLICATED))
    cli = [sys.executable, "-c", "from launcher.cli import main; main()", "launch", str(path),
           "--dryrun"]
    env = {**os.environ, "COLUMNS": "400"}
    human = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=300)
    assert human.returncode == 0, human.stderr
    shown = " ".join((human.stdout + human.stderr).split())
    assert "Warning: duplicate key 'envs' at lines 1 and 6" in shown
    machine = subprocess.run([*cli, "--json"], capture_output=True, text=True, env=env,
                             timeout=300)
    assert machine.returncode == 0, machine.stderr
    notes = json.loads(machine.stdout)["notes"]
    assert any(n.startswith("Warning: duplicate key 'envs' at lines 1 and 6") for n in notes)
