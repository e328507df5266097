"""The `resources:` section: every accelerator form, numeric fields, location, network,
and the candidate expansion the optimizer consumes."""

from __future__ import annotations

import pytest

from launcher.errors import TaskValidationError
from launcher.task.model import Task
from launcher.task.resources import (
    AcceleratorChoice,
    NetworkRequest,
    ResourceCandidate,
    Resources,
    ResourcesSpec,
)
from launcher.task.resources_parser import parse_accelerator_arg


def load(yaml_text: str) -> Task:
    return Task.from_yaml_str(yaml_text, source="t.yaml")


def resources_of(body: str) -> Resources:
    return load("resources:\n" + body).resources.base


def accs(task: Task) -> list[tuple[str | None, float, int]]:
    return [(c.accelerator, c.accelerator_count, c.preference) for c in task.candidates()]


# ------------------------------------------------------------------ accelerators


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("H100:8", [("H100", 8.0, 0)]),
        ("H100", [("H100", 1.0, 0)]),
        ("'H100:8'", [("H100", 8.0, 0)]),
        ("{H100: 8}", [("H100", 8.0, 0)]),
        ("{H100:8}", [("H100", 8.0, 0)]),  # flow mapping with one null-valued key
        ("A100:0.5", [("A100", 0.5, 0)]),
        ("{A100: 0.25}", [("A100", 0.25, 0)]),
        ("H100:8.0", [("H100", 8.0, 0)]),
        ("' H100 : 8 '", [("H100", 8.0, 0)]),
        ("Radeon Pro V520:1", [("Radeon Pro V520", 1.0, 0)]),
        # any of: several keys, a YAML set, or the string form
        ("{A100:8, H100:8}", [("A100", 8.0, 0), ("H100", 8.0, 0)]),
        ("{A100: 8, H100: 8}", [("A100", 8.0, 0), ("H100", 8.0, 0)]),
        ("!!set {A100:8, H100:8}", [("A100", 8.0, 0), ("H100", 8.0, 0)]),
        ("'{A100:8, H100:8}'", [("A100", 8.0, 0), ("H100", 8.0, 0)]),
        # ordered preference: a list (flow, block, or string form)
        ("[A100:8, H100:8]", [("A100", 8.0, 0), ("H100", 8.0, 1)]),
        (
            "\n    - H100:8\n    - A100-80GB:8\n    - V100:8",
            [("H100", 8.0, 0), ("A100-80GB", 8.0, 1), ("V100", 8.0, 2)],
        ),
        ("'[H100:8, A100:8]'", [("H100", 8.0, 0), ("A100", 8.0, 1)]),
        ("[{H100: 8}, {A100: 4}]", [("H100", 8.0, 0), ("A100", 4.0, 1)]),
        # duplicates collapse
        ("[H100:8, H100:8]", [("H100", 8.0, 0)]),
    ],
)
def test_accelerator_forms(value: str, expected: list[tuple[str, float, int]]) -> None:
    assert accs(load(f"resources:\n  accelerators: {value}\n")) == expected


def test_accelerator_set_and_list_from_python_data() -> None:
    task = Task.from_dict({"resources": {"accelerators": {"H100:8", "A100:8"}}})
    assert accs(task) == [("A100", 8.0, 0), ("H100", 8.0, 0)]  # sets are sorted, unordered
    task = Task.from_dict({"resources": {"accelerators": ("V100:1", "T4:1")}})
    assert accs(task) == [("V100", 1.0, 0), ("T4", 1.0, 1)]


def test_no_accelerators_is_one_cpu_candidate() -> None:
    (cand,) = load("resources:\n  cpus: 4\n").candidates()
    assert cand.accelerator is None and cand.accelerator_count == 0
    assert load("run: echo\n").candidates() == [
        ResourceCandidate(accelerator=None, accelerator_count=0)
    ]


