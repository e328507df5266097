"""Offers of the `local` cloud (this machine), computed at query time.

- Always one CPU-only node: instance type `local`, vcpus = os.cpu_count(), memory from
  /proc/meminfo (None where unavailable).
- For each GPU model `nvidia-smi` lists, N GPUs of it: offers for 1..N GPUs, instance
  type `local-<k>x<GPU>`, accelerator named as the catalog does (e.g. "NVIDIA H100 80GB
  HBM3" -> H100, via `data/local_gpu_names.csv`).
All local offers: region "local", zone None, price 0 and spot price 0 (the local cloud
can simulate spot preemption), no fabric, no node limit.

The GPU probe runs `nvidia-smi` once per process (timeout `PROBE_TIMEOUT_S`) and is
cached. `$LAUNCHER_LOCAL_GPUS` replaces the probe: "" or "none" = no GPUs, or a list
like "H100:8" / "H100:8,T4:1" (catalog names). Tests set it, or call `reset_cache()`.
"""

from __future__ import annotations

import datetime
import os
import re
import threading
from typing import NamedTuple

from launcher.catalog.offer import Offer

LOCAL_GPUS_ENV = "LAUNCHER_LOCAL_GPUS"
PROBE_TIMEOUT_S = 3.0
CPU_INSTANCE_TYPE = "local"


class LocalGpu(NamedTuple):  # a NamedTuple: cheaper to define than a dataclass at import
    name: str  # catalog accelerator name
    memory_gib: float | None


_lock = threading.Lock()
_probed: tuple[LocalGpu, ...] | None = None
_patterns: list[tuple[re.Pattern[str], str]] | None = None


def reset_cache() -> None:
    """Forget the probed GPUs (the next call runs nvidia-smi again)."""
    global _probed
    with _lock:
        _probed = None


def _name_patterns() -> list[tuple[re.Pattern[str], str]]:
    global _patterns
    if _patterns is None:
        path = os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "data", "local_gpu_names.csv"
        )
        pats = []
        with open(path, encoding="utf-8") as f:
            next(f)  # header: pattern,canonical (no commas inside either)
            for line in f:
                line = line.strip()
                if line:
                    pattern, canonical = line.rsplit(",", 1)
                    pats.append((re.compile(pattern, re.IGNORECASE), canonical))
        _patterns = pats
    return _patterns


def canonical_gpu_name(smi_name: str) -> str:
    """nvidia-smi's product name -> the catalog's accelerator name ("Tesla T4" -> "T4")."""
    for pattern, canonical in _name_patterns():
        m = pattern.search(smi_name)
        if m:
            return m.expand(canonical)
    words = [
        w for w in smi_name.split() if w.lower() not in ("nvidia", "tesla", "geforce", "quadro")
    ]
    return "-".join(words) or smi_name.strip()


def _parse_env(spec: str) -> tuple[LocalGpu, ...]:
    gpus: list[LocalGpu] = []
    if spec.strip().lower() in ("", "none"):
        return ()
    for part in spec.split(","):
        name, _, count = part.strip().partition(":")
        n = int(count) if count.strip().isdigit() else 1
        gpus.extend(LocalGpu(name.strip(), None) for _ in range(n))
    return tuple(gpus)


def _run_nvidia_smi() -> tuple[LocalGpu, ...]:
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.splitlines():
        if not line.strip():
            continue
        name, _, mem = line.rpartition(",")
        if not name:  # no memory column
            name, mem = mem, ""
        try:
            mem_gib: float | None = round(float(mem) / 1024, 2)
        except ValueError:
            mem_gib = None
        gpus.append(LocalGpu(canonical_gpu_name(name.strip()), mem_gib))
    return tuple(gpus)


def local_gpus() -> tuple[LocalGpu, ...]:
    """This machine's GPUs, one entry per device in nvidia-smi index order (the local
    cloud maps list positions to CUDA device ids). Cached per process; never raises."""
    global _probed
    spec = os.environ.get(LOCAL_GPUS_ENV)
    if spec is not None:
        return _parse_env(spec)
    with _lock:
        if _probed is None:
            _probed = _run_nvidia_smi()
        return _probed


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1024 * 1024), 2)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 2)
    except (ValueError, OSError, AttributeError):
        return None


def _arch() -> str:
    m = os.uname().machine.lower() if hasattr(os, "uname") else ""
    return "arm64" if m in ("arm64", "aarch64") else "x86_64"


def local_offers() -> list[Offer]:
    """The local cloud's offers: the CPU node, then 1..N GPUs of each local GPU model."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cpus = float(os.cpu_count() or 1)
    mem = _memory_gib()
    arch = _arch()

    def offer(
        instance_type: str, acc: str | None, count: int, acc_mem: float | None, src: str
    ) -> Offer:
        return Offer(
            cloud="local",
            region="local",
            zone=None,
            instance_type=instance_type,
            accelerator=acc,
            accelerator_count=float(count),
            accelerator_memory_gib=acc_mem,
            vcpus=cpus,
            memory_gib=mem,
            price=0.0,
            spot_price=0.0,
            fabric=None,
            fabric_gbps=None,
            nvlink=None,
            max_nodes=None,
            arch=arch,
            source=src,
            fetched_at=now,
        )

    out = [offer(CPU_INSTANCE_TYPE, None, 0, None, "local machine (os.cpu_count, /proc/meminfo)")]
    by_model: dict[str, list[LocalGpu]] = {}
    for g in local_gpus():
        by_model.setdefault(g.name, []).append(g)
    src = (
        "local machine ($LAUNCHER_LOCAL_GPUS)"
        if LOCAL_GPUS_ENV in os.environ
        else "local machine (nvidia-smi)"
    )
    for name, gpus in by_model.items():
        mem_gib = gpus[0].memory_gib
        for k in range(1, len(gpus) + 1):
            out.append(offer(f"local-{k}x{name}", name, k, mem_gib, src))
    return out
