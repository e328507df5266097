#!/usr/bin/env python3
"""Fake `nvidia-smi`, `dcgmi`, `ibstat`, `fi_info`, `mpirun` and `all_reduce_perf` for
tests, printing the formats NVIDIA, the OFED tools, libfabric and nccl-tests document.

Invoked through the symlinks of those names next to it. The fake `mpirun` runs its
program once (as rank 0, the one nccl-tests prints from) with FAKE_MPI_HOSTS set to the
hosts of its `-H`; the fake `all_reduce_perf` reports the bus bandwidth of the slowest of
those hosts. The machine it
pretends to be is read from the JSON file named by $LAUNCHER_FAKE_GPU_CONFIG, else
~/.fake-gpus.json, else a healthy 8 x H100 SXM node. Keys (all optional):

    count (8), name ("NVIDIA H100 80GB HBM3"), memory_mib (81559),
    ecc_uncorrected {"<gpu index>": n}, retired_pending ["<gpu index>"],
    pcie_width {"<gpu index>": current width} (max 16), nvlink_links (18),
    nvlink_down [[gpu, link]], dcgm ("pass" | "warn" | "fail"), exit_code (0),
    util {"<gpu index>": percent} (0), mem_used_mib {"<gpu index>": MiB} (0),
    power_w (70.5), temp_c (34), throttle {"<gpu index>": "0x...4"} (none),
    ib_cas (1: mlx5_0), ib_down ["mlx5_1"] (CAs whose port is down), ib_rate (400),
    efa_count (0: fi_info finds no EFA provider),
    nccl_gbps {"<host ip>": Gb/s} (each host's network; others: nccl_default_gbps, 3200)
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


def ibstat(cfg, args):
    down = set(cfg.get("ib_down", []))
    for i in range(int(cfg.get("ib_cas", 1))):
        ca = f"mlx5_{i}"
        up = ca not in down
        print(f"CA '{ca}'")
        print("\tCA type: MT4129")
        print("\tNumber of ports: 1")
        print("\tFirmware version: 28.39.1002")
        print("\tHardware version: 0")
        print(f"\tNode GUID: 0x946dae0300{i:06x}")
        print(f"\tSystem image GUID: 0x946dae0300{i:06x}")
        print("\tPort 1:")
        print(f"\t\tState: {'Active' if up else 'Down'}")
        print(f"\t\tPhysical state: {'LinkUp' if up else 'Polling'}")
        print(f"\t\tRate: {cfg.get('ib_rate', 400) if up else 10}")
        print(f"\t\tBase lid: {i + 3 if up else 65535}")
        print("\t\tLMC: 0")
        print("\t\tSM lid: 1")
        print("\t\tCapability mask: 0xa651e848")
        print(f"\t\tPort GUID: 0x946dae0300{i:06x}")
        print("\t\tLink layer: InfiniBand")
    return 0


def fi_info(cfg, args):
    count = int(cfg.get("efa_count", 0))
    if not count:
        print("fi_getinfo: -61 (No data available)", file=sys.stderr)
        return 1
    for i in range(count):
        print("provider: efa")
        print("    fabric: efa-direct")
        print(f"    domain: rdmap{16 + i}s27-rdm")
        print("    version: 122.0")
        print("    type: FI_EP_RDM")
        print("    protocol: FI_PROTO_EFA")
    return 0


def mpirun(cfg, args):
    hosts = []
    for i, a in enumerate(args):
        if a in ("-H", "--host") and i + 1 < len(args):
            hosts = [h.split(":")[0] for h in args[i + 1].split(",")]
    prog = next((i for i, a in enumerate(args) if a.endswith("all_reduce_perf")), None)
    if prog is None:
        print("fake mpirun: no program", file=sys.stderr)
        return 2
    os.environ["FAKE_MPI_HOSTS"] = ",".join(hosts)
    os.execvp(args[prog], args[prog:])
    return 0


def all_reduce_perf(cfg, args):
    hosts = [h for h in os.environ.get("FAKE_MPI_HOSTS", "").split(",") if h]
    speeds = cfg.get("nccl_gbps", {})
    gbps = min((float(speeds.get(h, cfg.get("nccl_default_gbps", 3200))) for h in hosts),
               default=float(cfg.get("nccl_default_gbps", 3200)))
    busbw = gbps / 8 * 0.93
    size = 1073741824
    n = max(1, len(hosts)) * int(args[args.index("-g") + 1] if "-g" in args else 1)
    algbw = busbw * n / (2 * (n - 1)) if n > 1 else busbw
    us = size / (algbw * 1e3)
    print("# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) "
          "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0")
    print("#")
    print("# Using devices")
    print(f"#  Rank  0 Group  0 Pid  4242 on {hosts[0] if hosts else 'localhost'} device  0 "
          "[0x18] NVIDIA H100 80GB HBM3")
    print("#")
    print("#                                                              out-of-place"
          "                       in-place          ")
    print("#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong     time   algbw   busbw #wrong")
    print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)   "
          "         (us)  (GB/s)  (GB/s)       ")
    print(f"  {size:>11d}   {size // 4:>11d}     float     sum      -1  {us:7.1f}  "
          f"{algbw:6.2f}  {busbw:6.2f}      0  {us:7.1f}  {algbw:6.2f}  {busbw:6.2f}      0")
    print("# Out of bounds values : 0 OK")
    print(f"# Avg bus bandwidth    : {busbw:.3f} ")
    print("#")
    return 0


def main():
    cfg = config()
    if cfg.get("exit_code") and os.path.basename(sys.argv[0]) in ("nvidia-smi", "dcgmi"):
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return int(cfg["exit_code"])
    tool = os.path.basename(sys.argv[0])
    tools = {"dcgmi": dcgmi, "ibstat": ibstat, "fi_info": fi_info, "mpirun": mpirun,
             "all_reduce_perf": all_reduce_perf}
    return tools.get(tool, nvidia_smi)(cfg, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
