"""The committed snapshot: real prices and facts joined the way docs/catalog.md says."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
from pathlib import Path

import pytest

from launcher.catalog import build, query
from launcher.catalog.offer import FABRICS, RDMA_FABRICS, Offer
from launcher.catalog.snapshot import COLUMNS, bundled_dir, read_meta


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> list[Offer]:
    """Every bundled row (local offers excluded), read once for this module."""
    mp = pytest.MonkeyPatch()
    mp.setenv("LAUNCHER_HOME", str(tmp_path_factory.mktemp("home")))
    mp.delenv("LAUNCHER_CATALOG_DIR", raising=False)
    query.clear_process_cache()
    try:
        rows = [o for o in query.offers() if o.cloud != "local"]
    finally:
        query.clear_process_cache()
        mp.undo()
    return rows


def _one(rows: list[Offer], **match: object) -> Offer:
    found = [o for o in rows if all(getattr(o, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


def test_columns_are_the_offer_fields() -> None:
    assert tuple(f.name for f in dataclasses.fields(Offer)) == COLUMNS


def test_gcp_a3_highgpu_8g_is_host_plus_eight_h100_addon(catalog: list[Offer]) -> None:
    o = _one(catalog, cloud="gcp", instance_type="a3-highgpu-8g", zone="us-central1-a")
    # host $9.46006 + H100 x8 add-on $33.60609 (issue 2 pins $43.07/h)
    assert round(o.price or 0, 2) == 43.07
    assert o.spot_price == pytest.approx(3.86318 + 32.0104)
    assert (o.accelerator, o.accelerator_count, o.accelerator_memory_gib) == ("H100", 8, 80)
    assert (o.region, o.vcpus, o.memory_gib) == ("us-central1", 208, 1872)


def test_gcp_n1_host_with_t4_addon(catalog: list[Offer]) -> None:
    t4 = [
        o
        for o in catalog
        if o.cloud == "gcp" and o.accelerator == "T4" and o.zone == "us-central1-a"
    ]
    assert sorted(o.accelerator_count for o in t4) == [1, 2, 4]  # GCP allows 1, 2 or 4 T4
    one = _one(t4, accelerator_count=1)
    # cheapest N1 host with >= 4 vCPUs and >= 16 GiB: n1-highmem-4 $0.23661 + T4 $0.35
    assert one.instance_type == "n1-highmem-4"
    assert one.price == pytest.approx(0.23661 + 0.35)
    assert one.spot_price == pytest.approx(0.08638 + 0.1654)
    assert all(o.instance_type.startswith("n1-") for o in t4)


@pytest.mark.parametrize(
    ("machine", "accelerator", "count"),
    [
        ("a2-highgpu-8g", "A100", 8),
        ("a2-megagpu-16g", "A100", 16),
        ("a2-ultragpu-8g", "A100-80GB", 8),
        ("a3-edgegpu-8g", "H100", 8),
        ("a3-megagpu-8g", "H100-MEGA", 8),
        ("a3-ultragpu-8g", "H200", 8),
        ("a4-highgpu-8g", "B200", 8),
        ("g2-standard-4", "L4", 1),
        ("g2-standard-96", "L4", 8),
    ],
)
def test_gcp_accelerator_machines(
    catalog: list[Offer], machine: str, accelerator: str, count: int
) -> None:
    rows = [o for o in catalog if o.cloud == "gcp" and o.instance_type == machine]
    assert rows
    assert {(o.accelerator, o.accelerator_count) for o in rows} == {(accelerator, count)}
    assert all(o.price is not None and o.price > 1 for o in rows if count >= 8)


def test_gcp_a4_host_priced_zero_is_carried_by_its_addon(catalog: list[Offer]) -> None:
    # the a4-highgpu-8g host row says 0.0: the B200 add-on holds the machine's price
    o = _one(catalog, cloud="gcp", instance_type="a4-highgpu-8g", zone="us-central1-b")
    assert o.price == pytest.approx(90.216)


def test_no_gcp_gpu_row_without_both_parts(catalog: list[Offer]) -> None:
    gcp = [o for o in catalog if o.cloud == "gcp"]
    # a3-megagpu-8g hosts exist in 21 zones, the H100-MEGA add-on in only some of them
    mega_zones = {o.zone for o in gcp if o.instance_type == "a3-megagpu-8g"}
    assert 0 < len(mega_zones) < 21
    assert not [
        o
        for o in gcp
        if o.instance_type.startswith(("a2-", "a3-", "a4-", "g2-")) and not o.accelerator
    ]
    # TPU VMs are whole offers of their own (instance type TPU-VM), never a host + add-on
    tpus = [o for o in gcp if (o.accelerator or "").startswith("tpu")]
    assert tpus and all(o.instance_type == "TPU-VM" and o.accelerator_count == 1 for o in tpus)


def test_tpu_vm_and_oci_rows(catalog: list[Offer]) -> None:
    """Issue 12: SkyPilot's TPU names and OCI tasks are plannable from the bundled rows."""
    v2 = _one(catalog, cloud="gcp", accelerator="tpu-v2-8", zone="us-central1-b")
    assert (v2.price, v2.spot_price, v2.vcpus) == (4.5, 1.35, None)
    assert {o.accelerator for o in catalog if o.cloud == "gcp"} >= {"tpu-v6e-8", "tpu-v5p-8"}
    a10 = _one(catalog, cloud="oci", instance_type="VM.GPU.A10.1", zone="AP-SEOUL-1-AD-1")
    assert (a10.region, a10.accelerator, a10.accelerator_count, a10.price) == (
        "ap-seoul-1", "A10", 1, 2.0)
    assert a10.accelerator_memory_gib == 24
    oci = [o for o in catalog if o.cloud == "oci"]
    assert len(oci) == 3726 and len({o.region for o in oci}) == 44


