"""The local cloud's offers, with a fake nvidia-smi on PATH (the real one's CLI shape)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher.catalog import local, query

_FAKE_SMI = """#!/bin/sh
echo called >> "{log}"
case "$*" in
  *--query-gpu=name,memory.total*--format=csv,noheader,nounits*) ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
{body}
"""


def _fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "smi-calls.log"
    script = bindir / "nvidia-smi"
    script.write_text(_FAKE_SMI.format(log=log, body=body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LAUNCHER_LOCAL_GPUS", raising=False)
    local.reset_cache()
    return log


_TWO_H100_ONE_T4 = """cat <<'OUT'
NVIDIA H100 80GB HBM3, 81559
NVIDIA H100 80GB HBM3, 81559
Tesla T4, 15360
OUT"""


def test_local_gpus_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake_nvidia_smi(tmp_path, monkeypatch, _TWO_H100_ONE_T4)
    offers = [o for o in query.offers(clouds=["local"])]
    got = {(o.instance_type, o.accelerator, o.accelerator_count) for o in offers}
    assert got == {
        ("local", None, 0),
        ("local-1xH100", "H100", 1),
        ("local-2xH100", "H100", 2),
        ("local-1xT4", "T4", 1),
    }
    h100 = next(o for o in offers if o.accelerator == "H100")
    assert h100.accelerator_memory_gib == pytest.approx(79.65)
    for o in offers:
        assert (o.cloud, o.region, o.zone, o.price, o.spot_price) == (
            "local",
            "local",
            None,
            0.0,
            0.0,
        )
        assert o.fabric is None and o.max_nodes is None and o.source and o.fetched_at
    # the catalog query mixes them in, filtered like any other offer
    assert {
        (o.cloud, o.accelerator_count) for o in query.offers(["h100"]) if o.cloud == "local"
    } == {
        ("local", 1),
        ("local", 2),
    }
    assert "H100" in query.accelerator_names() and "T4" in query.accelerator_names()
    assert log.read_text().count("called") == 1  # probed once per process


def test_failing_or_hanging_nvidia_smi_means_no_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert local.local_gpus() == ()
    _fake_nvidia_smi(tmp_path, monkeypatch, "sleep 5")
    monkeypatch.setattr(local, "PROBE_TIMEOUT_S", 0.3)
    assert local.local_gpus() == ()
    assert [o.instance_type for o in local.local_offers()] == ["local"]


def test_cpu_node_always_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("LAUNCHER_LOCAL_GPUS", raising=False)
    local.reset_cache()
    (cpu,) = local.local_offers()
    assert cpu.accelerator is None and cpu.accelerator_count == 0
    assert cpu.vcpus == os.cpu_count()
    meminfo = Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]
    assert cpu.memory_gib == pytest.approx(int(meminfo) / 2**20, abs=0.01)
    assert query.offers(["H100"], clouds=["local"]) == []
    assert [o.instance_type for o in query.offers(clouds=["local"])] == ["local"]


def test_env_declares_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "A100-80GB:2,T4:1")
    assert [(o.accelerator, o.accelerator_count) for o in local.local_offers()] == [
        (None, 0),
        ("A100-80GB", 1),
        ("A100-80GB", 2),
        ("T4", 1),
    ]
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "none")
    assert len(local.local_offers()) == 1


@pytest.mark.parametrize(
    ("smi_name", "canonical"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("Tesla P100-PCIE-16GB", "P100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA RTX A6000", "RTXA6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX6000-Ada"),
        ("Quadro RTX 6000", "RTX6000"),
        ("NVIDIA Fancy Future GPU", "Fancy-Future-GPU"),
    ],
)
def test_canonical_gpu_names(smi_name: str, canonical: str) -> None:
    assert local.canonical_gpu_name(smi_name) == canonical
