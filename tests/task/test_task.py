"""Task loading: top-level fields, envs and overrides, paths, policies, round trips,
accelerator canonicalization, and realistic SkyPilot task files."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import yaml

from launcher.errors import TaskValidationError
from launcher.task.model import (
    AutostopSpec,
    CheckpointSpec,
    JobRecovery,
    Task,
    canonicalize_accelerators,
)
from launcher.task.policies import DEFAULT_CHECKPOINT_PATH
from launcher.task.resources import NetworkRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"
CATALOG_NAMES = [
    "A100",
    "A100-80GB",
    "A10G",
    "H100",
    "H100-MEGA",
    "H200",
    "L4",
    "T4",
    "V100",
    "B200",
]


def load(text: str, **kw: object) -> Task:
    return Task.from_yaml_str(textwrap.dedent(text), source="t.yaml", **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------- basics


def test_minimal_and_defaults() -> None:
    task = load("run: echo hi\n")
    assert task.name is None and task.workdir is None and task.num_nodes == 1
    assert task.envs == {} and task.secrets == {} and task.file_mounts == {}
    assert task.setup is None and task.run == "echo hi"
    assert task.checkpoint is None and task.job_recovery is None and task.autostop is None
    assert task.source_path is None


def test_empty_mapping_is_a_valid_task() -> None:
    assert load("{}\n") == Task()


def test_all_top_level_fields(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    path = tmp_path / "task.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: my-task
            workdir: ./code
            num_nodes: 4
            resources:
              accelerators: H100:8
            envs:
              LR: 0.001
            secrets:
              WANDB_API_KEY: abc123
            file_mounts:
              /data: ./code
              ~/bucket: s3://my-bucket/path
            setup: |
              pip install -r requirements.txt
            run: |
              python train.py --lr $LR
            checkpoint: /ckpt
            """
        )
    )
    task = Task.from_yaml(path)
    assert task.name == "my-task"
    assert task.workdir == str(tmp_path / "code")
    assert task.num_nodes == 4
    assert task.envs == {"LR": "0.001"}
    assert task.secrets == {"WANDB_API_KEY": "abc123"}
    assert task.file_mounts == {"/data": str(tmp_path / "code"), "~/bucket": "s3://my-bucket/path"}
    assert task.setup == "pip install -r requirements.txt\n"
    assert task.run == "python train.py --lr $LR\n"
    assert task.checkpoint == CheckpointSpec(path="/ckpt")
    assert task.source_path == str(path)
    assert task.origin.source == str(path)
    task.check_local_paths()  # everything exists


def test_secrets_are_not_in_repr() -> None:
    task = load("secrets:\n  TOKEN: hunter2\n")
    assert "hunter2" not in repr(task)
    assert task.to_dict()["secrets"] == {"TOKEN": None}
    assert task.to_dict(include_secrets=True)["secrets"] == {"TOKEN": "hunter2"}


def test_name_from_a_number_keeps_its_text() -> None:
    assert load("name: 2024.10\n").name == "2024.10"


# ---------------------------------------------------------------------- envs


def test_env_values_keep_their_yaml_spelling() -> None:
    task = load(
        """\
        envs:
          VERSION: 1.10
          OCTAL: 0123
          FLAG: true
          YES_WORD: yes
          INT: 8
          DATE: 2024-01-01
          QUOTED: "null"
          EMPTY: ""
        """
    )
    assert task.envs == {
        "VERSION": "1.10",
        "OCTAL": "0123",
        "FLAG": "true",
        "YES_WORD": "yes",
        "INT": "8",
        "DATE": "2024-01-01",
        "QUOTED": "null",
        "EMPTY": "",
    }


def test_env_values_from_python_become_text() -> None:
    task = Task.from_dict({"envs": {"A": 1, "B": 2.5, "C": True, "D": "x"}})
    assert task.envs == {"A": "1", "B": "2.5", "C": "true", "D": "x"}


def test_null_env_must_be_overridden() -> None:
    text = "envs:\n  MODEL: llama\n  HF_TOKEN:\n  OTHER: null\n"
    with pytest.raises(TaskValidationError) as err:
        load(text)
    assert err.value.field == "envs.HF_TOKEN" and err.value.line == 3
    assert "--env HF_TOKEN=" in str(err.value) and "OTHER" in str(err.value)
    task = load(text, env_overrides={"HF_TOKEN": "t", "OTHER": "o"})
    assert task.envs == {"MODEL": "llama", "HF_TOKEN": "t", "OTHER": "o"}