@pytest.mark.parametrize(
    ("cloud", "instance_type", "fabric", "gbps"),
    [
        ("gcp", "a3-highgpu-8g", "tcpx", 1000),
        ("aws", "p5.48xlarge", "efa", 3200),
        ("azure", "Standard_ND96isr_H100_v5", "infiniband", 3200),
        ("gcp", "a3-ultragpu-8g", "roce", 3200),
        ("aws", "p3dn.24xlarge", "efa", 100),  # from interconnect_extra.csv
    ],
)
def test_interconnect_join(
    catalog: list[Offer], cloud: str, instance_type: str, fabric: str, gbps: float
) -> None:
    rows = [o for o in catalog if o.cloud == cloud and o.instance_type == instance_type]
    assert rows
    assert {(o.fabric, o.fabric_gbps) for o in rows} == {(fabric, gbps)}


def test_unknown_fabric_stays_unknown(catalog: list[Offer]) -> None:
    assert {o.fabric for o in catalog} <= {None, *FABRICS}
    nc = [o for o in catalog if o.instance_type == "Standard_NC24ads_A100_v4"]
    assert nc and all(o.fabric is None and o.fabric_gbps is None for o in nc)
    # a fabric is only ever set for types named in the reference or the extra file
    typed = {(o.cloud, o.instance_type) for o in catalog if o.fabric is not None}
    assert ("lambda", "gpu_8x_h100_sxm5") not in typed


def test_lambda_8x_on_demand_is_never_rdma(catalog: list[Offer]) -> None:
    eight = [o for o in catalog if o.cloud == "lambda" and o.instance_type.startswith("gpu_8x")]
    assert len({o.instance_type for o in eight}) >= 5
    assert all(o.fabric not in RDMA_FABRICS for o in eight)
    assert all(o.fabric != "infiniband" for o in catalog if o.cloud == "lambda")
    assert _one(eight, instance_type="gpu_8x_h100_sxm5", region="us-east-1").nvlink is True


def test_marketplace_gang_limits(catalog: list[Offer]) -> None:
    vast = [o for o in catalog if o.cloud == "vast"]
    assert vast and all(o.max_nodes == 1 for o in vast)
    runpod = [o for o in catalog if o.cloud == "runpod"]
    # pods are single machines; Instant Clusters have no public provisioning API
    assert runpod and all(o.max_nodes == 1 for o in runpod)
    assert all(o.max_nodes is None for o in catalog if o.cloud not in ("vast", "runpod"))


def test_vast_zero_spot_means_not_offered(catalog: list[Offer]) -> None:
    vast = [o for o in catalog if o.cloud == "vast"]
    assert all(o.spot_price is None for o in vast)  # every vast row lists SpotPrice 0.00
    assert all(o.price is not None and o.price > 0 for o in vast)
    assert all(o.price is None or o.price > 0 for o in catalog)
    assert all(o.spot_price is None or o.spot_price > 0 for o in catalog)


def test_gpu_memory_units_per_cloud(catalog: list[Offer]) -> None:
    def mem(cloud: str, it: str) -> float | None:
        return next(
            o.accelerator_memory_gib for o in catalog if o.cloud == cloud and o.instance_type == it
        )

    assert mem("runpod", "8x_H100_SECURE") == 80  # RunPod's "SizeInMiB: 80" is GB
    assert mem("vast", "8x-H200-32-65536") == pytest.approx(
        140.4, abs=0.1
    )  # vast: instance total / 8
    assert mem("lambda", "gpu_8x_b200_sxm6") == 180  # per-GPU entry, not the wrong total
    assert mem("aws", "p4d.24xlarge") == 40
    assert mem("azure", "Standard_ND96isr_H100_v5") is None  # Azure's GpuInfo has no memory
    assert all(
        o.accelerator_memory_gib is None or 1 <= o.accelerator_memory_gib <= 400 for o in catalog
    )


