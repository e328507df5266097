"""The opt-in NCCL burn-in of a multi-node gang (`resources.health.burn_in: nccl`,
docs/health.md), run by the health gate after every node passed its checks.

From the head node, nccl-tests' `all_reduce_perf` runs across the gang under `mpirun`
(one process per node, `-g` GPUs each; MPI reaches the workers over SSH with the cluster's
internal key, pinned host keys). Its bus bandwidth (the largest message's out-of-place
`busbw`, else the "Avg bus bandwidth" line; GB/s) is compared with the fabric's figure
in the catalog (Gb/s per node): below `BAR_FRACTION` of it, the slow node is found by
pairwise runs around the ring (0-1, 1-2, ..., n-1-0): a node whose every pair is below the
bar is slow. Where nccl-tests or mpirun is not installed, or the catalog has no figure,
the burn-in is skipped or only reported (a warning), never a failure.

`parse_all_reduce(text)` is pure (tests feed it nccl-tests' real output).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.errors import LauncherError

if TYPE_CHECKING:
    from launcher.clouds.base import ClusterInfo
    from launcher.runtime.runner import CommandRunner

BAR_FRACTION = 0.6
RUN_TIMEOUT_S = 600.0
SKIP_MARK = "LAUNCHER_BURN_IN_SKIP:"
# nccl-tests where images usually put it, after PATH and $NCCL_TESTS_DIR
NCCL_TESTS_DIRS = ("/opt/nccl-tests/build", "/usr/local/nccl-tests/build")
_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+\S+\s+\S+\s+-?\d+\s+"
                  r"(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<bw>[\d.]+)")


def parse_all_reduce(text: str) -> tuple[float | None, list[str]]:
    """(bus bandwidth in GB/s, the lines it came from) of `all_reduce_perf` output: the
    largest message's out-of-place busbw, else the average line; None when neither."""
    rows = [(int(m.group("size")), float(m.group("busbw")), line.strip())
            for line in text.splitlines() if (m := _ROW.match(line))]
    if rows:
        size, bw, line = max(rows)
        return bw, [line]
    avg = _AVG.search(text)
    return (float(avg.group("bw")), [avg.group(0).strip()]) if avg else (None, [])


@dataclass(frozen=True)
class BurnIn:
    """The burn-in's outcome. `status` ok | warn | fail; `slow_ranks` the nodes to blame."""

    status: str
    summary: str
    gbps: float | None = None  # measured bus bandwidth, Gb/s
    bar_gbps: float | None = None
    slow_ranks: tuple[int, ...] = ()
    evidence: tuple[str, ...] = ()
    pairs: dict[tuple[int, int], float | None] = field(default_factory=dict)


def _command(cluster: ClusterInfo, ranks: Sequence[int], gpus: int) -> str:
    from launcher.runtime import keys

    nodes = [cluster.nodes[r] for r in ranks]
    hosts = ",".join(f"{n.internal_ip}:1" for n in nodes)
    ports = {n.ssh_port for n in nodes}
    rsh = (f"-i {keys.head_internal_key_path(cluster.cluster_name)} -o UserKnownHostsFile="
           f"{keys.head_known_hosts_path(cluster.cluster_name)} -o StrictHostKeyChecking=yes "
           "-o BatchMode=yes" + (f" -p {ports.pop()}" if len(ports) == 1 else ""))
    dirs = " ".join(shlex.quote(d) for d in NCCL_TESTS_DIRS)
    find = ('ARP=$(command -v all_reduce_perf); for d in "${NCCL_TESTS_DIR:-}" ' + dirs
            + '; do [ -z "$ARP" ] && [ -n "$d" ] && [ -x "$d/all_reduce_perf" ] && '
            'ARP="$d/all_reduce_perf"; done; ')
    skip = (f'[ -n "$ARP" ] || {{ echo "{SKIP_MARK} nccl-tests (all_reduce_perf) not found"; '
            f'exit 0; }}; command -v mpirun >/dev/null || {{ echo "{SKIP_MARK} mpirun not '
            'found"; exit 0; }; ')
    run = (f"mpirun --allow-run-as-root -np {len(nodes)} -H {hosts} --mca plm_rsh_args "
           f"{shlex.quote(rsh)} -x PATH -x LD_LIBRARY_PATH \"$ARP\" -b 1G -e 1G -f 2 "
           f"-g {max(1, gpus)} -w 5 -n 20")
    return find + skip + run