def test_env_overrides_replace_and_add() -> None:
    task = load("envs:\n  A: 1\n", env_overrides={"A": "2", "NEW": "x"})
    assert task.envs == {"A": "2", "NEW": "x"}


def test_env_overrides_are_validated() -> None:
    with pytest.raises(TaskValidationError, match="not a valid environment variable name"):
        load("run: x\n", env_overrides={"BAD-NAME": "1"})


def test_null_secret_must_be_overridden() -> None:
    with pytest.raises(TaskValidationError, match="--secret KEY=") as err:
        load("secrets:\n  KEY:\n")
    assert err.value.field == "secrets.KEY"
    assert load("secrets:\n  KEY:\n", secret_overrides={"KEY": "v"}).secrets == {"KEY": "v"}


def test_env_and_secret_with_one_name_is_an_error() -> None:
    with pytest.raises(TaskValidationError, match="both an env and a secret"):
        load("envs:\n  K: 1\nsecrets:\n  K: 2\n")


def test_envs_substitute_into_paths_not_scripts(tmp_path: Path) -> None:
    task = Task.from_yaml_str(
        textwrap.dedent(
            """\
            envs:
              BUCKET: my-bucket
              RUN: r7
            workdir: ./${RUN}
            file_mounts:
              /out/$RUN: s3://${BUCKET}/out
              /keep: s3://x/${UNKNOWN}
            checkpoint: {path: /ckpt/$RUN, store: "gs://${BUCKET}/ckpt"}
            run: echo $RUN
            """
        ),
        base_dir=str(tmp_path),
    )
    assert task.workdir == str(tmp_path / "r7")
    assert task.file_mounts == {"/out/r7": "s3://my-bucket/out", "/keep": "s3://x/${UNKNOWN}"}
    assert task.checkpoint == CheckpointSpec("/ckpt/r7", "gs://my-bucket/ckpt")
    assert task.run == "echo $RUN"


# --------------------------------------------------------------------- paths


def test_relative_paths_resolve_against_the_yaml_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "task.yaml").write_text("workdir: .\nfile_mounts:\n  /cfg: ../cfg.json\n")
    monkeypatch.chdir("/")
    task = Task.from_yaml(sub / "task.yaml")
    assert task.workdir == str(sub)
    assert task.file_mounts == {"/cfg": str(tmp_path / "cfg.json")}
    with pytest.raises(TaskValidationError, match="does not exist") as err:
        task.check_local_paths()
    assert err.value.field == "file_mounts./cfg" and err.value.line == 3


def test_home_is_expanded_in_local_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load("workdir: ~/code\n").workdir == str(tmp_path / "code")


def test_missing_workdir_reported_by_check_local_paths(tmp_path: Path) -> None:
    task = Task.from_yaml_str("workdir: nope\n", base_dir=str(tmp_path))
    with pytest.raises(TaskValidationError, match="does not exist") as err:
        task.check_local_paths()
    assert err.value.field == "workdir" and err.value.line == 1


def test_from_dict_resolves_against_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Task.from_dict({"workdir": "code"}).workdir == str(tmp_path / "code")