def test_parse_accelerator_arg_for_the_cli() -> None:
    assert parse_accelerator_arg("H100:8") == AcceleratorChoice("H100", 8.0)
    assert parse_accelerator_arg("A100") == AcceleratorChoice("A100", 1.0)
    with pytest.raises(TaskValidationError, match="positive"):
        parse_accelerator_arg("H100:0")
    with pytest.raises(TaskValidationError) as err:
        parse_accelerator_arg("H100:x", field="gpus")
    assert err.value.field == "gpus"


def test_accelerator_choice_text() -> None:
    assert str(AcceleratorChoice("H100", 8.0)) == "H100:8"
    assert str(AcceleratorChoice("A100", 0.5)) == "A100:0.5"


# ------------------------------------------------------------- numbers and sizes


@pytest.mark.parametrize(
    ("value", "cpus", "at_least"),
    [
        ("8", 8.0, False),
        ("'8'", 8.0, False),
        ("8+", 8.0, True),
        ("'8+'", 8.0, True),
        ("0.5", 0.5, False),
        ("2.5+", 2.5, True),
    ],
)
def test_cpus(value: str, cpus: float, at_least: bool) -> None:
    res = resources_of(f"  cpus: {value}\n")
    assert (res.cpus, res.cpus_at_least) == (cpus, at_least)
    (cand,) = load(f"resources:\n  cpus: {value}\n").candidates()
    assert (cand.cpus, cand.cpus_at_least) == (cpus, at_least)


@pytest.mark.parametrize(
    ("value", "gib", "at_least"),
    [
        ("32", 32.0, False),
        ("32+", 32.0, True),
        ("64GB+", 64.0, True),
        ("64 GiB", 64.0, False),
        ("512MB", 0.5, False),
        ("1TB+", 1024.0, True),
        ("1.5", 1.5, False),
    ],
)
def test_memory(value: str, gib: float, at_least: bool) -> None:
    res = resources_of(f"  memory: {value}\n")
    assert (res.memory_gib, res.memory_at_least) == (gib, at_least)


def test_unset_cpus_and_memory_mean_no_minimum() -> None:
    (cand,) = load("resources:\n  accelerators: T4\n").candidates()
    assert cand.cpus is None and cand.memory_gib is None


@pytest.mark.parametrize(
    ("value", "gb"), [("256", 256), ("'256'", 256), ("512GB", 512), ("1TB", 1024), ("1.5TB", 1536)]
)
def test_disk_size(value: str, gb: int) -> None:
    assert resources_of(f"  disk_size: {value}\n").disk_size_gb == gb


def test_disk_tier_is_accepted_and_lowercased() -> None:
    assert resources_of("  disk_tier: High\n").disk_tier == "high"


@pytest.mark.parametrize(
    ("value", "ports"),
    [
        ("8080", ("8080",)),
        ("'8080'", ("8080",)),
        ("10000-10010", ("10000-10010",)),
        ("[8080, '9000-9010', 22]", ("8080", "9000-9010", "22")),
        ("'80,443'", ("80", "443")),
        ("[80, 80]", ("80",)),
        ("'100-100'", ("100",)),
    ],
)
def test_ports(value: str, ports: tuple[str, ...]) -> None:
    assert resources_of(f"  ports: {value}\n").ports == ports
    (cand,) = load(f"resources:\n  ports: {value}\n").candidates()
    assert cand.ports == ports


def test_max_hourly_cost_labels_image_instance_type() -> None:
    text = (
        "  max_hourly_cost: 12.5\n  labels: {team: ml, version: 2}\n"
        "  image_id: docker:nvcr.io/nvidia/pytorch:24.05-py3\n  instance_type: p5.48xlarge\n"
    )
    (cand,) = load("resources:\n" + text).candidates()
    assert cand.max_hourly_cost == 12.5
    assert cand.labels == (("team", "ml"), ("version", "2"))  # sorted by key
    assert cand.image_id == "docker:nvcr.io/nvidia/pytorch:24.05-py3"
    assert cand.instance_type == "p5.48xlarge"


