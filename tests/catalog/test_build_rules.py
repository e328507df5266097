"""Build-step rules on small hand-written inputs: GCP join, interconnect merge, parsing."""

from __future__ import annotations

from collections import Counter

import pytest

from launcher.catalog import gcp_join, interconnect
from launcher.catalog.skypilot_csv import BuildError, gpu_memory_gib, normalise_rows

MACHINES = {"a3-highgpu-8g": gcp_join.GpuMachine("H100", 8)}
N1 = {("T4", 1): gcp_join.N1HostRule(4, 48, 312), ("T4", 4): gcp_join.N1HostRule(48, 96, 624)}


def _gcp(
    it: str, acc: str, count: str, zone: str, price: str, spot: str, vcpus: str = "", mem: str = ""
) -> dict[str, str]:
    return {
        "InstanceType": it,
        "vCPUs": vcpus,
        "MemoryGiB": mem,
        "AcceleratorName": acc,
        "AcceleratorCount": count,
        "GpuInfo": "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]}" if acc else "",
        "Region": zone[:-2],
        "AvailabilityZone": zone,
        "Price": price,
        "SpotPrice": spot,
    }


def _join(rows: list[dict[str, str]]) -> tuple[list[gcp_join.Row], Counter[str]]:
    dropped: Counter[str] = Counter()
    return gcp_join.join_gcp(rows, MACHINES, N1, {}, dropped), dropped


def test_gpu_machine_needs_its_addon_in_the_same_zone() -> None:
    rows, dropped = _join(
        [
            _gcp("a3-highgpu-8g", "", "", "us-x1-a", "9", "3", "208", "1872"),
            _gcp("a3-highgpu-8g", "", "", "us-x1-b", "9", "3", "208", "1872"),
            _gcp("", "H100", "8", "us-x1-a", "30", ""),  # no spot price for the GPUs
        ]
    )
    assert [(r.zone, r.price, r.spot_price, r.accelerator) for r in rows] == [
        ("us-x1-a", 39, None, "H100")
    ]
    assert dropped["GPU host without its add-on row in the zone"] == 1


def test_n1_gets_cheapest_fitting_host_per_gpu_count() -> None:
    rows, dropped = _join(
        [
            _gcp("n1-standard-4", "", "", "us-x1-a", "0.19", "0.05", "4", "15"),  # < 16 GiB
            _gcp("n1-highmem-4", "", "", "us-x1-a", "0.24", "0.09", "4", "26"),
            _gcp("n1-standard-8", "", "", "us-x1-a", "0.38", "0.14", "8", "30"),
            _gcp("n1-standard-64", "", "", "us-x1-a", "3.0", "1.0", "64", "240"),
            _gcp("n1-standard-128", "", "", "us-x1-a", "1.0", "1.0", "128", "480"),  # > max vCPUs
            _gcp("n2-standard-4", "", "", "us-x1-a", "0.01", "0.01", "4", "16"),  # not N1
            _gcp("", "T4", "1", "us-x1-a", "0.35", "0.11"),
            _gcp("", "T4", "4", "us-x1-a", "1.4", "0.44"),
            _gcp("", "T4", "1", "us-x1-c", "0.35", "0.11"),  # no host in that zone
            _gcp("", "tpu-v4-8", "1", "us-x1-a", "5", "2"),
        ]
    )
    gpu = {
        (r.accelerator_count, r.instance_type): (r.price, r.spot_price)
        for r in rows
        if r.accelerator and not r.accelerator.startswith("tpu-")
    }
    assert gpu == {
        (1.0, "n1-highmem-4"): (pytest.approx(0.59), pytest.approx(0.2)),
        (4.0, "n1-standard-64"): (pytest.approx(4.4), pytest.approx(1.44)),
    }
    assert dropped["N1 GPU add-on without a fitting N1 host in the zone"] == 1
    # a TPU row is its own offer (a whole TPU VM), never joined to a host
    tpu = [r for r in rows if r.accelerator == "tpu-v4-8"]
    assert [(r.instance_type, r.accelerator_count, r.price, r.spot_price, r.vcpus) for r in tpu] == [
        ("TPU-VM", 1.0, 5.0, 2.0, None)
    ]
    assert len([r for r in rows if not r.accelerator]) == 6  # hosts are also CPU offers


def test_unknown_gpu_machine_type_is_reported_not_sold_as_cpu() -> None:
    rows, dropped = _join([_gcp("a9-futuregpu-8g", "", "", "us-x1-a", "9", "3", "8", "8")])
    assert rows == []
    assert dropped["GPU machine type missing from gcp_gpu_machines.csv"] == 1