# ------------------------------------------------------------------ policies


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/ckpt", CheckpointSpec("/ckpt", None)),
        ("~/ckpt", CheckpointSpec("~/ckpt", None)),
        ("s3://bucket/run1", CheckpointSpec(DEFAULT_CHECKPOINT_PATH, "s3://bucket/run1")),
        ("{path: /c, store: gs://b/p}", CheckpointSpec("/c", "gs://b/p")),
        (
            "{store: 'file:///srv/ckpt'}",
            CheckpointSpec(DEFAULT_CHECKPOINT_PATH, "file:///srv/ckpt"),
        ),
        ("{}", CheckpointSpec()),
    ],
)
def test_checkpoint(value: str, expected: CheckpointSpec) -> None:
    assert load(f"checkpoint: {value}\n").checkpoint == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("FAILOVER", JobRecovery("FAILOVER")),
        ("eager_next_region", JobRecovery("EAGER_NEXT_REGION")),
        ("{strategy: null, max_restarts_on_errors: 3}", JobRecovery(None, 3)),
        ("{recover_on_exit_codes: 33}", JobRecovery(recover_on_exit_codes=(33,))),
        ("{recover_on_exit_codes: [33, 34]}", JobRecovery(recover_on_exit_codes=(33, 34))),
        ("{strategy: deadline, deadline: 36h, duration: 24h}",
         JobRecovery("DEADLINE", deadline_hours=36.0, duration_hours=24.0)),
        ("{strategy: deadline, deadline: 90m, duration: 1h, restart_overhead: 15m}",
         JobRecovery("DEADLINE", deadline_hours=1.5, duration_hours=1.0,
                     restart_overhead_minutes=15.0)),
        ("{strategy: deadline, deadline: 2d, duration: 1d, progress: reported}",
         JobRecovery("DEADLINE", deadline_hours=48.0, duration_hours=24.0, progress="reported")),
        ("{strategy: deadline, deadline: 1d12h, duration: 30h, policy: greedy}",
         JobRecovery("DEADLINE", deadline_hours=36.0, duration_hours=30.0, policy="greedy")),
        ("{strategy: deadline, deadline: '2026-11-27T18:00Z', duration: 24h}",
         JobRecovery("DEADLINE", deadline_at=1795802400.0, duration_hours=24.0)),
        ("{strategy: deadline, deadline: '2026-11-27T20:00+02:00', duration: 24h}",
         JobRecovery("DEADLINE", deadline_at=1795802400.0, duration_hours=24.0)),
    ],
)
def test_job_recovery(value: str, expected: JobRecovery) -> None:
    assert load(f"resources:\n  job_recovery: {value}\n").job_recovery == expected


def test_spot_recovery_is_the_old_name_of_job_recovery() -> None:
    assert load("resources:\n  spot_recovery: FAILOVER\n").job_recovery == JobRecovery("FAILOVER")


def test_job_recovery_in_alternatives_must_agree() -> None:
    task = load(
        "resources:\n  any_of:\n    - {cloud: aws, job_recovery: FAILOVER}\n"
        "    - {cloud: gcp, job_recovery: FAILOVER}\n"
    )
    assert task.job_recovery == JobRecovery("FAILOVER")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10", AutostopSpec(10, False)),
        ("0", AutostopSpec(0, False)),
        ("true", AutostopSpec(5, False)),
        ("false", None),
        ("1h", AutostopSpec(60, False)),
        ("'45'", AutostopSpec(45, False)),
        ("{idle_minutes: 30, down: true}", AutostopSpec(30, True)),
        ("{down: true}", AutostopSpec(5, True)),
    ],
)
def test_autostop(value: str, expected: AutostopSpec | None) -> None:
    assert load(f"resources:\n  autostop: {value}\n").autostop == expected


# ------------------------------------------------------------------- YAML forms


def test_anchors_and_merge_keys() -> None:
    task = load(
        """\
        resources:
          any_of:
            - &base {accelerators: H100:8, use_spot: true, cloud: aws}
            - <<: *base
              cloud: gcp
        """
    )
    got = [(c.cloud, c.accelerator, c.use_spot) for c in task.candidates()]
    assert got == [("aws", "H100", True), ("gcp", "H100", True)]


