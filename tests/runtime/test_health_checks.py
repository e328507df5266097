"""The node-side health checks (launcher/runtime/health_checks.py): parsers on recorded
and documented output, and whole reports against the fake nvidia-smi/dcgmi through PATH."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.runtime import health_checks as hc
from tests.fakes import fake_path, write_config

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPT = Path(hc.__file__)


def test_parse_gpu_csv_reads_documented_rows_and_na_values() -> None:
    rows = hc.parse_gpu_csv((FIXTURES / "nvidia_smi_a100_query.csv").read_text())
    assert [r["index"] for r in rows] == ["0", "1", "2", "3"]
    assert rows[0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert rows[3]["ecc.errors.uncorrected.volatile.total"] == "[N/A]"
    assert hc.parse_gpu_csv("garbage line\n0, only, three") == []


def test_ecc_and_pcie_findings_from_the_fixture() -> None:
    rows = hc.parse_gpu_csv((FIXTURES / "nvidia_smi_a100_query.csv").read_text())
    ecc = hc._ecc(rows, 0.0)
    assert ecc["status"] == hc.FAIL
    assert ecc["evidence"] == ["GPU 2 (00000000:47:00.0): 2 uncorrected ECC error(s)"]
    pcie = hc._pcie(rows, 0.0)
    assert pcie["status"] == hc.WARN  # GPU 2 at x8; GPU 1's idle gen 1 is no finding
    assert len(pcie["evidence"]) == 1 and "x8 of x16" in pcie["evidence"][0]


def test_parse_xids_maps_codes_to_actions() -> None:
    events = hc.parse_xids((FIXTURES / "kern_xid.log").read_text())
    assert [(e["xid"], e["status"]) for e in events] == [(13, hc.WARN), (79, hc.FAIL)]
    assert events[1]["pci"] == "PCI:0000:3b:00"
    assert "fallen off the bus" in events[1]["meaning"]
    for code, status in ((48, hc.FAIL), (63, hc.WARN), (64, hc.FAIL), (74, hc.FAIL),
                         (94, hc.WARN), (95, hc.FAIL), (31, hc.WARN), (43, hc.WARN)):
        line = f"[1.0] NVRM: Xid (PCI:0000:18:00): {code}, pid=1, name=x"
        assert hc.parse_xids(line)[0]["status"] == status, code


def test_parse_nvlink_and_dcgm() -> None:
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n"
            "\t Link 1: <inactive>\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
            "\t Link 0: 26.562 GB/s\n")
    assert hc.parse_nvlink(text) == {0: [(0, "26.562 GB/s"), (1, "<inactive>")],
                                     1: [(0, "26.562 GB/s")]}
    assert hc.parse_dcgm_diag("| Memory   | Fail - GPU 3 |\n| PCIe | Pass |")[0] == hc.FAIL
    assert hc.parse_dcgm_diag("| PCIe | Pass |") == (hc.OK, [])


@pytest.mark.parametrize(("expected", "name", "ok"), [
    ("H100", "NVIDIA H100 80GB HBM3", True),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
    ("A100-80GB", "NVIDIA A100-SXM4-40GB", False),
    ("L4", "NVIDIA L40S", False),
    ("RTX4090", "NVIDIA GeForce RTX 4090", True),
    ("A10G", "NVIDIA A10G", True),
    ("A100-80GB-SXM", "NVIDIA A100-SXM4-80GB", True),
    ("H100-SXM", "NVIDIA H100 80GB HBM3", True),
    ("H100", "NVIDIA H200", False),
    ("RTXA6000", "NVIDIA RTX A6000", True),
    ("RTX4000-Ada", "NVIDIA RTX 4000 Ada Generation", True),
])
def test_model_matches(expected: str, name: str, ok: bool) -> None:
    assert hc.model_matches(expected, name) is ok


def _report(tmp_path: Path, expect: dict, *, kmsg: str = "", path: str | None = None,
            **config: object) -> dict:
    """Run the shipped script as a node runs it, with the fakes first on PATH."""
    cfg = write_config(tmp_path / "gpus.json", **config)
    kern = tmp_path / "kern.log"
    kern.write_text(kmsg)
    env = {"PATH": path if path is not None else fake_path(),
           "LAUNCHER_FAKE_GPU_CONFIG": str(cfg), "LAUNCHER_HEALTH_KMSG_PATH": str(kern),
           "LAUNCHER_HEALTH_IB_PATH": str(tmp_path / "ib"), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, str(SCRIPT), json.dumps(expect)], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def _by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_healthy_node_passes(tmp_path: Path) -> None:
    report = _report(tmp_path, {"gate": "quick", "gpus": 8, "model": "H100", "nvlink": True})
    assert report["status"] == "ok", report
    assert set(_by_name(report)) == {"gpus", "ecc", "pcie", "xid", "nvlink"}
    assert all(c["seconds"] >= 0 for c in report["checks"])


def test_seven_of_eight_gpus_fails(tmp_path: Path) -> None:
    report = _report(tmp_path, {"gpus": 8, "model": "H100"}, count=7)
    gpus = _by_name(report)["gpus"]
    assert report["status"] == gpus["status"] == "fail"
    assert "7 GPU(s) visible, 8 paid for" in gpus["summary"]
    assert len(gpus["evidence"]) == 7


def test_wrong_model_fails(tmp_path: Path) -> None:
    report = _report(tmp_path, {"gpus": 8, "model": "H100"}, name="NVIDIA A100-SXM4-80GB")
    assert "is not the H100 paid for" in _by_name(report)["gpus"]["summary"]


def test_xid_79_fails_with_the_raw_line(tmp_path: Path) -> None:
    line = "[ 9123.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus."
    report = _report(tmp_path, {"gpus": 8}, kmsg=line + "\n")
    xid = _by_name(report)["xid"]
    assert report["status"] == xid["status"] == "fail"
    assert xid["evidence"] == [line]
    assert "Xid 79" in xid["summary"]


def test_app_xid_only_warns(tmp_path: Path) -> None:
    report = _report(tmp_path, {"gpus": 8},
                     kmsg="NVRM: Xid (PCI:0000:3b:00): 13, pid=4, name=python3, Graphics\n")
    assert report["status"] == "warn"


def test_ecc_nvlink_ib_and_dcgm_failures(tmp_path: Path) -> None:
    report = _report(tmp_path, {"gate": "dcgm-1", "gpus": 8, "nvlink": True, "ib": 2},
                     ecc_uncorrected={"3": 1}, nvlink_down=[[5, 2]], dcgm="fail")
    checks = _by_name(report)
    assert {n: c["status"] for n, c in checks.items()} == {
        "gpus": "ok", "ecc": "fail", "pcie": "ok", "xid": "ok", "nvlink": "fail",
        "infiniband": "fail", "dcgm": "fail"}
    assert checks["nvlink"]["evidence"] == ["GPU 5 link 2: <inactive>"]


def test_infiniband_devices_up(tmp_path: Path) -> None:
    for dev, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        port = tmp_path / "ib" / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
    assert _by_name(_report(tmp_path, {"ib": 1}))["infiniband"]["status"] == "ok"
    ib = _by_name(_report(tmp_path, {"ib": 2}))["infiniband"]
    assert ib["status"] == "fail" and "mlx5_1 port 1: 1: DOWN" in ib["evidence"]


def test_no_nvidia_smi(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cpu = _report(tmp_path, {"gpus": 0}, path=str(empty))
    assert cpu["status"] == "ok" and "no GPUs expected" in cpu["checks"][0]["summary"]
    gpu = _report(tmp_path, {"gpus": 8}, path=str(empty))
    assert gpu["status"] == "fail" and "nvidia-smi not found" in gpu["checks"][0]["summary"]
    local = _report(tmp_path, {"gpus": 8, "simulated": True}, path=str(empty))
    assert local["status"] == "ok" and "simulated" in local["checks"][0]["summary"]


def test_dcgm_missing_warns(tmp_path: Path) -> None:
    only_smi = tmp_path / "smi"
    only_smi.mkdir()
    (only_smi / "nvidia-smi").symlink_to(Path(fake_path().split(":")[0]) / "fakegpu.py")
    python_dir = Path(sys.executable).parent  # the fake's `#!/usr/bin/env python3`
    report = _report(tmp_path, {"gate": "dcgm-2", "gpus": 8},
                     path=f"{only_smi}:{python_dir}:/usr/bin:/bin")
    assert _by_name(report)["gpus"]["status"] == "ok"
    assert _by_name(report)["dcgm"]["status"] == "warn"


def test_bad_expectation_is_reported(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "[1]"], capture_output=True, text=True,
                         check=False, timeout=30)
    assert out.returncode == 2 and "bad expectation" in json.loads(out.stdout)["error"]


def test_parse_sample_csv_decodes_throttle_bits_and_na() -> None:
    text = ("0, NVIDIA H100 80GB HBM3, 97, 70123, 81559, 687.21, 71, 0x0000000000000004\n"
            "1, NVIDIA H100 80GB HBM3, [N/A], 0, 81559, [N/A], 40, 0x0000000000000061\n"
            "2, NVIDIA H100 80GB HBM3, 0, 0, 81559, 70.1, 30, 0x0000000000000001\n")
    gpus = hc.parse_sample_csv(text)
    assert gpus[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "util": 97.0,
                       "mem_used": 70123.0, "mem_total": 81559.0, "power": 687.21,
                       "temp": 71.0, "throttle": ["power cap"]}
    assert gpus[1]["util"] is None and gpus[1]["power"] is None
    assert gpus[1]["throttle"] == ["sw thermal", "hw thermal"]  # 0x1 (idle) is no throttling
    assert gpus[2]["throttle"] == []


def test_sample_through_the_fake(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "gpus.json", count=2, util={"1": 88},
                       throttle={"1": "0x0000000000000008"})
    env = {"PATH": fake_path(), "LAUNCHER_FAKE_GPU_CONFIG": str(cfg), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, str(SCRIPT), "--sample"], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    doc = json.loads(out.stdout)
    assert doc["error"] is None
    assert [(g["index"], g["util"], g["throttle"]) for g in doc["gpus"]] == [
        (0, 0.0, []), (1, 88.0, ["hw slowdown"])]
    none = subprocess.run([sys.executable, str(SCRIPT), "--sample"], env={"PATH": str(tmp_path)},
                          capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(none.stdout) == {"gpus": [], "error": "nvidia-smi: not found on PATH"}


def _report_tools(tmp_path: Path, expect: dict, **config: object) -> dict:
    """Like _report, without LAUNCHER_HEALTH_IB_PATH: InfiniBand is read with `ibstat`."""
    cfg = write_config(tmp_path / "gpus.json", **config)
    env = {"PATH": fake_path(), "LAUNCHER_FAKE_GPU_CONFIG": str(cfg), "HOME": str(tmp_path),
           "LAUNCHER_HEALTH_KMSG_PATH": str(tmp_path / "none.log")}
    out = subprocess.run([sys.executable, str(SCRIPT), json.dumps(expect)], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_infiniband_through_ibstat(tmp_path: Path) -> None:
    ok = _by_name(_report_tools(tmp_path, {"ib": 2}, ib_cas=2))["infiniband"]
    assert ok["status"] == "ok" and ok["summary"] == "2 InfiniBand device(s) up (ibstat)"
    assert ok["evidence"][0] == "mlx5_0 port 1: Active/LinkUp, rate 400, InfiniBand"
    bad = _by_name(_report_tools(tmp_path, {"ib": 2}, ib_cas=2, ib_down=["mlx5_1"]))
    assert bad["infiniband"]["status"] == "fail"
    assert "mlx5_1 port 1: Down/Polling, rate 10, InfiniBand" in bad["infiniband"]["evidence"]


def test_efa_through_fi_info(tmp_path: Path) -> None:
    ok = _by_name(_report_tools(tmp_path, {"efa": 1}, efa_count=2))["efa"]
    assert ok["status"] == "ok" and ok["summary"] == "2 EFA device(s): rdmap16s27, rdmap17s27"
    none = _by_name(_report_tools(tmp_path, {"efa": 1}))["efa"]
    assert none["status"] == "fail" and none["evidence"] == ["fi_getinfo: -61 (No data available)"]
    missing = _by_name(_report(tmp_path, {"efa": 1}, path=str(tmp_path)))["efa"]
    assert missing["status"] == "fail" and missing["summary"].startswith("fi_info not found")


def test_ibstat_and_fi_info_parsers_on_documented_output() -> None:
    from launcher.runtime.health_checks import parse_fi_info, parse_ibstat

    text = ("CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
            "\t\tPhysical state: LinkUp\n\t\tRate: 200\n\t\tLink layer: InfiniBand\n"
            "CA 'mlx5_1'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n")
    assert [(p["ca"], p["state"], p["physical"], p["rate"]) for p in parse_ibstat(text)] == [
        ("mlx5_0", "Active", "LinkUp", "200"), ("mlx5_1", "Down", "Disabled", "")]
    fi = ("provider: efa\n    fabric: EFA-fe80::94:3dff:fe89:1b70\n    domain: efa_0-rdm\n"
          "    version: 2.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n"
          "provider: efa\n    fabric: EFA-fe80::94:3dff:fe89:1b70\n    domain: efa_0-dgrm\n"
          "provider: tcp\n    domain: eth0\n")
    assert parse_fi_info(fi) == ["efa_0"]
