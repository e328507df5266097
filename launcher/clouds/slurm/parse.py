"""Parsers for the text Slurm's commands print, as typed records. Pure functions.

Every format here exists unchanged from Slurm 20.11 to 24.x (checked against
SchedMD's man pages of each release; tests/slurm_fixtures/ holds recorded output):

    sinfo --version / scontrol --version     "slurm 22.05.8"       -> parse_version
    sinfo -h -o SINFO_FORMAT                 one line per partition -> parse_sinfo
    scontrol show node -o                    one node per line      -> parse_nodes
    scontrol show job -o                     one job per line       -> parse_jobs
    squeue -h -o SQUEUE_FORMAT               one job per line       -> parse_squeue

Deliberately not used: `squeue --only-job-state` (added in 23.02, absent on 20.11)
and `squeue %b` / `sinfo %b` (the GRES a *job* asked for, often `N/A`): free GPUs
come from each node's configured minus allocated TRES (`CfgTRES` / `AllocTRES`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "SINFO_FORMAT",
    "SQUEUE_FORMAT",
    "Gres",
    "JobRecord",
    "NodeRecord",
    "PartitionRow",
    "QueueRow",
    "SlurmParseError",
    "SlurmVersion",
    "parse_gres",
    "parse_jobs",
    "parse_kv_line",
    "parse_nodes",
    "parse_sinfo",
    "parse_squeue",
    "parse_time_limit",
    "parse_tres",
    "parse_version",
]

# %P partition (default marked '*'), %a avail, %l time limit, %s job size in nodes
# ("1-infinite"), %D node count, %N node list. '|' never occurs in these fields.
SINFO_FORMAT = "%P|%a|%l|%s|%D|%N"
# %i job id, %j name, %T state (long form), %r reason, %N nodes, %k comment.
SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%k"


class SlurmParseError(ValueError):
    """Output that does not have the shape the parser expects (names the command)."""


@dataclass(frozen=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


def parse_version(text: str) -> SlurmVersion:
    """`slurm 22.05.8`, `slurm-wlm 23.02.7`, `slurm 24.05.0-0rc1` -> SlurmVersion."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m or "slurm" not in text.lower():
        raise SlurmParseError(f"not a Slurm version line: {text.strip()[:80]!r}")
    return SlurmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


@dataclass(frozen=True)
class Gres:
    """One GRES item: `gpu:a100:4(S:0-1)` -> Gres("gpu", "a100", 4)."""

    name: str
    type: str | None
    count: int


_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses (`gpu:2(IDX:0,2),shard:4`)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def parse_gres(text: str) -> list[Gres]:
    """A node's `Gres=` / `GresUsed=` value: typed (`gpu:a100:4`), untyped (`gpu:4`),
    type without count (`gpu:a100` = 1), with socket or index suffixes (`(S:0-1)`,
    `(IDX:0-1,3)`), several items, or `(null)` / empty (no GRES)."""
    text = text.strip()
    if text in ("", "(null)", "N/A", "none"):
        return []
    items = []
    for raw in _split_top(text):
        body = raw.split("(", 1)[0]
        parts = body.split(":")
        name, rest = parts[0], parts[1:]
        gtype: str | None = None
        count = 1
        if rest:
            m = re.fullmatch(r"(\d+)([KMG]?)", rest[-1])
            if m:
                count = int(m.group(1)) * _SUFFIX[m.group(2)]
                rest = rest[:-1]
            if rest:
                gtype = ":".join(rest)
        if not name:
            raise SlurmParseError(f"bad GRES item {raw!r} in {text!r}")
        items.append(Gres(name, gtype, count))
    return items


def parse_tres(text: str) -> dict[str, str]:
    """`cpu=4,mem=8G,gres/gpu=2,gres/gpu:a100=2` -> {key: value}; `(null)`/empty -> {}."""
    text = text.strip()
    if text in ("", "(null)"):
        return {}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise SlurmParseError(f"bad TRES item {item!r} in {text!r}")
        out[key.strip()] = value.strip()
    return out


def tres_gpus(tres: dict[str, str]) -> int:
    """GPUs in a TRES map: `gres/gpu`, else the sum of the typed `gres/gpu:TYPE`."""
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return sum(int(v) for k, v in tres.items() if k.startswith("gres/gpu:"))


def _mem_mib(value: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", value)
    if not m:
        raise SlurmParseError(f"bad memory value {value!r}")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[m.group(2)]
    return int(float(m.group(1)) * scale)


_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w/:.]*)=")


def parse_kv_line(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` line -> {Key: value}. Values may hold spaces
    (`OS=Linux 5.10.0-28-amd64 #1 SMP ...`, `Reason=Not responding [slurm@...]`)."""
    matches = list(_KEY.finditer(line))
    out = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


@dataclass(frozen=True)
class NodeRecord:
    """One node from `scontrol show node -o`."""

    name: str
    state: str  # "IDLE", "MIXED", "ALLOCATED", "DOWN+NOT_RESPONDING", ...
    cpus: int
    memory_mib: int
    partitions: tuple[str, ...]
    gres: tuple[Gres, ...]
    gpus: int  # configured GPUs (CfgTRES, else the Gres items)
    gpus_allocated: int  # AllocTRES (or GresUsed where AllocTRES lacks gres)
    gpu_type: str | None  # the typed GRES's type, None for untyped `gpu:N`
    address: str = ""

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_allocated)

    @property
    def usable(self) -> bool:
        """Whether new jobs can land here (not DOWN/DRAIN/FAIL/...)."""
        flags = set(re.split(r"[+*]", self.state.upper()))
        return not flags & {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING",
                            "NOT_RESPONDING", "POWERED_DOWN", "INVAL", "FUTURE", "UNKNOWN"}