def test_image_id_per_region_expands_to_one_candidate_per_region() -> None:
    task = load(
        "resources:\n  cloud: aws\n  image_id:\n    us-east-1: ami-1\n    us-west-2: ami-2\n"
    )
    got = [(c.region, c.image_id) for c in task.candidates()]
    assert got == [("us-east-1", "ami-1"), ("us-west-2", "ami-2")]
    task = load(
        "resources:\n  region: us-west-2\n  image_id: {us-east-1: ami-1, us-west-2: ami-2}\n"
    )
    assert [(c.region, c.image_id) for c in task.candidates()] == [("us-west-2", "ami-2")]


# ------------------------------------------------------------------- location


@pytest.mark.parametrize(
    ("infra", "where"),
    [
        ("aws", ("aws", None, None)),
        ("AWS", ("aws", None, None)),
        ("aws/us-east-1", ("aws", "us-east-1", None)),
        ("aws/us-east-1/us-east-1a", ("aws", "us-east-1", "us-east-1a")),
        ("gcp/us-central1/us-central1-a", ("gcp", "us-central1", "us-central1-a")),
        ("local", ("local", None, None)),
        ("'*'", (None, None, None)),
        ("'*/us-east-1'", (None, "us-east-1", None)),
        ("aws/*/use1-az1", ("aws", None, "use1-az1")),
        ("ssh/my-pool", ("ssh", "my-pool", None)),
    ],
)
def test_infra(infra: str, where: tuple[str | None, str | None, str | None]) -> None:
    (cand,) = load(f"resources:\n  infra: {infra}\n").candidates()
    assert (cand.cloud, cand.region, cand.zone) == where


def test_cloud_region_zone_fields() -> None:
    (cand,) = load("resources:\n  cloud: Azure\n  region: eastus\n  zone: '1'\n").candidates()
    assert (cand.cloud, cand.region, cand.zone) == ("azure", "eastus", "1")


# -------------------------------------------------------------------- network


@pytest.mark.parametrize(
    ("body", "network"),
    [
        ("  network_tier: best\n", NetworkRequest("best")),
        ("  network_tier: BEST\n", NetworkRequest("best")),
        ("  network_tier: standard\n", None),
        ("  network: {fabric: infiniband}\n", NetworkRequest("infiniband")),
        ("  network: {fabric: EFA, min_gbps: 3200}\n", NetworkRequest("efa", 3200.0)),
        ("  network: {min_gbps: 400}\n", NetworkRequest("any", 400.0)),
        ("  network: rdma\n", NetworkRequest("rdma")),
        ("  network: {}\n", NetworkRequest("any")),
        ("  network: {min_gbps: 400}\n  network_tier: best\n", NetworkRequest("best", 400.0)),
        ("  network: {fabric: roce}\n  network_tier: best\n", NetworkRequest("roce")),
        ("  network: {fabric: any}\n  network_tier: standard\n", NetworkRequest("any")),
    ],
)
def test_network(body: str, network: NetworkRequest | None) -> None:
    (cand,) = load("resources:\n" + body).candidates()
    assert cand.network == network


# --------------------------------------------------------- alternatives expansion


def test_any_of_entries_override_the_base_and_share_preference() -> None:
    task = load(
        "resources:\n"
        "  accelerators: H100:8\n  use_spot: true\n  cpus: 32+\n"
        "  any_of:\n"
        "    - infra: aws\n"
        "    - infra: gcp/us-central1\n      use_spot: false\n"
        "    - accelerators: A100-80GB:8\n"
    )
    got = [
        (c.cloud, c.region, c.accelerator, c.use_spot, c.cpus, c.preference)
        for c in task.candidates()
    ]
    assert got == [
        ("aws", None, "H100", True, 32.0, 0),
        ("gcp", "us-central1", "H100", False, 32.0, 0),
        (None, None, "A100-80GB", True, 32.0, 0),
    ]