def run_burn_in(cluster: ClusterInfo, head: CommandRunner, gpus: int,
                fabric_gbps: float | None,
                on_event: Callable[[str], None] = lambda _m: None) -> BurnIn:
    """The burn-in of `cluster` (see the module docstring), run through the head's runner.
    Never raises for what the nodes answer; LauncherError only when the head is gone."""
    ranks = list(range(len(cluster.nodes)))
    on_event(f"NCCL burn-in: all_reduce_perf across {len(ranks)} node(s)")
    bw, lines, skipped = _one(cluster, head, ranks, gpus)
    if skipped:
        return BurnIn("warn", f"burn-in skipped: {skipped}", evidence=(skipped,))
    if bw is None:
        return BurnIn("warn", "burn-in: no bus bandwidth in all_reduce_perf's output",
                      evidence=tuple(lines[-10:]))
    gbps = bw * 8
    if not fabric_gbps:
        return BurnIn("warn", f"burn-in: bus bandwidth {gbps:.0f} Gb/s; the catalog has no "
                      "fabric figure to compare it with", gbps, None, (), tuple(lines))
    bar = BAR_FRACTION * fabric_gbps
    if gbps >= bar:
        return BurnIn("ok", f"burn-in: bus bandwidth {gbps:.0f} Gb/s (fabric {fabric_gbps:.0f}"
                      f" Gb/s, bar {bar:.0f})", gbps, bar, (), tuple(lines))
    on_event(f"NCCL burn-in: {gbps:.0f} Gb/s is below {bar:.0f}; pairwise runs to find the "
             "slow node")
    pairs: dict[tuple[int, int], float | None] = {}
    ring = [(r, (r + 1) % len(ranks)) for r in ranks] if len(ranks) > 2 else [(0, 1)]
    evidence = [f"all nodes: {gbps:.0f} Gb/s | {' '.join(lines)}"]
    for a, b in ring:
        pbw, plines, _ = _one(cluster, head, [a, b], gpus)
        pairs[(a, b)] = None if pbw is None else pbw * 8
        evidence.append(f"nodes {a}-{b}: " + ("no result" if pbw is None else
                                               f"{pbw * 8:.0f} Gb/s"))
    slow = tuple(r for r in ranks
                 if all((v or 0.0) < bar for (a, b), v in pairs.items() if r in (a, b)))
    who = ", ".join(f"node {r}" for r in slow) or "no single node (every pair is slow)"
    return BurnIn("fail", f"burn-in: bus bandwidth {gbps:.0f} Gb/s is below {bar:.0f} "
                  f"({BAR_FRACTION:.0%} of the fabric's {fabric_gbps:.0f} Gb/s); slow: {who}",
                  gbps, bar, slow, tuple(evidence), pairs)


def _one(cluster: ClusterInfo, head: CommandRunner, ranks: Sequence[int],
         gpus: int) -> tuple[float | None, list[str], str | None]:
    """(GB/s, evidence lines, why skipped) of one all_reduce_perf run over `ranks`."""
    try:
        res = head.run(_command(cluster, ranks, gpus), timeout=RUN_TIMEOUT_S)
    except LauncherError as exc:
        return None, [str(exc)], None
    out = res.stdout + res.stderr
    for line in out.splitlines():
        if line.startswith(SKIP_MARK):
            return None, [], line[len(SKIP_MARK):].strip()
    bw, lines = parse_all_reduce(out)
    if res.returncode != 0:
        return None, [f"exit {res.returncode}", *out.strip().splitlines()[-5:]], None
    return bw, lines or out.strip().splitlines()[-5:], None