def _gpu_items(gres: list[Gres]) -> list[Gres]:
    return [g for g in gres if g.name == "gpu"]


def parse_nodes(text: str) -> list[NodeRecord]:
    """`scontrol show node -o` output -> one NodeRecord per `NodeName=` line."""
    nodes = []
    for line in text.splitlines():
        if not line.strip().startswith("NodeName="):
            continue
        kv = parse_kv_line(line.strip())
        try:
            gres = parse_gres(kv.get("Gres", ""))
            gpu_items = _gpu_items(gres)
            cfg = parse_tres(kv.get("CfgTRES", ""))
            alloc = parse_tres(kv.get("AllocTRES", ""))
            gpus = tres_gpus(cfg) if cfg else sum(g.count for g in gpu_items)
            if not gpus:
                gpus = sum(g.count for g in gpu_items)
            allocated = tres_gpus(alloc)
            if not allocated and "GresUsed" in kv:
                allocated = sum(g.count for g in _gpu_items(parse_gres(kv["GresUsed"])))
            types = {g.type for g in gpu_items}
            nodes.append(NodeRecord(
                name=kv["NodeName"],
                state=kv.get("State", "UNKNOWN"),
                cpus=int(kv.get("CPUTot", "0")),
                memory_mib=_mem_mib(kv.get("RealMemory", "0")),
                partitions=tuple(p for p in kv.get("Partitions", "").split(",") if p),
                gres=tuple(gres),
                gpus=gpus,
                gpus_allocated=allocated,
                gpu_type=next(iter(types)) if len(types) == 1 else None,
                address=kv.get("NodeAddr", ""),
            ))  # fmt: skip
        except (KeyError, ValueError) as exc:
            raise SlurmParseError(f"scontrol show node: {exc} in line {line[:120]!r}") from exc
    return nodes


def parse_time_limit(text: str) -> int | None:
    """Slurm time (`infinite`, `UNLIMITED`, `30`, `1:00:00`, `2-00:00:00`, `1-12`)
    -> minutes (None = no limit)."""
    text = text.strip()
    if text.lower() in ("infinite", "unlimited", "n/a", "none", ""):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")]
        hours, minutes, seconds = (parts + [0, 0, 0])[:3]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[:3]
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


@dataclass(frozen=True)
class PartitionRow:
    """One partition from `sinfo -h -o SINFO_FORMAT`."""

    name: str
    default: bool
    up: bool
    max_time_min: int | None  # None = infinite
    max_nodes: int | None  # from the job-size range's upper end; None = infinite
    node_count: int
    nodelist: str


def parse_sinfo(text: str) -> list[PartitionRow]:
    """`sinfo -h -o "%P|%a|%l|%s|%D|%N"` -> one row per partition (rows sinfo splits
    for one partition are merged: counts add up)."""
    rows: dict[str, PartitionRow] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.strip().split("|")
        if len(parts) != 6:
            raise SlurmParseError(f"sinfo: expected 6 '|' fields, got {line!r}")
        name, avail, limit, size, count, nodelist = parts
        default = name.endswith("*")
        name = name.rstrip("*")
        hi = size.split("-")[-1]
        max_nodes = None if hi.lower() in ("infinite", "unlimited") else int(hi)
        row = PartitionRow(name, default, avail.lower() == "up", parse_time_limit(limit),
                           max_nodes, int(count), nodelist)
        prev = rows.get(name)
        if prev is not None:
            row = PartitionRow(name, default or prev.default, row.up or prev.up,
                               row.max_time_min, row.max_nodes, prev.node_count + row.node_count,
                               f"{prev.nodelist},{row.nodelist}")
        rows[name] = row
    return list(rows.values())


@dataclass(frozen=True)
class QueueRow:
    """One job from `squeue -h -o SQUEUE_FORMAT`."""

    job_id: str
    name: str
    state: str
    reason: str
    nodelist: str
    comment: str


def parse_squeue(text: str) -> list[QueueRow]:
    """`squeue -h -o "%i|%j|%T|%r|%N|%k"` -> rows. The comment (last) may hold '|'."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.strip().split("|", 5)
        if len(parts) != 6:
            raise SlurmParseError(f"squeue: expected 6 '|' fields, got {line!r}")
        rows.append(QueueRow(*parts))
    return rows


@dataclass(frozen=True)
class JobRecord:
    """One job from `scontrol show job -o`."""

    job_id: str
    name: str
    state: str  # PENDING, RUNNING, PREEMPTED, NODE_FAIL, TIMEOUT, CANCELLED, COMPLETED, ...
    reason: str
    nodelist: str  # "(null)" while pending
    restarts: int
    comment: str
    time_limit_min: int | None
    num_nodes: int
    extra: dict[str, str] = field(default_factory=dict, compare=False)


def parse_jobs(text: str) -> list[JobRecord]:
    """`scontrol show job -o` -> records (an empty or "No jobs" answer -> [])."""
    jobs = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("JobId="):
            continue
        kv = parse_kv_line(line)
        try:
            nodes = kv.get("NumNodes", "0").split("-")[0]
            jobs.append(JobRecord(
                job_id=kv["JobId"], name=kv.get("JobName", ""),
                state=kv.get("JobState", "UNKNOWN"), reason=kv.get("Reason", "None"),
                nodelist=kv.get("NodeList", "(null)"), restarts=int(kv.get("Restarts", "0")),
                comment=kv.get("Comment", "(null)"),
                time_limit_min=parse_time_limit(kv.get("TimeLimit", "UNLIMITED")),
                num_nodes=int(nodes) if nodes.isdigit() else 0, extra=kv,
            ))  # fmt: skip
        except (KeyError, ValueError) as exc:
            raise SlurmParseError(f"scontrol show job: {exc} in line {line[:120]!r}") from exc
    return jobs