def test_ordered_entries_give_preference_by_position() -> None:
    task = load(
        "resources:\n  use_spot: true\n  ordered:\n"
        "    - {accelerators: H100:8, infra: aws}\n"
        "    - {accelerators: H100:8}\n"
        "    - {accelerators: A100:8}\n"
    )
    got = [(c.cloud, c.accelerator, c.preference) for c in task.candidates()]
    assert got == [("aws", "H100", 0), (None, "H100", 1), (None, "A100", 2)]
    assert all(c.use_spot for c in task.candidates())


def test_any_of_times_accelerator_set_is_cartesian() -> None:
    task = load(
        "resources:\n  accelerators: {A100:8, H100:8}\n  any_of:\n    - cloud: aws\n    - cloud: gcp\n"
    )
    got = [(c.cloud, c.accelerator, c.preference) for c in task.candidates()]
    assert got == [("aws", "A100", 0), ("aws", "H100", 0), ("gcp", "A100", 0), ("gcp", "H100", 0)]


def test_ordered_times_accelerator_list_ranks_lexicographically() -> None:
    task = load(
        "resources:\n  accelerators: [H100:8, A100:8]\n  ordered:\n    - cloud: aws\n    - cloud: gcp\n"
    )
    got = [(c.cloud, c.accelerator, c.preference) for c in task.candidates()]
    assert got == [("aws", "H100", 0), ("aws", "A100", 1), ("gcp", "H100", 2), ("gcp", "A100", 3)]


def test_any_of_with_accelerator_list_keeps_list_order() -> None:
    task = load(
        "resources:\n  any_of:\n    - accelerators: [H100:8, A100:8]\n      cloud: aws\n"
        "    - accelerators: L4:1\n      cloud: gcp\n"
    )
    got = [(c.cloud, c.accelerator, c.preference) for c in task.candidates()]
    assert got == [("aws", "H100", 0), ("gcp", "L4", 0), ("aws", "A100", 1)]


def test_identical_candidates_are_kept_once_at_best_preference() -> None:
    task = load("resources:\n  ordered:\n    - cloud: aws\n    - cloud: gcp\n    - cloud: aws\n")
    assert [(c.cloud, c.preference) for c in task.candidates()] == [("aws", 0), ("gcp", 1)]


def test_entry_location_replaces_linked_fields() -> None:
    task = load("resources:\n  cpus: 8+\n  any_of:\n    - cpus: 4\n    - memory: 16+\n")
    got = [(c.cpus, c.cpus_at_least, c.memory_gib, c.memory_at_least) for c in task.candidates()]
    assert got == [(4.0, False, None, True), (8.0, True, 16.0, True)]


def test_resources_spec_round_trips_through_to_dict() -> None:
    task = load(
        "resources:\n  accelerators: {A100:8, H100:8}\n  cpus: 8+\n  memory: 0.5\n  ports: [80]\n"
        "  network: {fabric: efa, min_gbps: 100}\n  image_id: {us-east-1: i1, r2: i2}\n  labels: {a: b}\n"
        "  ordered:\n    - {infra: aws/us-east-1, use_spot: true}\n    - {disk_size: 100, disk_tier: low}\n"
    )
    again = Task.from_dict({"resources": task.resources.to_dict()})
    assert again.resources == task.resources
    assert again.candidates() == task.candidates()


def test_empty_spec_defaults() -> None:
    spec = ResourcesSpec()
    assert spec.expanded() == [Resources()]
    assert spec.to_dict() == {}


@pytest.mark.parametrize(
    ("value", "spot"),
    [("true", True), ("false", False), ("yes", True), ("no", False), ("On", True)],
)
def test_use_spot_takes_yaml_booleans(value: str, spot: bool) -> None:
    (cand,) = load(f"resources:\n  use_spot: {value}\n").candidates()
    assert cand.use_spot is spot