def test_every_row_says_where_and_when(catalog: list[Offer]) -> None:
    assert len(catalog) > 50_000
    for o in catalog:
        assert o.source and o.fetched_at
        assert datetime.datetime.fromisoformat(o.fetched_at.replace("Z", "+00:00")).tzinfo
        assert o.arch in ("x86_64", "arm64")
        assert o.region
    by_cloud = {o.cloud: o.source for o in catalog}
    assert set(by_cloud) == {m.cloud for m in read_meta(bundled_dir()).clouds}
    aws_source = {o.instance_type.split(".")[0]: o.source for o in catalog if o.cloud == "aws"}
    assert aws_source["p5"] == "skypilot-catalog v8 aws/vms.csv"
    assert aws_source["g5"] == "anycloud-sh/catalog (SkyPilot v8 layout) aws/vms-extra.csv"


def test_aws_is_built_from_both_reference_files(catalog: list[Offer]) -> None:
    """vms.csv has only the p family; vms-extra.csv adds g/inf/trn/dl and CPU families:
    a task asking for T4, A10G, L4, Inferentia, Trainium or only CPUs on AWS finds rows."""
    aws = [o for o in catalog if o.cloud == "aws"]
    accs = {o.accelerator for o in aws}
    assert {"H100", "T4", "A10G", "L4", "L40S", "Inferentia", "Inferentia2", "Trainium",
            "Trainium2"} <= accs
    cpu = [o for o in aws if o.accelerator is None]
    assert {o.instance_type.split(".")[0] for o in cpu} >= {"m6i", "c6i", "r6i", "m7i", "c7i", "t3"}
    by_type = {o.instance_type: o for o in aws}
    # fabric only where a source says: EFA types from the interconnect facts, others unknown
    assert (by_type["g5.48xlarge"].fabric, by_type["g5.48xlarge"].fabric_gbps) == ("efa", 100)
    assert (by_type["trn1.32xlarge"].fabric, by_type["trn1.32xlarge"].fabric_gbps) == ("efa", 800)
    assert by_type["g5.xlarge"].fabric is None and by_type["t3.micro"].fabric is None
    assert by_type["g6f.large"].accelerator_count == 0.125  # a fractional L4
    meta = {m.cloud: m for m in read_meta(bundled_dir()).clouds}["aws"]
    assert meta.rows == len(aws) and "vms-extra.csv" in meta.source
    assert len(meta.copied_dates) == 2  # both files' copy dates are marked as copies


def test_arch_rules(catalog: list[Offer]) -> None:
    arch = {(o.cloud, o.instance_type): o.arch for o in catalog}
    assert arch[("lambda", "gpu_1x_gh200")] == "arm64"
    assert arch[("gcp", "t2a-standard-8")] == "arm64"
    assert arch[("azure", "Standard_D2ps_v6")] == "arm64"
    assert arch[("azure", "Standard_D2s_v5")] == "x86_64"
    assert arch[("aws", "p5.48xlarge")] == "x86_64"


def test_meta_matches_the_offers_file() -> None:
    meta = read_meta(bundled_dir())
    data = Path(bundled_dir(), meta.offers_file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == meta.offers_file_sha256
    assert len(data) < 5_000_000  # the committed data stays small
    assert meta.total_rows == sum(c.rows for c in meta.clouds)
    assert len(meta.clouds) == 13  # 12 + oci (issue 12)


SHARED = build.default_shared_dir()


@pytest.mark.skipif(
    SHARED is None or not os.path.isdir(os.path.join(SHARED, "catalog-reference")),
    reason="../shared/catalog-reference not present (not a development checkout)",
)
def test_committed_snapshot_is_up_to_date_with_shared() -> None:
    assert SHARED is not None
    _, rebuilt = build.build_snapshot(
        os.path.join(SHARED, "catalog-reference"),
        os.path.join(SHARED, "interconnect-reference.csv"),
    )
    committed = read_meta(bundled_dir())
    # the snapshot hash covers every row's content, independent of the SQLite version
    assert rebuilt.snapshot_hash == committed.snapshot_hash, "run: python -m launcher.catalog.build"
    assert dataclasses.replace(rebuilt, offers_file_sha256="") == dataclasses.replace(
        committed, offers_file_sha256=""
    )


def test_reference_names_the_gpu_a_catalog_row_lacks(catalog: list[Offer]) -> None:
    # Azure's vms.csv lists the GB200 VM without an accelerator; the interconnect
    # reference (with its source) says 4 x GB200, so the row is not a "CPU machine"
    rows = [o for o in catalog if o.instance_type == "Standard_ND128isr_NDR_GB200_v6"]
    assert rows and {(o.accelerator, o.accelerator_count, o.arch) for o in rows} == {
        ("GB200", 4, "arm64")
    }