def test_from_yaml_accepts_str_and_pathlike(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("name: x\n")
    assert Task.from_yaml(str(path)).name == "x"
    assert Task.from_yaml(path).name == "x"


# --------------------------------------------------------------- round trips


def test_to_dict_round_trip_through_yaml(tmp_path: Path) -> None:
    task = load(
        """\
        name: rt
        num_nodes: 3
        resources:
          accelerators: [H100:8, A100:8]
          cpus: 16+
          network_tier: best
          job_recovery: {strategy: DEADLINE, max_restarts_on_errors: 2, recover_on_exit_codes: [3], deadline: 90m, duration: 1h, restart_overhead: 10m}
          autostop: {idle_minutes: 7, down: true}
          any_of:
            - infra: aws/us-east-1
            - infra: gcp
        envs: {A: "1"}
        secrets: {S: s}
        file_mounts: {/d: s3://b/d}
        checkpoint: {path: /c, store: s3://b/c}
        setup: echo setup
        run: echo run
        """
    )
    text = yaml.safe_dump(task.to_dict(include_secrets=True))
    again = Task.from_yaml_str(text)
    assert again == task
    assert again.candidates() == task.candidates()


# ------------------------------------------------------------ with_overrides


def test_with_overrides_apply_to_base_and_alternatives() -> None:
    task = load(
        "num_nodes: 1\nresources:\n  accelerators: H100:8\n"
        "  any_of:\n    - {cloud: aws, accelerators: A100:8}\n    - {cloud: gcp}\n"
    )
    changed = task.with_overrides(
        num_nodes=2, resources={"accelerators": "L4:1", "use_spot": True}, envs={"X": "1"}
    )
    assert changed.num_nodes == 2 and changed.envs == {"X": "1"}
    got = [(c.cloud, c.accelerator, c.use_spot) for c in changed.candidates()]
    assert got == [("aws", "L4", True), ("gcp", "L4", True)]
    assert task.num_nodes == 1  # the original is unchanged


def test_with_overrides_location_replaces_whole_location() -> None:
    task = load("resources:\n  infra: aws/us-east-1/us-east-1a\n")
    (cand,) = task.with_overrides(resources={"infra": "gcp"}).candidates()
    assert (cand.cloud, cand.region, cand.zone) == ("gcp", None, None)


def test_with_overrides_are_validated() -> None:
    task = load("run: x\n")
    with pytest.raises(TaskValidationError, match="at least 1") as err:
        task.with_overrides(num_nodes=0)
    assert err.value.field == "num_nodes" and err.value.source == "command line"
    with pytest.raises(TaskValidationError, match="positive"):
        task.with_overrides(resources={"accelerators": "H100:0"})
    with pytest.raises(TaskValidationError, match="did you mean 'use_spot'"):
        task.with_overrides(resources={"use_spto": True})
    assert task.with_overrides(resources={"job_recovery": "FAILOVER"}).job_recovery == JobRecovery(
        "FAILOVER"
    )


# ---------------------------------------------------------- canonicalization


def test_canonicalize_maps_case_and_separators() -> None:
    task = load(
        "resources:\n  any_of:\n    - {accelerators: 'l4'}\n    - {accelerators: a100_80gb:8}\n"
    )
    canon = canonicalize_accelerators(task, CATALOG_NAMES)
    assert [c.accelerator for c in canon.candidates()] == ["L4", "A100-80GB"]
    assert canon.accelerator_names() == {"L4", "A100-80GB"}
    assert task.accelerator_names() == {"l4", "a100_80gb"}


def test_canonicalize_checks_overridden_base_too() -> None:
    task = load("resources:\n  accelerators: Q9\n  any_of:\n    - {accelerators: L4}\n")
    assert task.accelerator_names() == {"L4"}  # the entry overrides the base
    with pytest.raises(TaskValidationError, match="unknown accelerator 'Q9'"):
        canonicalize_accelerators(task, CATALOG_NAMES)


def test_canonicalize_base_list() -> None:
    task = load("resources:\n  accelerators: [h100:8, a100-80gb:8, H100:8]\n")
    canon = canonicalize_accelerators(task, CATALOG_NAMES)
    assert [(c.accelerator, c.preference) for c in canon.candidates()] == [
        ("H100", 0),
        ("A100-80GB", 1),
    ]


def test_canonicalize_returns_same_task_when_nothing_changes() -> None:
    task = load("resources:\n  accelerators: H100:8\n")
    assert canonicalize_accelerators(task, CATALOG_NAMES) is task


@pytest.mark.parametrize(
    ("name", "suggested", "not_suggested"),
    [
        ("H10O", ["H100", "H200"], ["L4"]),
        ("A10O", ["A100"], ["L4"]),
        ("V1OO", ["V100"], ["H200"]),
        ("B2OO", ["B200"], ["T4"]),
    ],
)
def test_canonicalize_unknown_name_suggests_close_ones(
    name: str, suggested: list[str], not_suggested: list[str]
) -> None:
    task = load(f"name: x\nresources:\n  accelerators: {name}:8\n")
    with pytest.raises(TaskValidationError) as err:
        canonicalize_accelerators(task, CATALOG_NAMES)
    message = str(err.value)
    assert err.value.field == "resources.accelerators" and err.value.line == 3
    assert f"unknown accelerator '{name}'" in message and "did you mean" in message
    for s in suggested:
        assert s in message
    for s in not_suggested:
        assert s not in message.split("did you mean")[1].split("?")[0]


@pytest.mark.parametrize("name", ["tpu-v4-8", "tpu-v5litepod-8", "TPU-v6e-8"])
def test_unknown_tpu_names_say_the_catalog_has_no_such_tpu(name: str) -> None:
    """TPU VMs are catalog rows now (issue 12); a TPU name the catalog lacks says so."""
    task = load(f"resources:\n  accelerators: {name}\n")
    with pytest.raises(TaskValidationError, match="unknown TPU .*no such TPU VM") as err:
        canonicalize_accelerators(task, [*CATALOG_NAMES, "tpu-v4-16"])
    assert err.value.field == "resources.accelerators"


def test_known_tpu_names_resolve() -> None:
    task = load("resources:\n  accelerators: TPU-V6E-8\n")
    assert canonicalize_accelerators(task, [*CATALOG_NAMES, "tpu-v6e-8"]).accelerator_names() == {
        "tpu-v6e-8"}


def test_canonicalize_error_points_at_the_alternative() -> None:
    task = load("resources:\n  any_of:\n    - cloud: aws\n    - accelerators: Z999:1\n")
    with pytest.raises(TaskValidationError) as err:
        canonicalize_accelerators(task, CATALOG_NAMES)
    assert err.value.field == "resources.any_of[1].accelerators" and err.value.line == 4
    assert "did you mean" not in str(err.value) and "launcher gpus" in str(err.value)


def test_line_of_and_error_helper() -> None:
    task = load("name: x\nresources:\n  any_of:\n    - cloud: aws\n    - cpus: 4\n")
    assert task.line_of("resources.any_of[1].cpus") == 5
    assert task.line_of("resources.any_of[1]") == 5
    assert task.line_of("resources") == 2
    err = task.error("resources.any_of[0].cloud", "no offers")
    assert err.line == 4 and "t.yaml:4" in str(err)


# --------------------------------------------------- SkyPilot task files as is


def test_skypilot_two_node_torch_distributed() -> None:
    task = load(
        """\
        # A typical SkyPilot distributed training task, unchanged.
        name: minGPT-ddp

        resources:
          accelerators: H100:8
          network_tier: best

        num_nodes: 2

        setup: |
          git clone --depth 1 https://github.com/pytorch/examples || true
          cd examples
          git filter-branch --prune-empty --subdirectory-filter distributed/minGPT-ddp
          uv pip install -r requirements.txt "numpy<2" "torch"

        run: |
          cd examples/mingpt
          export LOGLEVEL=INFO

          MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
          echo "Starting distributed training, head node: $MASTER_ADDR"

          torchrun \\
          --nnodes=$SKYPILOT_NUM_NODES \\
          --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \\
          --master_addr=$MASTER_ADDR \\
          --master_port=8008 \\
          --node_rank=${SKYPILOT_NODE_RANK} \\
          main.py
        """
    )
    assert task.num_nodes == 2
    (cand,) = task.candidates()
    assert (cand.accelerator, cand.accelerator_count) == ("H100", 8.0)
    assert cand.network == NetworkRequest("best")
    assert "torchrun" in (task.run or "") and "--node_rank=${SKYPILOT_NODE_RANK}" in (
        task.run or ""
    )


def test_skypilot_managed_spot_job_with_any_of() -> None:
    task = load(
        """\
        name: bert-qa
        resources:
          accelerators: {A100:1, A10G:1, L4:1}
          use_spot: true
          disk_size: 256
          job_recovery:
            strategy: FAILOVER
            max_restarts_on_errors: 3
          any_of:
            - infra: aws
            - infra: gcp
        envs:
          WANDB_API_KEY: null
        file_mounts:
          /checkpoint:
            s3://my-ckpt-bucket/bert
        workdir: .
        setup: pip install -r requirements.txt
        run: python run_qa.py --output_dir /checkpoint/bert_qa/
        """,
        env_overrides={"WANDB_API_KEY": "k"},
    )
    assert len(task.candidates()) == 6
    assert {c.use_spot for c in task.candidates()} == {True}
    assert task.job_recovery == JobRecovery("FAILOVER", 3)
    assert task.file_mounts == {"/checkpoint": "s3://my-ckpt-bucket/bert"}
    assert task.workdir == os.getcwd()


def test_skypilot_serving_task_with_ports_and_cpus() -> None:
    task = load(
        """\
        envs:
          MODEL_NAME: meta-llama/Meta-Llama-3-8B-Instruct
          HF_TOKEN: # TODO: Fill with your own huggingface token, or use --env to pass.
        resources:
          accelerators: {L4:1, A10G:1, A10:1, A100:1, A100-80GB:1}
          cpus: 8+
          memory: 32+
          ports: 8081
          disk_tier: best
        setup: pip install vllm==0.4.2
        run: |
          python -m vllm.entrypoints.openai.api_server --port 8081 --model $MODEL_NAME
        """,
        env_overrides={"HF_TOKEN": "hf_x"},
    )
    assert [c.accelerator for c in task.candidates()] == ["L4", "A10G", "A10", "A100", "A100-80GB"]
    assert {c.ports for c in task.candidates()} == {("8081",)}
    assert task.candidates()[0].memory_at_least


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_examples_load(path: Path) -> None:
    from launcher.catalog import query

    task = Task.from_yaml(path)
    assert task.candidates()
    canonicalize_accelerators(task, query.accelerator_names())  # the real bundled names


def test_example_train_2node_rdma() -> None:
    task = Task.from_yaml(EXAMPLES / "train-2node-rdma.yaml")
    assert task.num_nodes == 2
    (cand,) = task.candidates()
    assert (cand.accelerator, cand.accelerator_count, cand.network) == (
        "H100",
        8.0,
        NetworkRequest("rdma"),
    )


def test_example_any_of_gpus() -> None:
    task = Task.from_yaml(EXAMPLES / "any-of-gpus.yaml")
    got = [(c.accelerator, c.accelerator_count, c.preference) for c in task.candidates()]
    assert got == [("A100-80GB", 8.0, 0), ("H100", 8.0, 0), ("H200", 8.0, 0)]


def test_example_spot_ordered() -> None:
    task = Task.from_yaml(EXAMPLES / "spot-ordered.yaml")
    got = [(c.cloud, c.accelerator, c.use_spot, c.preference) for c in task.candidates()]
    assert got == [("aws", "H100", True, 0), (None, "H100", True, 1), (None, "A100-80GB", True, 2)]
    assert task.job_recovery is not None and task.job_recovery.deadline_hours == 36.0
    assert task.checkpoint == CheckpointSpec("~/checkpoints")


# ------------------------------------------------- values not required for planning


def test_planning_load_keeps_unset_envs_and_secrets() -> None:
    text = "envs:\n  MODEL: m\n  HF_TOKEN: null\nsecrets:\n  WANDB_API_KEY:\nrun: x\n"
    task = load(text, require_values=False)
    assert task.envs == {"MODEL": "m"} and task.secrets == {}
    assert task.unset_envs == ("HF_TOKEN",) and task.unset_secrets == ("WANDB_API_KEY",)
    with pytest.raises(TaskValidationError) as err:
        task.check_values()
    assert err.value.field == "envs.HF_TOKEN" and err.value.line == 3
    assert "--env HF_TOKEN=VALUE" in str(err.value)
    filled = task.with_overrides(envs={"HF_TOKEN": "t"})
    with pytest.raises(TaskValidationError, match="--secret WANDB_API_KEY=VALUE") as err2:
        filled.check_values()
    assert err2.value.field == "secrets.WANDB_API_KEY" and err2.value.line == 5
    done = filled.with_overrides(secrets={"WANDB_API_KEY": "k"})
    done.check_values()
    assert done.secrets == {"WANDB_API_KEY": "k"} and not done.unset_secrets


def test_unset_values_round_trip_through_to_dict() -> None:
    task = load("envs:\n  A:\nsecrets:\n  S:\nrun: x\n", require_values=False)
    d = task.to_dict(include_secrets=True)
    assert d["envs"] == {"A": None} and d["secrets"] == {"S": None}
    with pytest.raises(TaskValidationError, match="--env A=VALUE"):
        Task.from_dict(d)
    again = Task.from_dict(d, require_values=False)
    assert (again.unset_envs, again.unset_secrets) == (("A",), ("S",))


def test_missing_value_message_names_real_flags_and_the_others() -> None:
    with pytest.raises(TaskValidationError) as err:
        load("secrets:\n  A:\n  B:\n")
    text = str(err.value)
    assert "--secret A=VALUE" in text and "--secret A to pass it from your environment" in text
    assert "also missing: B" in text


@pytest.mark.parametrize(
    ("written", "first"),
    [("nvidia-h100", "H100"), ("H100-80GB", "H100"), ("A100-40GB", "A100"), ("H10O", "H100")],
)
def test_unknown_accelerator_suggests_the_plain_model(written: str, first: str) -> None:
    task = load(f"resources:\n  accelerators: {written}:8\n")
    with pytest.raises(TaskValidationError) as err:
        canonicalize_accelerators(task, CATALOG_NAMES)
    assert f"did you mean {first}" in str(err.value)
    assert err.value.field == "resources.accelerators" and err.value.line == 2


def test_num_nodes_has_an_upper_bound() -> None:
    with pytest.raises(TaskValidationError, match="at most 4096") as err:
        load("name: x\nnum_nodes: 100000\n")
    assert err.value.field == "num_nodes" and err.value.line == 2
    with pytest.raises(TaskValidationError, match="at most 4096") as err:
        load("num_nodes: 2\n").with_overrides(num_nodes=5000)
    assert err.value.line is None and "command line" in str(err.value)


def test_errors_about_overridden_fields_cite_the_command_line_not_a_yaml_line() -> None:
    task = load("resources:\n  infra: local\n  accelerators: H100:1\nrun: x\n")
    over = task.with_overrides(resources={"accelerators": "H10:8", "cloud": "aws"})
    with pytest.raises(TaskValidationError) as err:
        canonicalize_accelerators(over, CATALOG_NAMES)
    assert err.value.line is None and err.value.field == "resources.accelerators"
    assert str(err.value).startswith("Invalid task (command line, field 'resources.accelerators')")
    assert over.line_of("resources.infra") is None
    # fields not overridden keep their lines
    assert over.line_of("run") == 4
    # the original task is unchanged
    with pytest.raises(TaskValidationError) as err2:
        canonicalize_accelerators(task.with_overrides(name="n"), ["A100"])
    assert err2.value.line == 3


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ("{deadline: 36h}", "resources.job_recovery.deadline", "only to the deadline strategy"),
        ("{strategy: failover, duration: 2h}", "resources.job_recovery.duration",
         "only to the deadline strategy"),
        ("deadline", "resources.job_recovery.deadline", "needs a mapping"),
        ("{strategy: deadline, duration: 24h}", "resources.job_recovery.deadline", "needs 'deadline'"),
        ("{strategy: deadline, deadline: 36h}", "resources.job_recovery.duration", "needs 'duration'"),
        ("{strategy: deadline, deadline: 24h, duration: 24h}", "resources.job_recovery.deadline",
         "cannot be met even on on-demand"),
        ("{strategy: deadline, deadline: 24h, duration: 23h, restart_overhead: 2h}",
         "resources.job_recovery.deadline", "cannot be met even on on-demand"),
        ("{strategy: deadline, deadline: 10m, duration: 1m}", "resources.job_recovery.deadline",
         "a deadline of 10 min cannot be met even on on-demand: the job needs 1 min of work "
         "plus a restart overhead of 10 min"),
        ("{strategy: deadline, deadline: '2026-11-27T18:00', duration: 1h}",
         "resources.job_recovery.deadline", "no timezone"),
        ("{strategy: deadline, deadline: 36h, duration: 1h, progress: steps}",
         "resources.job_recovery.progress", "unknown progress source"),
        ("{strategy: deadline, deadline: 36h, duration: 1h, policy: yolo}",
         "resources.job_recovery.policy", "unknown spot policy"),
    ],
)
def test_job_recovery_deadline_refusals(value: str, field: str, words: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        load(f"resources:\n  job_recovery: {value}\n")
    assert err.value.field == field and words in str(err.value)
