#!/usr/bin/env python3
"""Fake `nvidia-smi` and `dcgmi` for tests, printing NVIDIA's documented formats.

Invoked through the symlinks `nvidia-smi` and `dcgmi` next to it. The machine it
pretends to be is read from the JSON file named by $LAUNCHER_FAKE_GPU_CONFIG, else
~/.fake-gpus.json, else a healthy 8 x H100 SXM node. Keys (all optional):

    count (8), name ("NVIDIA H100 80GB HBM3"), memory_mib (81559),
    ecc_uncorrected {"<gpu index>": n}, retired_pending ["<gpu index>"],
    pcie_width {"<gpu index>": current width} (max 16), nvlink_links (18),
    nvlink_down [[gpu, link]], dcgm ("pass" | "warn" | "fail"), exit_code (0),
    util {"<gpu index>": percent} (0), mem_used_mib {"<gpu index>": MiB} (0),
    power_w (70.5), temp_c (34), throttle {"<gpu index>": "0x...4"} (none)
"""

import json
import os
import sys

DEFAULT = {"count": 8, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}


def config():
    path = os.environ.get("LAUNCHER_FAKE_GPU_CONFIG") or os.path.expanduser("~/.fake-gpus.json")
    cfg = dict(DEFAULT)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cfg.update(json.load(f))
    return cfg


def query_gpu(cfg, fields):
    for i in range(int(cfg["count"])):
        width = cfg.get("pcie_width", {}).get(str(i), 16)
        values = {
            "index": str(i),
            "name": cfg["name"],
            "uuid": f"GPU-3f1c2a0e-0000-4000-8000-00000000000{i}",
            "pci.bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            "memory.total": str(cfg["memory_mib"]),
            "ecc.errors.uncorrected.volatile.total": str(cfg.get("ecc_uncorrected", {}).get(str(i), 0)),
            "retired_pages.pending": "Yes" if str(i) in cfg.get("retired_pending", []) else "No",
            "pcie.link.gen.current": "5",
            "pcie.link.gen.max": "5",
            "pcie.link.width.current": str(width),
            "pcie.link.width.max": "16",
            "utilization.gpu": str(cfg.get("util", {}).get(str(i), 0)),
            "memory.used": str(cfg.get("mem_used_mib", {}).get(str(i), 0)),
            "power.draw": str(cfg.get("power_w", 70.5)),
            "temperature.gpu": str(cfg.get("temp_c", 34)),
            "clocks_throttle_reasons.active":
                cfg.get("throttle", {}).get(str(i), "0x0000000000000000"),
        }
        print(", ".join(values.get(f, "[N/A]") for f in fields))


def nvlink_status(cfg):
    down = {(int(g), int(ln)) for g, ln in cfg.get("nvlink_down", [])}
    for i in range(int(cfg["count"])):
        print(f"GPU {i}: {cfg['name']} (UUID: GPU-3f1c2a0e-0000-4000-8000-00000000000{i})")
        for link in range(int(cfg.get("nvlink_links", 18))):
            state = "<inactive>" if (i, link) in down else "26.562 GB/s"
            print(f"\t Link {link}: {state}")


def nvidia_smi(cfg, args):
    query = [a for a in args if a.startswith("--query-gpu=")]
    if query:
        query_gpu(cfg, query[0].split("=", 1)[1].split(","))
    elif args[:2] == ["nvlink", "-s"]:
        nvlink_status(cfg)
    else:
        print(f"fake nvidia-smi: unsupported arguments {args}", file=sys.stderr)
        return 2
    return 0


def dcgmi(cfg, args):
    result = {"pass": "Pass", "warn": "Warn", "fail": "Fail"}[cfg.get("dcgm", "pass")]
    print("Successfully ran diagnostic for group.")
    print("+---------------------------+------------------------------------------------+")
    print("| Diagnostic                | Result                                         |")
    print("+===========================+================================================+")
    print("|-----  Deployment  --------+------------------------------------------------|")
    print("| Denylist                  | Pass                                           |")
    print("| NVML Library              | Pass                                           |")
    print(f"| GPU Memory                | {result:<47}|")
    print("+---------------------------+------------------------------------------------+")
    return 0 if result != "Fail" else 226


def main():
    cfg = config()
    if cfg.get("exit_code"):
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return int(cfg["exit_code"])
    tool = os.path.basename(sys.argv[0])
    return dcgmi(cfg, sys.argv[1:]) if tool == "dcgmi" else nvidia_smi(cfg, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
