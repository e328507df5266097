"""Planning API: plan/cost/gpus/gpu_summary over a small hand-made catalog, plus
headline checks on the real bundled catalog."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Collection, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import launcher.catalog
from launcher.api import planning
from launcher.catalog.offer import Offer
from launcher.clouds.base import CredentialStatus
from launcher.errors import LauncherError, NoPlacementError, TaskValidationError
from launcher.optimizer.ranking import Blocked
from launcher.provisioning import offers as pool_source
from launcher.provisioning import planning as core_planning
from launcher.task.model import Task

BASE = Offer(
    cloud="aws",
    region="us-east-1",
    zone="use1-az1",
    instance_type="p5.48xlarge",
    accelerator="H100",
    accelerator_count=8.0,
    accelerator_memory_gib=80.0,
    vcpus=192.0,
    memory_gib=2048.0,
    price=98.32,
    spot_price=40.0,
    fabric="efa",
    fabric_gbps=3200.0,
    nvlink=True,
    max_nodes=None,
    arch="x86_64",
    source="test",
    fetched_at="2025-01-02T00:00:00Z",
)

OFFERS = [
    BASE,
    replace(BASE, region="us-west-2", zone="usw2-az1", price=90.0, spot_price=None),
    replace(
        BASE,
        cloud="azure",
        region="eastus",
        zone=None,
        instance_type="ND96isr_H100_v5",
        price=110.0,
        spot_price=50.0,
        fabric="infiniband",
    ),
    replace(
        BASE,
        cloud="vast",
        region="us",
        zone=None,
        instance_type="8x-H100",
        price=20.0,
        spot_price=10.0,
        fabric=None,
        fabric_gbps=None,
        max_nodes=1,
    ),
    replace(
        BASE,
        cloud="lambda",
        region="us-tx-1",
        zone=None,
        instance_type="gpu_8x_h100",
        price=24.0,
        spot_price=None,
        fabric="ethernet",
        fabric_gbps=None,
    ),
    replace(
        BASE,
        cloud="vast",
        region="us",
        zone=None,
        instance_type="1x-H100",
        accelerator_count=1.0,
        price=2.5,
        spot_price=1.2,
        fabric=None,
        fabric_gbps=None,
        max_nodes=1,
    ),
    replace(
        BASE,
        cloud="aws",
        instance_type="p4d.24xlarge",
        accelerator="A100",
        accelerator_memory_gib=40.0,
        price=32.77,
        spot_price=12.0,
        fabric_gbps=400.0,
    ),
    replace(
        BASE,
        cloud="gcp",
        region="us-central1",
        zone="us-central1-a",
        instance_type="a2-highgpu-8g",
        accelerator="A100",
        accelerator_memory_gib=40.0,
        price=29.39,
        spot_price=None,
        fabric=None,
        fabric_gbps=None,
    ),
    replace(
        BASE,
        cloud="aws",
        instance_type="m5.large",
        accelerator=None,
        accelerator_count=0.0,
        accelerator_memory_gib=None,
        vcpus=2.0,
        memory_gib=8.0,
        price=0.096,
        spot_price=0.04,
        fabric=None,
        fabric_gbps=None,
    ),
    replace(
        BASE,
        cloud="local",
        region="local",
        zone=None,
        instance_type="local",
        accelerator=None,
        accelerator_count=0.0,
        accelerator_memory_gib=None,
        vcpus=2.0,
        memory_gib=4.0,
        price=0.0,
        spot_price=None,
        fabric=None,
        fabric_gbps=None,
    ),
]


def fake_query(offers: list[Offer]) -> types.ModuleType:
    mod = types.ModuleType("launcher.catalog.query")

    def q_offers(
        accelerators: Collection[str] | None = None, clouds: Collection[str] | None = None,
        live: Collection[Offer] = (),
    ) -> list[Offer]:
        return [
            o
            for o in [*offers, *live]
            if (accelerators is None or o.accelerator in accelerators)
            and (clouds is None or o.cloud in clouds)
        ]

    mod.offers = q_offers  # type: ignore[attr-defined]
    mod.accelerator_names = lambda: sorted({o.accelerator for o in offers if o.accelerator})  # type: ignore[attr-defined]
    mod.status = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        clouds=[types.SimpleNamespace(cloud=c) for c in sorted({o.cloud for o in offers})]
    )
    mod.cloud_metas = lambda: [  # type: ignore[attr-defined]
        types.SimpleNamespace(cloud=c, fetched_at="2025-01-02T00:00:00Z", fetched_at_exact=True)
        for c in sorted({o.cloud for o in offers} - {"local"})
    ]

    def locations(cloud: str) -> dict[str, tuple[str | None, ...]]:
        out: dict[str, list[str | None]] = {}
        for o in offers:
            if o.cloud == cloud and o.zone not in out.setdefault(o.region, []):
                out[o.region].append(o.zone)
        return {r: tuple(z) for r, z in out.items()}

    mod.locations = locations  # type: ignore[attr-defined]
    mod.cpu_only_clouds = lambda: sorted(  # type: ignore[attr-defined]
        {o.cloud for o in offers if o.accelerator is None}
    )
    return mod


@pytest.fixture
def catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> Iterator[list[Offer]]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    mod = fake_query(OFFERS)
    monkeypatch.setitem(sys.modules, "launcher.catalog.query", mod)
    monkeypatch.setattr(launcher.catalog, "query", mod, raising=False)
    yield OFFERS


def enable(monkeypatch: pytest.MonkeyPatch, *clouds: str) -> None:
    """Pretend these clouds have credentials (and local is always on)."""
    on = {"local", *clouds}

    def status(c: str) -> CredentialStatus:
        return CredentialStatus(c in on, "test" if c in on else "no credentials (test)")

    # both answers: proven (launches) and configured (dry runs, cost queries)
    monkeypatch.setattr(core_planning, "_credential_status", status)
    monkeypatch.setattr(core_planning, "_credential_presence", status)
    monkeypatch.setattr(core_planning, "_implemented_catalog_clouds",
                        lambda q: {"local", *clouds})


def task(yaml: str) -> Task:
    return Task.from_yaml_str(yaml)


H100x8 = "resources:\n  accelerators: H100:8\n"


# ---------------------------------------------------------------- plan


def test_plan_ranks_all_clouds_and_chooses_first_enabled(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch, "aws")
    p = planning.plan(task(H100x8))
    clouds = [(x.cloud, x.use_spot is False and x.hourly_cost) for x in p.placements]
    assert clouds == [
        ("vast", 20.0),
        ("lambda", 24.0),
        ("aws", 90.0),
        ("aws", 98.32),
        ("azure", 110.0),
    ]
    assert p.enabled == [False, False, True, True, False]
    assert p.chosen == 2
    assert p.chosen_placement is not None and p.chosen_placement.region == "us-west-2"
    assert "no credentials" in p.disabled_reasons["vast"]


def test_plan_json_lists_launchable_rows_first_with_reasons(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch, "aws")
    p = planning.plan(task(H100x8))
    assert p.reasons == ["cloud not enabled", "cloud not enabled", None, None,
                         "cloud not enabled"]
    data = p.to_json()
    rows = [(r["cloud"], r["hourly_cost"], r["launchable"], r["reason"])
            for r in data["placements"]]
    assert rows == [
        ("aws", 90.0, True, None),
        ("aws", 98.32, True, None),
        ("vast", 20.0, False, "cloud not enabled"),
        ("lambda", 24.0, False, "cloud not enabled"),
        ("azure", 110.0, False, "cloud not enabled"),
    ]
    assert data["chosen"] == 0 and data["placements_total"] == 5
    assert set(data["disabled_clouds"]) == {"vast", "lambda", "azure"}
    assert [r["cloud"] for r in p.to_json(limit=3)["placements"]] == ["aws", "aws", "vast"]


def test_plan_with_nothing_enabled_has_no_choice_and_says_so(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    p = planning.plan(task(H100x8))
    assert p.chosen is None and not any(p.enabled)
    assert planning.NOTHING_LAUNCHABLE in p.notes
    assert set(p.reasons) == {"cloud not enabled"}


def test_plan_uses_real_registry_when_not_faked(catalog: list[Offer]) -> None:
    p = planning.plan(task(H100x8))  # aws/azure/vast/lambda have no provisioner here
    assert p.enabled == [False] * len(p.placements)


def test_plan_canonicalizes_accelerator_names(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    p = planning.plan(task("resources:\n  accelerators: h100:8\n"))
    assert {x.accelerator for x in p.placements} == {"H100"}
    with pytest.raises(TaskValidationError) as err:
        planning.plan(task("resources:\n  accelerators: H10:8\n"))
    assert "H100" in str(err.value)


def test_plan_json_contract(catalog: list[Offer], monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch, "aws")
    p = planning.plan(task("num_nodes: 2\n" + H100x8 + "  network: {fabric: rdma}\n"))
    data = json.loads(json.dumps(p.to_json()))
    assert {"placements", "chosen", "rejected"} <= set(data)
    need = {
        "cloud",
        "region",
        "zone",
        "instance_type",
        "accelerator",
        "accelerator_count",
        "num_nodes",
        "use_spot",
        "node_price",
        "hourly_cost",
        "fabric",
        "fabric_gbps",
        "enabled",
    }
    for pl in data["placements"]:
        assert need <= set(pl)
    costs = [pl["hourly_cost"] for pl in data["placements"]]
    assert costs == sorted(costs)
    assert data["placements"][data["chosen"]]["cloud"] == "aws"
    assert [pl["num_nodes"] for pl in data["placements"]] == [2] * len(costs)
    for r in data["rejected"]:
        assert {"cloud", "instance_type", "region", "reason"} <= set(r)
    reasons = {(r["cloud"], r["instance_type"]): r["reason"] for r in data["rejected"]}
    assert reasons[("vast", "8x-H100")] == "max 1 node < 2"
    assert reasons[("lambda", "gpu_8x_h100")] == "fabric ethernet is not RDMA"
    assert reasons[("vast", "1x-H100")] == "needs 8 x H100, offer has 1"


def test_cost_multiplies_hours_and_rejects_bad_hours(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    p = planning.cost(task("num_nodes: 2\n" + H100x8), hours=10)
    first = p.placements[0]
    assert first.total_cost == pytest.approx(first.node_price * 2 * 10)
    assert p.to_json()["hours"] == 10
    with pytest.raises(LauncherError, match="hours"):
        planning.cost(task(H100x8), hours=0)


def test_local_only_when_named(catalog: list[Offer], monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch, "aws")
    p = planning.plan(task("resources:\n  cpus: 2+\n"))
    assert [x.cloud for x in p.placements] == ["aws"]
    assert any(r.cloud == "local" and "names it" in r.reason for r in p.rejected)
    named = planning.plan(task("resources:\n  infra: local\n"))
    assert [x.cloud for x in named.placements] == ["local"] and named.chosen == 0


def test_local_joins_when_no_other_cloud_is_enabled(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    p = planning.plan(task("resources:\n  cpus: 2+\n"))
    assert [x.cloud for x in p.placements] == ["local", "aws"]
    assert p.chosen == 0
    assert any("no other cloud is enabled" in n for n in p.notes)


def test_local_note_only_when_local_fits(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    p = planning.plan(task("resources:\n  instance_type: p5.48xlarge\n"))
    assert all(x.cloud != "local" for x in p.placements)
    assert not any("local cloud is a candidate" in n for n in p.notes)


def test_ssh_without_pools_says_to_declare_one(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    for yaml in ("resources:\n  cloud: ssh\n", "resources:\n  infra: ssh/lab\n"):
        message = no_placement(yaml)
        assert "no SSH node pool is declared" in message and "ssh_node_pools" in message
    lab = replace(BASE, cloud="ssh", region="lab", zone=None, accelerator=None,
                  accelerator_count=0.0, price=0.0, spot_price=None)
    # the pools' offers are handed to the catalog by the provisioning layer
    monkeypatch.setattr(pool_source, "pool_offers", lambda: [lab])
    assert "no SSH node pool 'gpu' (declared in" in no_placement("resources:\n  infra: ssh/gpu\n")
    # a GPU the pool lacks is not "no pool declared"
    assert "no SSH node pool" not in no_placement("resources:\n  infra: ssh/lab\n" + H100x8[11:])


def test_blocked_flows_through(catalog: list[Offer], monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch, "aws")
    p = planning.plan(
        task(H100x8 + "  cloud: aws\n"), blocked=Blocked().with_region("aws", "us-west-2")
    )
    assert [x.region for x in p.placements] == ["us-east-1"]
    assert any(r.reason == "blocked: region us-west-2" for r in p.rejected)


# ---------------------------------------------------------------- "nothing fits" explanations


def no_placement(yaml: str) -> str:
    with pytest.raises(NoPlacementError) as err:
        planning.plan(task(yaml))
    return str(err.value)


def test_explains_gang_and_unknown_fabric_per_cloud(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    msg = no_placement(
        "num_nodes: 3\n" + H100x8 + "  cloud: vast\n  network: {fabric: infiniband}\n"
    )
    assert msg == (
        "No offer with 3 nodes of H100:8 on vast with infiniband: "
        "vast offers max 1 node and no fabric data."
    )


def test_unsatisfiable_error_keeps_rejections_for_json(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    with pytest.raises(planning.UnsatisfiableTaskError) as err:
        planning.cost(
            task("num_nodes: 3\n" + H100x8 + "  cloud: vast\n  network: {fabric: infiniband}\n"),
            hours=5,
        )
    data = err.value.to_json()
    assert isinstance(err.value, NoPlacementError)
    assert (data["placements"], data["chosen"], data["hours"]) == ([], None, 5)
    assert data["error"] == str(err.value) and data["rejected"]
    assert set(data["rejected"][0]) == {"cloud", "instance_type", "region", "zone", "reason"}


def test_explains_instance_type_typos_and_cpu_only_scope(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    msg = no_placement("resources:\n  instance_type: p5.48xlarg\n")
    assert "the catalog has no instance type p5.48xlarg (did you mean p5.48xlarge" in msg
    cpu_clouds = sorted({o.cloud for o in catalog if o.accelerator is None} - {"local"})
    assert cpu_clouds and "lambda" not in cpu_clouds
    msg = no_placement("resources:\n  cloud: lambda\n  cpus: 4\n")
    assert f"no CPU-only instances on lambda (they are on {', '.join(cpu_clouds)})" in msg


def test_explains_each_cloud(catalog: list[Offer], monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch)
    msg = no_placement(
        "num_nodes: 2\n" + H100x8 + "  network: {fabric: infiniband, min_gbps: 6400}\n"
    )
    assert msg.startswith("No offer with 2 nodes of H100:8 with infiniband at 6400+ Gbps: ")
    assert "aws offers fabric efa only and at most 3200 Gbps" in msg
    assert "azure offers at most 3200 Gbps" in msg
    assert "vast offers max 1 node and no fabric data and no bandwidth data" in msg
    assert "lambda offers fabric ethernet only and no bandwidth data" in msg


def test_explains_counts_that_exist(catalog: list[Offer], monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch)
    msg = no_placement("resources:\n  accelerators: H100:3\n")
    assert msg == "No offer with 1 node of H100:3: H100 comes in 1, 8 per node, not 3."


def test_explains_missing_cloud_and_market_and_cost(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    msg = no_placement("resources:\n  accelerators: A100:8\n  cloud: azure\n")
    assert (
        msg == "No offer with 1 node of A100:8 on azure: azure has no A100 (A100 is on aws, gcp)."
    )
    msg = no_placement("resources:\n  accelerators: A100:8\n  cloud: gcp\n  use_spot: true\n")
    assert msg == "No offer with 1 spot node of A100:8 on gcp: gcp offers no spot price."
    msg = no_placement("num_nodes: 2\nresources:\n  accelerators: A100:8\n  max_hourly_cost: 50\n")
    assert "aws offers nothing under max_hourly_cost $50.00 (cheapest $65.54/h)" in msg
    assert "gcp offers nothing under max_hourly_cost $50.00 (cheapest $58.78/h)" in msg


def test_explains_any_of_per_candidate(
    catalog: list[Offer], monkeypatch: pytest.MonkeyPatch
) -> None:
    enable(monkeypatch)
    msg = no_placement(
        "num_nodes: 2\nresources:\n  accelerators: {H100:8, A100:8}\n  cloud: vast\n"
    )
    assert msg.startswith("No offer with 2 nodes of H100:8 on vast: vast offers max 1 node; ")
    assert "no offer with 2 nodes of A100:8 on vast: vast has no A100 (A100 is on aws, gcp)" in msg


# ---------------------------------------------------------------- gpus


def test_gpus_one_row_per_instance_type_in_its_cheapest_region(catalog: list[Offer]) -> None:
    listing = planning.gpus("h100", 8)
    rows = [(r.offer.cloud, r.offer.instance_type, r.offer.region, r.regions) for r in listing.rows]
    assert rows == [
        ("vast", "8x-H100", "us", 1),
        ("lambda", "gpu_8x_h100", "us-tx-1", 1),
        ("aws", "p5.48xlarge", "us-west-2", 2),
        ("azure", "ND96isr_H100_v5", "eastus", 1),
    ]
    assert listing.rows[0].price_per_gpu == pytest.approx(2.5)
    every = planning.gpus("H100", 8, all_regions=True)
    assert len(every.rows) == 5


def test_gpus_sorts_by_price_per_gpu_and_filters(catalog: list[Offer]) -> None:
    rows = planning.gpus("H100").rows
    assert [r.offer.instance_type for r in rows][:2] == ["1x-H100", "8x-H100"]  # $2.5 vs $2.5/GPU-h
    spot = planning.gpus("H100", spot=True).rows
    assert [r.offer.spot_price for r in spot] == sorted(r.offer.spot_price for r in spot)  # type: ignore[type-var]
    assert all(r.offer.spot_price is not None for r in spot)
    # spot mode picks the region with the cheapest *spot* price
    aws = [r for r in spot if r.offer.cloud == "aws"]
    assert [r.offer.region for r in aws] == ["us-east-1"]
    assert {r.offer.cloud for r in planning.gpus("H100", fabric="rdma").rows} == {"aws", "azure"}
    assert {r.offer.cloud for r in planning.gpus("H100", fabric="infiniband").rows} == {"azure"}
    assert {r.offer.cloud for r in planning.gpus(None, min_gbps=1000).rows} == {"aws", "azure"}
    assert {r.offer.region for r in planning.gpus(None, region="eastus").rows} == {"eastus"}
    assert {r.offer.cloud for r in planning.gpus(None, cloud="gcp").rows} == {"gcp"}


def test_gpus_rows_carry_catalog_fields(catalog: list[Offer]) -> None:
    data = planning.gpus("H100", 8).to_json()
    assert set(Offer.__dataclass_fields__) <= set(data[0])
    assert data[0]["price_per_gpu_hour"] == pytest.approx(2.5)


def test_gpus_bad_input(catalog: list[Offer]) -> None:
    with pytest.raises(planning.InvalidQueryError, match="did you mean H100") as err:
        planning.gpus("H10")
    assert err.value.exit_code == 2
    with pytest.raises(LauncherError, match="Unknown fabric"):
        planning.gpus("H100", fabric="nvlink")
    with pytest.raises(LauncherError, match="Unknown cloud 'awz'.*did you mean aws"):
        planning.gpus("H100", cloud="awz")
    with pytest.raises(LauncherError, match="Unknown region 'us-east1' for aws; did you mean us"):
        planning.gpus("H100", cloud="AWS", region="us-east1")
    assert {r.offer.region for r in planning.gpus("H100", cloud="AWS", region="US-EAST-1").rows} == {
        "us-east-1"
    }
    with pytest.raises(LauncherError, match="positive"):
        planning.gpus("H100", 0)
    names = ["H100", "A100"]
    assert planning.parse_accelerator_spec("h100:8", names) == ("H100", 8.0)
    assert planning.parse_accelerator_spec("A100", names) == ("A100", None)
    for bad in ("H100:x", "H100:-1", ":8", "H100:nan"):
        with pytest.raises(LauncherError):
            planning.parse_accelerator_spec(bad, names)
    assert planning.parse_accelerator_spec("A100:0.5", names) == ("A100", 0.5)
    with pytest.raises(LauncherError, match="below 1"):  # as in a task's accelerators
        planning.parse_accelerator_spec("H100:1.5", names)


def test_gpu_summary(catalog: list[Offer]) -> None:
    rows = {r.accelerator: r for r in planning.gpu_summary()}
    assert set(rows) == {"A100", "H100"}
    h = rows["H100"]
    assert h.min_price_per_gpu == pytest.approx(2.5)
    assert h.min_spot_price_per_gpu == pytest.approx(1.2 / 1)
    assert h.clouds == ("aws", "azure", "lambda", "vast")
    assert (h.best_fabric, h.best_fabric_gbps) == ("infiniband", 3200.0)
    assert h.counts == (1.0, 8.0)
    assert rows["A100"].min_spot_price_per_gpu == pytest.approx(1.5)
    assert rows["A100"].to_dict()["clouds"] == ["aws", "gcp"]


def test_catalog_age_days() -> None:
    from datetime import UTC, datetime

    now = datetime(2025, 1, 12, tzinfo=UTC)
    assert planning.catalog_age_days("2025-01-02T00:00:00Z", now) == pytest.approx(10)
    assert planning.catalog_age_days("2025-01-02", now) == pytest.approx(10)
    assert planning.catalog_age_days("yesterday", now) is None
    assert planning.catalog_age_days(None, now) is None


# ---------------------------------------------------------------- the real bundled catalog

EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"


@pytest.fixture
def real_home(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "none")


def test_real_two_node_rdma_plan(real_home: None) -> None:
    p = planning.plan(Task.from_yaml(str(EXAMPLES / "train-2node-rdma.yaml")))
    assert p.placements
    assert all(x.fabric in {"infiniband", "efa", "roce"} for x in p.placements)
    assert all(x.num_nodes == 2 and x.accelerator == "H100" for x in p.placements)
    kinds = {(x.cloud, x.instance_type, x.fabric, x.fabric_gbps) for x in p.placements}
    assert ("aws", "p5.48xlarge", "efa", 3200.0) in kinds
    assert ("azure", "Standard_ND96isr_H100_v5", "infiniband", 3200.0) in kinds
    assert not {x.cloud for x in p.placements} & {"vast", "lambda", "local"}
    reasons = {(r.cloud, r.reason) for r in p.rejected}
    assert ("vast", "max 1 node < 2") in reasons
    assert any(c == "gcp" and r == "fabric tcpx is not RDMA" for c, r in reasons)
    costs = [x.hourly_cost for x in p.placements]
    assert costs == sorted(costs)


def test_real_vast_explanation(real_home: None) -> None:
    t = task("num_nodes: 3\n" + H100x8 + "  cloud: vast\n  network: {fabric: infiniband}\n")
    with pytest.raises(NoPlacementError) as err:
        planning.plan(t)
    assert str(err.value) == (
        "No offer with 3 nodes of H100:8 on vast with infiniband: "
        "vast offers max 1 node and no fabric data."
    )


def test_real_gpus_and_status(real_home: None) -> None:
    rows = planning.gpus("H100", 8, cloud="aws", all_regions=True).rows
    assert rows and all(r.offer.cloud == "aws" for r in rows)
    assert len({r.offer.region for r in rows}) == len(rows)
    status = planning.catalog_status()
    assert {"aws", "gcp", "azure", "local"} <= {c.cloud for c in status.clouds}
    assert planning.enabled_clouds(["local", "aws"])["local"].enabled is True
    assert planning.enabled_clouds(["aws"])["aws"].enabled is False


@pytest.mark.parametrize(
    ("acc", "instance_prefix"),
    [("T4", ("g4dn.",)), ("A10G", ("g5.",)), ("L4", ("g6.", "g6f.", "gr6.", "gr6f.")),
     ("L40S", ("g6e.",)), ("Inferentia2", ("inf2.",)), ("Trainium", ("trn1.", "trn1n."))],  # fmt: skip
)
def test_real_aws_has_g_inf_trn_rows(
    real_home: None, acc: str, instance_prefix: tuple[str, ...]
) -> None:
    rows = planning.gpus(acc, None, cloud="aws").rows
    assert rows and all(r.offer.instance_type.startswith(instance_prefix) for r in rows)


def test_real_cpu_only_task_on_aws_finds_rows(real_home: None) -> None:
    p = planning.cost(task("resources:\n  cloud: aws\n  cpus: 8+\n  memory: 32+\n"), hours=None)
    assert p.placements and {x.cloud for x in p.placements} == {"aws"}
    assert all(x.accelerator is None for x in p.placements[:20])
    first = p.placements[0]
    assert first.offer.vcpus is not None and first.offer.vcpus >= 8
    assert first.offer.memory_gib is not None and first.offer.memory_gib >= 32
