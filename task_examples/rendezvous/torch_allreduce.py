"""The same all-reduce with torch.distributed (gloo, CPU), when torch is installed."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from allreduce import base_port


def main() -> None:
    rank = int(os.environ["LAUNCHER_NODE_RANK"])
    ips = os.environ["LAUNCHER_NODE_IPS"].split("\n")
    world = len(ips)
    # rank 0 hosts the store; offset from the TCP ring's ports
    os.environ.setdefault("MASTER_ADDR", ips[0])
    os.environ.setdefault("MASTER_PORT", str(base_port() + 1000))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.full((8,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    ok = bool(torch.all(t == expected))
    print(f"rank {rank}/{world}: torch gloo all-reduce {'OK' if ok else 'WRONG'} "
          f"(sum {t[0].item():g})", flush=True)
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
