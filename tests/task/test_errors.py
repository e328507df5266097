"""Every malformed task: one-paragraph TaskValidationError naming the field and YAML line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from launcher.errors import LauncherError, TaskValidationError
from launcher.task.model import Task

# (yaml, field, line, fragments that must appear in the message)
CASES: list[tuple[str, str | None, int | None, tuple[str, ...]]] = [
    # ---- structure and unknown fields
    ("- run: echo\n", None, 1, ("must be a mapping", "got a list")),
    ("just text\n", None, 1, ("must be a mapping", "got the string 'just text'")),
    ("42\n", None, 1, ("must be a mapping",)),
    (
        "name: a\nnum_node: 2\n",
        "num_node",
        2,
        ("unknown field 'num_node' — did you mean 'num_nodes'?",),
    ),
    ("Name: a\n", "Name", 1, ("did you mean 'name'?",)),
    ("nmae: a\n", "nmae", 1, ("did you mean 'name'?",)),
    ("foo: 1\n", "foo", 1, ("unknown field 'foo'", "allowed:", "num_nodes")),
    ("accelerators: H100:8\n", "accelerators", 1, ("belongs under 'resources.accelerators'",)),
    ("accelerator: H100:8\n", "accelerator", 1, ("did you mean 'resources.accelerators'?",)),
    (
        "resources:\n  acclerators: H100\n",
        "resources.acclerators",
        2,
        ("did you mean 'accelerators'",),
    ),
    (
        "resources:\n  Accelerators: H100\n",
        "resources.Accelerators",
        2,
        ("did you mean 'accelerators'?",),
    ),
    (
        "resources:\n  num_nodes: 2\n",
        "resources.num_nodes",
        2,
        ("belongs under 'num_nodes (top level)'",),
    ),
    (
        "resources:\n  any_of:\n    - cpu: 4\n",
        "resources.any_of[0].cpu",
        3,
        ("did you mean 'cpus'?",),
    ),
    (
        "resources:\n  any_of:\n    - any_of: []\n",
        "resources.any_of[0].any_of",
        3,
        ("one level only",),
    ),
    ("resources: [cpus, 4]\n", "resources", 1, ("expected a mapping, got a list",)),
    ("resources: H100:8\n", "resources", 1, ("expected a mapping", "'H100:8'")),
    ("resources:\n  any_of: {cloud: aws}\n", "resources.any_of", 2, ("expected a list",)),
    ("resources:\n  any_of: []\n", "resources.any_of", 2, ("no alternatives",)),
    (
        "resources:\n  any_of:\n    - H100:8\n",
        "resources.any_of[0]",
        3,
        ("expected a resources mapping",),
    ),
    (
        "resources:\n  any_of: [{cloud: aws}]\n  ordered: [{cloud: gcp}]\n",
        "resources.ordered",
        3,
        ("either 'any_of' or 'ordered'",),
    ),
    (
        "resources:\n  _docker_login_config: {}\n",
        "resources._docker_login_config",
        2,
        ("internal SkyPilot field",),
    ),
    ("_metadata: {}\n", "_metadata", 1, ("internal SkyPilot field",)),
    # ---- SkyPilot features we do not support yet
    # ---- SkyServe's `service:` is validated (then ignored by launch)
    (
        "service:\n  replicas: 2\n  replica_policy: {min_replicas: 1}\n",
        "service.replicas",
        2,
        ("either 'replicas' or 'replica_policy'",),
    ),
    (
        "service:\n  readiness_probe: {path: /h, initial_delay: 5}\n",
        "service.readiness_probe.initial_delay",
        2,
        ("unknown field 'initial_delay'", "initial_delay_seconds"),
    ),
    (
        "service:\n  replica_policy: {min_replicas: 3, max_replicas: 2}\n",
        "service.replica_policy.max_replicas",
        2,
        ("below min_replicas",),
    ),
    ("service: [1]\n", "service", 1, ("expected a mapping",)),
    # ---- `gpus` is SkyPilot's other name for `accelerators`
    (
        "resources:\n  accelerators: H100\n  gpus: A100\n",
        "resources.gpus",
        3,
        ("give only one of them",),
    ),
    ("run: x\nvolumes:\n  v: vol\n", "volumes.v", 3, ("must be absolute",)),
    ("run: x\nvolumes:\n  /v: {sub_path: a}\n", "volumes./v", 3, ("give the volume's 'name'",)),
    ("config:\n  aws:\n    ssh_proxy_command: x\n", "config.aws.ssh_proxy_command", 3,
     ("aws.ssh_proxy_command", "doesn't support")),
    ("config:\n  aws:\n    vpc_nam: x\n", "config.aws.vpc_nam", 3, ("unknown config key", "vpc_name")),
    ("config:\n  allowed_clouds: [aws]\n", "config.allowed_clouds", 2, ("unknown config section",)),
    ("config:\n  aws:\n    use_internal_ips: 'yes'\n", "config.aws.use_internal_ips", 3,
     ("true or false",)),
    ("experimental:\n  config_overrides: {}\n", "experimental", 1, ("SkyPilot feature",)),
    ("event_callback: echo\n", "event_callback", 1, ("SkyPilot feature",)),
    (
        "resources:\n  accelerator_args: {tpu_vm: true}\n",
        "resources.accelerator_args",
        2,
        ("configures a TPU", "asks for no TPU"),
    ),
    ("resources:\n  volumes: []\n", "resources.volumes", 2, ("SkyPilot feature",)),
    ("resources:\n  cloud: aws\n  preemption: {hook: x}\n", "resources.preemption", 3,
     ("SkyPilot feature",)),
    ("resources:\n  memory: 4x\n", "resources.memory", 2, ("SkyPilot feature",)),
    (
        "resources:\n  autostop: {wait_for: none}\n",
        "resources.autostop.wait_for",
        2,
        ("SkyPilot feature",),
    ),
    ("workdir:\n  url: not a url\n", "workdir.url", 2, ("not a git URL",)),
    ("workdir:\n  ref: main\n", "workdir", 1, ("needs 'url'",)),
    ("workdir:\n  url: https://h/r.git\n  ref: a..b\n", "workdir.ref", 3, ("not a branch",)),
    (
        "file_mounts:\n  /data:\n    source: s3://b\n    mode: MOUNTED\n",
        "file_mounts./data.mode",
        4,
        ("unknown mode 'MOUNTED'", "MOUNT_CACHED"),
    ),
    ("secrets: [my-secret]\n", "secrets", 1, ("list form", "SkyPilot feature")),
    # ---- accelerators
    ("resources:\n  accelerators: H100:0\n", "resources.accelerators", 2, ("positive", "'H100:0'")),
    (
        "resources:\n  accelerators: H100:-1\n",
        "resources.accelerators",
        2,
        ("positive", "'H100:-1'"),
    ),
    (
        "resources:\n  accelerators: H100:abc\n",
        "resources.accelerators",
        2,
        ("'abc'", "not a number"),
    ),
    (
        "resources:\n  accelerators: H100:8:2\n",
        "resources.accelerators",
        2,
        ("'H100:8:2'", "NAME:COUNT"),
    ),
    ("resources:\n  accelerators: 'H100:'\n", "resources.accelerators", 2, ("no count",)),
    ("resources:\n  accelerators: ':8'\n", "resources.accelerators", 2, ("no accelerator name",)),
    ("resources:\n  accelerators: H100:1.5\n", "resources.accelerators", 2, ("below 1",)),
    ("resources:\n  accelerators: H100:nan\n", "resources.accelerators", 2, ("positive",)),
    ("resources:\n  accelerators: 8\n", "resources.accelerators", 2, ("got the number 8",)),
    ("resources:\n  accelerators: true\n", "resources.accelerators", 2, ("got the boolean true",)),
    (
        "resources:\n  accelerators: 'H100!:8'\n",
        "resources.accelerators",
        2,
        ("not an accelerator name",),
    ),
    (
        "resources:\n  accelerators: '-H100:8'\n",
        "resources.accelerators",
        2,
        ("not an accelerator",),
    ),
    ("resources:\n  accelerators: {H100: 0}\n", "resources.accelerators.H100", 2, ("positive",)),
    (
        "resources:\n  accelerators: {H100: eight}\n",
        "resources.accelerators.H100",
        2,
        ("must be a number",),
    ),
    (
        "resources:\n  accelerators: {H100: true}\n",
        "resources.accelerators.H100",
        2,
        ("must be a number",),
    ),
    (
        "resources:\n  accelerators: {'H100:8': 8}\n",
        "resources.accelerators.H100:8",
        2,
        ("not both",),
    ),
    ("resources:\n  accelerators: {}\n", "resources.accelerators", 2, ("no accelerators",)),
    ("resources:\n  accelerators: []\n", "resources.accelerators", 2, ("no accelerators",)),
    (
        "resources:\n  accelerators:\n    - H100:8\n    - A100:0\n",
        "resources.accelerators[1]",
        4,
        ("positive",),
    ),
    (
        "resources:\n  accelerators: [H100:8, [A100]]\n",
        "resources.accelerators[1]",
        2,
        ("got a list",),
    ),
    # ---- num_nodes
    ("num_nodes: 0\n", "num_nodes", 1, ("at least 1", "got 0")),
    ("num_nodes: -2\n", "num_nodes", 1, ("at least 1",)),
    ("num_nodes: 1.5\n", "num_nodes", 1, ("whole number",)),
    ("num_nodes: two\n", "num_nodes", 1, ("whole number", "'two'")),
    ("num_nodes: true\n", "num_nodes", 1, ("whole number", "boolean")),
    ("num_nodes: [2]\n", "num_nodes", 1, ("whole number", "list")),
    # ---- cpus / memory / disk / ports / cost
    ("resources:\n  cpus: eight\n", "resources.cpus", 2, ("'eight'", "not a number")),
    ("resources:\n  cpus: 0\n", "resources.cpus", 2, ("positive",)),
    ("resources:\n  cpus: '-4+'\n", "resources.cpus", 2, ("positive",)),
    ("resources:\n  cpus: [8]\n", "resources.cpus", 2, ("got a list",)),
    ("resources:\n  cpus: true\n", "resources.cpus", 2, ("boolean",)),
    ("resources:\n  memory: lots\n", "resources.memory", 2, ("'lots'", "not an amount of memory")),
    ("resources:\n  memory: 32XB\n", "resources.memory", 2, ("not an amount of memory",)),
    ("resources:\n  memory: 0\n", "resources.memory", 2, ("positive",)),
    ("resources:\n  disk_size: big\n", "resources.disk_size", 2, ("not a disk size",)),
    ("resources:\n  disk_size: 100+\n", "resources.disk_size", 2, ("not a disk size",)),
    ("resources:\n  disk_size: 0\n", "resources.disk_size", 2, ("positive",)),
    ("resources:\n  disk_size: 1.5\n", "resources.disk_size", 2, ("expected a disk size",)),
    (
        "resources:\n  disk_tier: fast\n",
        "resources.disk_tier",
        2,
        ("unknown disk_tier", "allowed: low"),
    ),
    ("resources:\n  ports: 0\n", "resources.ports", 2, ("out of range",)),
    ("resources:\n  ports: 70000\n", "resources.ports", 2, ("out of range",)),
    ("resources:\n  ports: 9000-8000\n", "resources.ports", 2, ("ends before it starts",)),
    ("resources:\n  ports: http\n", "resources.ports", 2, ("not a port",)),
    ("resources:\n  ports: [80, 8a]\n", "resources.ports[1]", 2, ("not a port",)),
    ("resources:\n  ports: [80, {a: 1}]\n", "resources.ports[1]", 2, ("got a mapping",)),
    ("resources:\n  ports: true\n", "resources.ports", 2, ("boolean",)),
    ("resources:\n  max_hourly_cost: 0\n", "resources.max_hourly_cost", 2, ("positive",)),
    (
        "resources:\n  max_hourly_cost: cheap\n",
        "resources.max_hourly_cost",
        2,
        ("positive number",),
    ),
    # ---- use_spot: real booleans only
    (
        "resources:\n  use_spot: yes please\n",
        "resources.use_spot",
        2,
        ("true or false", "'yes please'"),
    ),
    ("resources:\n  use_spot: 'true'\n", "resources.use_spot", 2, ("true or false", "quoted")),
    ("resources:\n  use_spot: 1\n", "resources.use_spot", 2, ("true or false", "number 1")),
    # ---- location
    (
        "resources:\n  cloud: aes\n",
        "resources.cloud",
        2,
        ("unknown cloud 'aes'", "did you mean 'aws'?"),
    ),
    ("resources:\n  cloud: 3\n", "resources.cloud", 2, ("expected a string",)),
    ("resources:\n  infra: amazon/us-east-1\n", "resources.infra", 2, ("unknown cloud 'amazon'",)),
    ("resources:\n  infra: aws/us-east-1/a/b\n", "resources.infra", 2, ("CLOUD[/REGION[/ZONE]]",)),
    ("resources:\n  infra: aws//a\n", "resources.infra", 2, ("CLOUD[/REGION[/ZONE]]",)),
    ("resources:\n  infra: aws\n  region: us-east-1\n", "resources.infra", 2, ("not both",)),
    ("resources:\n  region: [a]\n", "resources.region", 2, ("expected a string",)),
    (
        "resources:\n  image_id: {us-east-1: ami-1}\n  region: eu-west-1\n",
        "resources.image_id",
        2,
        ("no image for region 'eu-west-1'",),
    ),
    # ---- network
    (
        "resources:\n  network: {fabric: infiniband2}\n",
        "resources.network.fabric",
        2,
        (
            "unknown fabric",
            "did you mean 'infiniband'?",
            "allowed: infiniband, efa, roce, tcpx, rdma, best, any",
        ),
    ),
    (
        "resources:\n  network:\n    fabric: nvlink\n",
        "resources.network.fabric",
        3,
        ("unknown fabric 'nvlink'", "allowed:"),
    ),
    (
        "resources:\n  network: {min_gbs: 400}\n",
        "resources.network.min_gbs",
        2,
        ("did you mean 'min_gbps'?",),
    ),
    ("resources:\n  network: {min_gbps: -1}\n", "resources.network.min_gbps", 2, ("positive",)),
    ("resources:\n  network: [rdma]\n", "resources.network", 2, ("expected a mapping",)),
    (
        "resources:\n  network_tier: fastest\n",
        "resources.network_tier",
        2,
        ("unknown network_tier", "best", "standard"),
    ),
    (
        "resources:\n  network_tier: standard\n  network: {fabric: efa}\n",
        "resources.network_tier",
        2,
        ("contradicts",),
    ),
    # ---- job_recovery / autostop / checkpoint
    (
        "resources:\n  job_recovery: FAILOVR\n",
        "resources.job_recovery",
        2,
        ("did you mean 'FAILOVER'?",),
    ),
    (
        "resources:\n  job_recovery: {strategy: ZZZ}\n",
        "resources.job_recovery.strategy",
        2,
        ("allowed: FAILOVER, EAGER_NEXT_REGION",),
    ),
    (
        "resources:\n  job_recovery: {max_restarts_on_errors: -1}\n",
        "resources.job_recovery.max_restarts_on_errors",
        2,
        ("at least 0",),
    ),
    (
        "resources:\n  job_recovery: {recover_on_exit_codes: 300}\n",
        "resources.job_recovery.recover_on_exit_codes",
        2,
        ("at most 255",),
    ),
    (
        "resources:\n  job_recovery: {recover_on_exit_codes: [3, 3]}\n",
        "resources.job_recovery.recover_on_exit_codes",
        2,
        ("more than once",),
    ),
    (
        "resources:\n  job_recovery:\n    strategy: deadline\n    duration: 1h\n    deadline: 36\n",
        "resources.job_recovery.deadline",
        5,
        ("needs a unit",),
    ),
    (
        "resources:\n  job_recovery: {strategy: deadline, duration: 1h, deadline: tomorrow}\n",
        "resources.job_recovery.deadline",
        2,
        ("not a duration",),
    ),
    (
        "resources:\n  job_recovery: {strategy: deadline, duration: 1h, deadline: 0h}\n",
        "resources.job_recovery.deadline",
        2,
        ("positive duration",),
    ),
    (
        "resources:\n  job_recovery: {strategy: deadline, duration: 1h, deadline: 36h30}\n",
        "resources.job_recovery.deadline",
        2,
        ("not a duration",),
    ),
    (
        "resources:\n  job_recovery: {retries: 3}\n",
        "resources.job_recovery.retries",
        2,
        ("unknown field 'retries'",),
    ),
    (
        "resources:\n  job_recovery: [FAILOVER]\n",
        "resources.job_recovery",
        2,
        ("expected a strategy name or a mapping",),
    ),
    (
        "resources:\n  job_recovery: FAILOVER\n  spot_recovery: FAILOVER\n",
        "resources.spot_recovery",
        3,
        ("old name",),
    ),
    (
        "resources:\n  job_recovery: FAILOVER\n  any_of:\n    - job_recovery: EAGER_NEXT_REGION\n",
        "resources.any_of[0].job_recovery",
        4,
        ("differs from 'resources.job_recovery'",),
    ),
    ("resources:\n  autostop: -5\n", "resources.autostop", 2, ("at least 0",)),
    ("resources:\n  autostop: soon\n", "resources.autostop", 2, ("not a duration",)),
    (
        "resources:\n  autostop: {idle_minutes: ten}\n",
        "resources.autostop.idle_minutes",
        2,
        ("not a duration",),
    ),
    ("resources:\n  autostop: {down: maybe}\n", "resources.autostop.down", 2, ("true or false",)),
    (
        "checkpoint: {store: ftp://host/x}\n",
        "checkpoint.store",
        1,
        ("unsupported store scheme 'ftp://'",),
    ),
    ("checkpoint: {store: /local/dir}\n", "checkpoint.store", 1, ("not a store URI",)),
    ("checkpoint: {store: 's3://'}\n", "checkpoint.store", 1, ("names no bucket",)),
    ("checkpoint: {path: s3://b/c}\n", "checkpoint.path", 1, ("is a URI",)),
    ("checkpoint: {pth: /c}\n", "checkpoint.pth", 1, ("did you mean 'path'?",)),
    ("checkpoint: [/c]\n", "checkpoint", 1, ("expected a path",)),
    # ---- envs / secrets / scripts / paths
    ("envs:\n  1BAD: x\n", "envs.1BAD", 2, ("not a valid environment variable name",)),
    ("envs:\n  MY-VAR: x\n", "envs.MY-VAR", 2, ("not a valid environment variable name",)),
    ("envs:\n  A: [1, 2]\n", "envs.A", 2, ("expected a text value",)),
    ("envs: [A=1]\n", "envs", 1, ("list form",)),
    ("envs: A=1\n", "envs", 1, ("expected a mapping",)),
    ("envs:\n  OK: 1\n  TOKEN:\n", "envs.TOKEN", 3, ("no value", "--env TOKEN=VALUE")),
    ("secrets:\n  KEY: ~\n", "secrets.KEY", 2, ("no value", "--secret KEY=VALUE")),
    ("run:\n  - echo a\n  - echo b\n", "run", 1, ("shell script", "run: |")),
    ("setup: {a: 1}\n", "setup", 1, ("shell script",)),
    ("name: [a]\n", "name", 1, ("expected text",)),
    ("workdir: 7\n", "workdir", 1, ("expected a string",)),
    ("workdir: s3://bucket/code\n", "workdir", 1, ("local directory",)),
    ("file_mounts: [/a]\n", "file_mounts", 1, ("expected a mapping of remote path",)),
    ("file_mounts:\n  /a: 3\n", "file_mounts./a", 2, ("expected a string",)),
    ("file_mounts:\n  /a:\n", "file_mounts./a", 2, ("expected a string", "null")),
    ("resources:\n  labels: {team: [a]}\n", "resources.labels.team", 2, ("expected a text value",)),
    ("resources:\n  labels: {team: }\n", "resources.labels.team", 2, ("must have a value",)),
]


@pytest.mark.parametrize(
    ("text", "field", "line", "fragments"), CASES, ids=[c[0][:40] for c in CASES]
)
def test_bad_task(
    text: str, field: str | None, line: int | None, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml_str(text, source="t.yaml")
    message = str(err.value)
    assert err.value.field == field, message
    assert err.value.line == line, message
    assert err.value.source == "t.yaml"
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message  # one paragraph
    assert message.startswith(f"Invalid task (t.yaml:{line}")
    if field:
        assert f"field '{field}'" in message
    assert "pydantic" not in message and "Traceback" not in message


# ---------------------------------------------------------------- broken YAML


@pytest.mark.parametrize(
    ("text", "line", "fragments"),
    [
        (
            "name: a\nresources:\n  accelerators: H100:8\n  cpus: [8\n",
            5,
            ("YAML syntax error at line 5", "flow sequence started at line 4"),
        ),
        ("name: a: b\n", 1, ("YAML syntax error at line 1, column 8", "must be quoted")),
        ("resources:\n\taccelerators: H100\n", 2, ("line 2", "spaces, not tabs")),
        ("run: 'unterminated\n", 2, ("YAML syntax error", "quoted scalar started at line 1")),
        ("name: a\n  bad indent: 1\n", 2, ("YAML syntax error at line 2",)),
        ("name: !custom x\n", 1, ("unsupported YAML tag '!custom'",)),
        ("run: a\n---\nrun: b\n", 3, ("2 YAML documents", "launcher jobs launch")),
        ("name: a\n---\nname: b\n---\nname: c\n", 3, ("3 YAML documents",)),
        ("a: &x [*x]\n", 1, ("nested more than",)),
        ("run: x\n<<: [1]\n", 2, ("merge key",)),
        ("? [a, b]\n: 1\n", 1, ("plain names",)),
    ],
)
def test_broken_yaml(text: str, line: int, fragments: tuple[str, ...]) -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml_str(text, source="t.yaml")
    message = str(err.value)
    assert err.value.line == line, message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "null\n"])
def test_empty_task(text: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml_str(text, source="t.yaml")
    assert "empty" in str(err.value) or "must be a mapping" in str(err.value)


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
        for i in range(1, 9)
    ]
    with pytest.raises(TaskValidationError, match="expands to more than"):
        Task.from_yaml_str("\n".join(lines) + "\n", source="t.yaml")


# -------------------------------------------------------------- file problems


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskValidationError, match="does not exist") as err:
        Task.from_yaml(tmp_path / "nope.yaml")
    assert isinstance(err.value, LauncherError) and err.value.exit_code == 2


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(TaskValidationError, match="is a directory"):
        Task.from_yaml(tmp_path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TaskValidationError, match="not UTF-8"):
        Task.from_yaml(path)


def test_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(textwrap.dedent("name: t\nresources:\n  accelerators: H100:0\n"))
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml(path)
    assert str(err.value).startswith(f"Invalid task ({path}:3, field 'resources.accelerators'): ")


# ------------------------------------------------------------ dict input errors


def test_from_dict_errors_have_field_but_no_line() -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.from_dict({"resources": {"accelerators": "H100:0"}})
    assert err.value.field == "resources.accelerators" and err.value.line is None
    assert str(err.value).startswith("Invalid task (field 'resources.accelerators'): ")


def test_from_dict_rejects_non_string_keys_and_non_mappings() -> None:
    with pytest.raises(TaskValidationError, match="keys must be strings"):
        Task.from_dict({1: "x"})  # type: ignore[dict-item]
    with pytest.raises(TaskValidationError, match="must be a mapping"):
        Task.from_dict(["run"])  # type: ignore[arg-type]
    with pytest.raises(TaskValidationError, match="no accelerators"):
        Task.from_dict({"resources": {"accelerators": set()}})
