"""Task locations checked against the catalog: case-insensitive names, errors naming the
field (and line) with suggestions, AWS zone names vs the catalog's zone IDs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from launcher.catalog.locations import (
    UnknownLocationError,
    canonical_cloud,
    canonical_region,
    resolve_task_locations,
)
from launcher.catalog.offer import Offer
from launcher.errors import TaskValidationError
from launcher.task.model import Task

BASE = Offer(
    cloud="aws", region="us-east-1", zone="use1-az1", instance_type="p5.48xlarge",
    accelerator="H100", accelerator_count=8.0, accelerator_memory_gib=80.0, vcpus=192.0,
    memory_gib=2048.0, price=98.0, spot_price=40.0, fabric="efa", fabric_gbps=3200.0,
    nvlink=True, max_nodes=None, arch="x86_64", source="test", fetched_at="2025-01-02",
)  # fmt: skip
OFFERS = [
    BASE,
    replace(BASE, zone="use1-az2", spot_price=45.0),
    replace(BASE, region="us-west-2", zone="usw2-az1"),
    replace(BASE, cloud="azure", region="eastus", zone=None, instance_type="ND96"),
    replace(BASE, cloud="gcp", region="us-central1", zone="us-central1-a", instance_type="a3"),
]
LOCATIONS: dict[str, dict[str, tuple[str | None, ...]]] = {
    "aws": {"us-east-1": ("use1-az1", "use1-az2"), "us-east-2": ("use2-az1",),
            "us-west-2": ("usw2-az1",)},
    "azure": {"eastus": (None,)},
    "gcp": {"us-central1": ("us-central1-a", "us-central1-b"), "us-east1": ("us-east1-b",)},
}  # fmt: skip
CLOUDS = ("aws", "azure", "gcp", "local")


def locations_of(cloud: str) -> Mapping[str, Sequence[str | None]]:
    return LOCATIONS.get(cloud, {})


def resolve(yaml: str, offers: Sequence[Offer] = OFFERS) -> tuple[Task, list[Offer]]:
    task = Task.from_yaml_str(yaml, source="t.yaml")
    return resolve_task_locations(task, offers, CLOUDS, locations_of)


def where(task: Task) -> tuple[str | None, str | None, str | None]:
    (cand,) = task.candidates()
    return cand.cloud, cand.region, cand.zone


def test_exact_names_leave_the_task_alone() -> None:
    task = Task.from_yaml_str("resources:\n  infra: aws/us-east-1/use1-az2\n")
    same, offers = resolve_task_locations(task, OFFERS, CLOUDS, locations_of)
    assert same is task and offers == OFFERS


@pytest.mark.parametrize(
    ("infra", "expected"),
    [
        ("aws/US-EAST-1", ("aws", "us-east-1", None)),
        ("azure/EastUS", ("azure", "eastus", None)),
        ("aws/us-east-1/USE1-AZ2", ("aws", "us-east-1", "use1-az2")),
        ("gcp/US-Central1/US-CENTRAL1-B", ("gcp", "us-central1", "us-central1-b")),
        ("aws/us-east-2", ("aws", "us-east-2", None)),  # in the catalog, no offer read
    ],
)
def test_names_match_case_insensitively(infra: str, expected: tuple[str, ...]) -> None:
    task, _ = resolve(f"resources:\n  accelerators: H100:8\n  infra: {infra}\n")
    assert where(task) == expected


@pytest.mark.parametrize(
    ("resources", "field", "needle"),
    [
        ("infra: aws/us-east1", "resources.infra",
         "unknown region 'us-east1' for aws; did you mean us-east-1?"),
        ("infra: aws/us-east-99", "resources.infra", "unknown region 'us-east-99' for aws"),
        ("cloud: aws\n  region: us-east1", "resources.region", "did you mean us-east-1?"),
        ("infra: aws/us-east-1a", "resources.infra", "write infra: aws/us-east-1/us-east-1a"),
        ("infra: gcp/us-central1/us-central1-x", "resources.infra",
         "unknown zone 'us-central1-x' for gcp/us-central1"),
        ("infra: azure/eastus/2", "resources.infra", "no zones for azure/eastus"),
        ("infra: aws/us-east-1/us-west-2a", "resources.infra",
         "zone 'us-west-2a' is in region us-west-2, not us-east-1"),
        ("infra: aws/us-east-1/use1-az9", "resources.infra", "use1-az1, use1-az2"),
        ("cloud: oci", "resources.cloud", "the catalog has no cloud 'oci'"),
    ],
)  # fmt: skip
def test_unknown_locations_name_the_field_and_line(resources: str, field: str, needle: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        resolve(f"resources:\n  accelerators: H100:8\n  {resources}\n")
    assert err.value.field == field
    assert err.value.line in (3, 4)
    assert needle in str(err.value)


def test_oci_error_lists_catalog_clouds_only() -> None:
    with pytest.raises(TaskValidationError) as err:
        resolve("resources:\n  infra: oci\n")
    assert "(it has aws, azure, gcp;" in str(err.value)


def test_aws_zone_id_error_explains_names_and_ids() -> None:
    with pytest.raises(TaskValidationError, match="AWS zone IDs"):
        resolve("resources:\n  infra: aws/us-east-1/use1-az9\n")


def test_aws_zone_name_is_kept_and_priced_from_its_region() -> None:
    task, offers = resolve("resources:\n  accelerators: H100:8\n  infra: aws/us-east-1/us-east-1a\n")
    assert where(task) == ("aws", "us-east-1", "us-east-1a")
    named = [o for o in offers if o.zone == "us-east-1a"]
    assert len(named) == 1, "one row per instance type"
    assert named[0].region == "us-east-1" and named[0].spot_price == 45.0  # highest of the region
    # without a region: the zone name gives it
    task2, _ = resolve("resources:\n  cloud: aws\n  zone: US-EAST-1A\n")
    assert where(task2) == ("aws", "us-east-1", "us-east-1a")


def test_zone_name_placement_from_the_real_catalog() -> None:
    from launcher.api.planning import plan

    task = Task.from_yaml_str("resources:\n  accelerators: H100:8\n  infra: aws/us-east-1/us-east-1a\n")
    placements = plan(task).placements
    assert placements and {(p.region, p.zone) for p in placements} == {("us-east-1", "us-east-1a")}


def test_any_of_alternatives_are_checked_each() -> None:
    with pytest.raises(TaskValidationError) as err:
        resolve(
            "resources:\n  accelerators: H100:8\n  any_of:\n"
            "    - infra: aws/us-east-1\n    - infra: aws/useast2\n"
        )
    assert err.value.field == "resources.any_of[1].infra" and err.value.line == 5
    assert "did you mean us-east-2?" in str(err.value)


def test_command_line_cloud_and_region() -> None:
    assert canonical_cloud("GCP", CLOUDS) == "gcp"
    with pytest.raises(UnknownLocationError, match="did you mean gcp") as err:
        canonical_cloud("gpc", CLOUDS)
    assert err.value.exit_code == 2
    assert canonical_region("US-EAST-1", ["aws"], locations_of) == "us-east-1"
    with pytest.raises(UnknownLocationError, match="Unknown region 'us-east1' for aws; did you"):
        canonical_region("us-east1", ["aws"], locations_of)
    assert canonical_region("us-east1", ["aws", "gcp"], locations_of) == "us-east1"


def test_region_names_with_commas_are_quoted_in_the_known_list() -> None:
    def vast_locations(cloud: str) -> Mapping[str, Sequence[str | None]]:
        return {"Ontario, CA, NA": (None,), ", CN, AS": (None,)} if cloud == "vast" else {}

    with pytest.raises(UnknownLocationError) as err:
        canonical_region("nowhere", ["vast"], vast_locations)
    assert "(known regions for vast: ', CN, AS', 'Ontario, CA, NA')" in str(err.value)