def test_gpu_memory_conventions() -> None:
    info = "{'Gpus': [{'Name': 'A100', 'Count': 2, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}"
    assert gpu_memory_gib("vast", info) == 40  # vast: the entry holds the instance total
    assert gpu_memory_gib("lambda", info) == 80  # elsewhere: one GPU's memory
    assert (
        gpu_memory_gib("runpod", "{'Gpus': [{'Count': 1, 'MemoryInfo': {'SizeInMiB': 80}}]}") == 80
    )
    assert gpu_memory_gib("azure", "H100") is None
    assert (
        gpu_memory_gib("aws", "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 80}}]}") is None
    )  # 0.08 GiB: unit error
    assert (
        gpu_memory_gib("verda", '{"Gpus": [{"Count": 1, "MemoryInfo": {"SizeInMiB": 49152}}]}')
        == 48
    )


def test_normalise_rows_prices_regions_aliases() -> None:
    base = {
        "InstanceType": "x",
        "AcceleratorName": "RTX-6000-Ada",
        "AcceleratorCount": "2",
        "vCPUs": "8",
        "MemoryGiB": "32",
        "GpuInfo": "",
        "Region": "r1",
    }
    dropped: Counter[str] = Counter()
    rows = normalise_rows(
        "verda",
        [
            {**base, "Price": "1.5", "SpotPrice": "0.00"},
            {**base, "Price": "", "SpotPrice": "0.7", "Region": "r2"},
            {**base, "Price": "", "SpotPrice": "", "Region": "r3"},
            {**base, "Price": "1", "SpotPrice": "", "Region": ""},
        ],
        {"RTX-6000-Ada": "RTX6000-Ada"},
        dropped,
    )
    assert [(r.region, r.price, r.spot_price, r.accelerator, r.zone) for r in rows] == [
        ("r1", 1.5, None, "RTX6000-Ada", None),
        ("r2", None, 0.7, "RTX6000-Ada", None),
    ]
    assert dropped == Counter({"no price": 1, "no region": 1})
    with pytest.raises(BuildError, match="verda/x vCPUs"):
        normalise_rows(
            "verda", [{**base, "Price": "1", "SpotPrice": "", "vCPUs": "many"}], {}, Counter()
        )


REF = {
    "cloud": "aws",
    "instance_type": "p5.48xlarge",
    "accelerator": "H100",
    "accelerator_count": "8",
    "fabric": "efa",
    "interconnect_gbps": "3200",
    "nvlink": "yes",
    "source_url": "https://ref",
    "note": "",
}
EXTRA = {
    "cloud": "lambda",
    "instance_type": "gpu_8x_h100_sxm5",
    "fabric": "",
    "fabric_gbps": "",
    "nvlink": "yes",
    "inter_node_rdma": "no",
    "source_url": "https://extra",
    "note": "",
}


def test_interconnect_merge() -> None:
    facts = interconnect.load_interconnect([REF], [EXTRA])
    p5 = facts[("aws", "p5.48xlarge")]
    assert (p5.fabric, p5.fabric_gbps, p5.nvlink, p5.accelerator) == ("efa", 3200, True, "H100")
    lam = facts[("lambda", "gpu_8x_h100_sxm5")]
    assert (lam.fabric, lam.fabric_gbps, lam.nvlink, lam.inter_node_rdma) == (
        None,
        None,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("ref", "extra", "message"),
    [
        (
            [REF],
            [{**EXTRA, "cloud": "aws", "instance_type": "p5.48xlarge", "fabric": "roce"}],
            "contradicts",
        ),
        ([], [{**EXTRA, "fabric": "infiniband"}], "no inter-node RDMA"),
        ([{**REF, "fabric": "tcpxo"}], [], "not one of"),
        ([REF, REF], [], "listed twice"),
        ([{**REF, "nvlink": "maybe"}], [], "yes/no"),
    ],
)
def test_interconnect_rejects_bad_facts(
    ref: list[dict[str, str]], extra: list[dict[str, str]], message: str
) -> None:
    with pytest.raises(BuildError, match=message):
        interconnect.load_interconnect(ref, extra)


def test_max_nodes_rules() -> None:
    rules = interconnect.load_max_nodes_rules(
        [
            {"cloud": "vast", "instance_type_regex": ".*", "max_nodes": "1"},
            {"cloud": "runpod", "instance_type_regex": ".*_COMMUNITY$", "max_nodes": "1"},
        ]
    )
    assert interconnect.max_nodes_for(rules, "vast", "8x-H100_SXM-32-65536") == 1
    assert interconnect.max_nodes_for(rules, "runpod", "8x_H100_COMMUNITY") == 1
    assert interconnect.max_nodes_for(rules, "runpod", "8x_H100_SECURE") is None
    assert interconnect.max_nodes_for(rules, "aws", "p5.48xlarge") is None
