"""The head agent's health watch while a job runs (docs/health.md). STDLIB ONLY.

Shipped next to agent.py with health_checks.py. The daemon makes one `HealthWatch`
per running job whose spec asks for it (`health.watch_seconds` > 0) and calls `tick()`
at every step; `due()` says when the next call is needed. Nothing here blocks: every
`watch_seconds` one probe per node is started in the background (`python3
health_checks.py --watch`, piped over ssh to remote workers; run locally for "local"
workers) writing its JSON document to a file in the job's directory, and read back
once the probe has exited (the daemon wakes on SIGCHLD). A probe that has not answered
after `PROBE_TIMEOUT_S` is killed: an unreachable node is the controller's business
(a loss), never a finding here.

What `tick()` returns: findings, plain dicts
    {"kind": "xid" | "ecc" | "throttle" | "straggler" | "hang",
     "severity": "fail" | "warn", "rank": node rank | None (hang),
     "summary": "Xid 79 (GPU has fallen off the bus)", "evidence": [raw lines],
     "detected_at": epoch seconds}
- xid: an XID line that was not in the node's kernel log at the watch's first sample;
  severity from NVIDIA's catalog (health_checks.XID_ACTIONS).
- ecc: a GPU's uncorrected volatile ECC count went up since the first sample (fail).
- throttle: a GPU entered hw slowdown, hw/sw thermal or power-brake throttling (warn;
  reported again only after it cleared). A power cap alone is no finding.
- straggler: a rank whose last `LAUNCHER_PROGRESS=<fraction>` is more than
  `straggler_pct` % below the median of the other ranks' (warn); without progress lines,
  a rank whose log has been silent for half the hang window while every other rank wrote.
- hang: no rank wrote output and no GPU was above `BUSY_UTIL_PCT` % utilization for
  `hang_minutes` (fail; nodes without GPUs count as idle).
Each finding is reported once per episode (again only after it cleared).

Per-node metrics are appended to logs/JOB/health.jsonl, one row per node every
`history_seconds` (means/maxima of the samples in the window); when the file holds
`MAX_HISTORY_ROWS` rows, every other window is dropped and the window doubles, so a
job's whole life stays in a bounded file at a coarser grain.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.runtime import agent as core
    from launcher.runtime import agent_ranks as ranks
    from launcher.runtime import agent_spec as spec_mod
else:
    try:
        from . import agent_ranks as ranks
    except ImportError:  # on the node: a sibling of agent.py
        import agent_ranks as ranks

PROBE_TIMEOUT_S = 30.0
BUSY_UTIL_PCT = 1.0
SLOWING_THROTTLE = ("hw slowdown", "hw thermal", "sw thermal", "power brake")
MAX_HISTORY_ROWS = 20000
HISTORY_FILE = "health.jsonl"
FINDING_FILE = "health.json"
LOG_SCAN_BYTES = 65536
_PROGRESS_RE = re.compile(rb"LAUNCHER_PROGRESS=([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


def for_job(paths: core.Paths, job_id: int, spec: spec_mod.JobSpec,
            nodes: spec_mod.NodesConfig, base_env: dict[str, str]) -> HealthWatch | None:
    """The watch of job `job_id` (its ranks' workers), None when its spec asks for none."""
    cfg = spec.health
    if not cfg or cfg["watch_seconds"] <= 0:
        return None
    return HealthWatch(paths.job_dir(job_id), cfg, nodes.workers[:spec.num_nodes],
                       paths.known_hosts, paths.p("health_checks.py"), base_env)


def event_text(f: dict) -> str:
    """'node 1: Xid 79 (GPU has fallen off the bus) | <raw line>' (first 5 raw lines)."""
    who = f"node {f['rank']}: " if f.get("rank") is not None else ""
    return who + f["summary"] + "".join(f" | {e}" for e in f.get("evidence", [])[:5])


def headline(f: dict) -> str:
    """'node 1: Xid 79' - what `status` shows after DEGRADED."""
    who = f"node {f['rank']}: " if f.get("rank") is not None else ""
    return who + f["summary"].split(" (")[0]


def record_finding(job_dir: str, f: dict) -> None:
    """Keep the job's acting finding (logs/JOB/health.json) for the job's record."""
    tmp = os.path.join(job_dir, FINDING_FILE + ".tmp")
    with contextlib.suppress(OSError):
        with open(tmp, "w") as fh:
            json.dump(f, fh)
        os.replace(tmp, os.path.join(job_dir, FINDING_FILE))


def read_finding(job_dir: str) -> dict | None:
    try:
        with open(os.path.join(job_dir, FINDING_FILE)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_history(job_dir: str, limit: int = MAX_HISTORY_ROWS) -> list[dict]:
    rows: list[dict] = []
    with contextlib.suppress(OSError), open(os.path.join(job_dir, HISTORY_FILE)) as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows[-limit:]


class _Node:
    """One node's probe and what the watch remembers of it."""

    __slots__ = ("worker", "proc", "out", "started", "xid_lines", "ecc", "throttled",
                 "window", "last")

    def __init__(self, worker: spec_mod.WorkerAccess, out: str) -> None:
        self.worker = worker
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = out
        self.started = 0.0
        self.xid_lines: set[str] | None = None  # None until the first answer (the baseline)
        self.ecc: dict[int, int] = {}
        self.throttled: dict[int, tuple[str, ...]] = {}
        self.window: list[dict] = []  # samples since the last history row
        self.last: dict | None = None


class _Rank:
    __slots__ = ("log", "size", "wrote_at", "progress")

    def __init__(self, log: str, now: float) -> None:
        self.log = log
        self.size = 0
        self.wrote_at = now
        self.progress: float | None = None


class HealthWatch:
    """See the module docstring. `workers` are the job's ranks' workers (rank order)."""

    def __init__(self, job_dir: str, cfg: dict, workers: list[spec_mod.WorkerAccess],
                 known_hosts: str, script: str, base_env: dict[str, str],
                 now: Callable[[], float] = time.monotonic) -> None:
        self.job_dir = job_dir
        self.cfg = cfg
        self.interval = max(0.1, cfg["watch_seconds"])
        self.hang_s = cfg["hang_minutes"] * 60.0
        self.history_s = max(self.interval, cfg["history_seconds"] or 60.0)
        self.known_hosts = known_hosts
        self.script = script
        self.base_env = base_env
        self.now = now
        t = now()
        self.started = t
        self.next_probe = t
        self.next_row = t + self.history_s
        self.busy_at = t  # last time any GPU was busy
        self.nodes = [_Node(w, os.path.join(job_dir, f".watch-rank-{w.rank}.json"))
                      for w in workers]
        self.ranks = [_Rank(os.path.join(job_dir, f"rank-{w.rank}.log"), t) for w in workers]
        self.active: set[tuple[str, int | None]] = set()  # open episodes (kind, rank)
        self.rows, self.window_no = self._count_rows()

    @property
    def stops(self) -> bool:
        return bool(self.cfg.get("stop"))

    def due(self) -> float:
        """Monotonic time of the next `tick` this watch needs."""
        t = min(self.next_probe, self.next_row)
        for n in self.nodes:
            if n.proc is not None:
                t = min(t, n.started + PROBE_TIMEOUT_S)
        return t

    def tick(self) -> list[dict]:
        """Collect finished probes, start new ones when due, judge progress and hangs."""
        now = self.now()
        found: list[dict] = []
        for node in self.nodes:
            if node.proc is None:
                continue
            if node.proc.poll() is None:
                if now - node.started < PROBE_TIMEOUT_S:
                    continue
                _kill(node.proc)
                node.proc = None
                continue
            node.proc = None
            found += self._judge_node(node, _read_doc(node.out), now)
        if now >= self.next_probe:
            self.next_probe = now + self.interval
            for node in self.nodes:
                if node.proc is None:
                    self._start_probe(node, now)
        found += self._judge_ranks(now)
        if now >= self.next_row:
            self._write_rows()
            self.next_row = now + self.history_s
        return found

    def close(self) -> None:
        """Stop every probe and write the last history rows."""
        for node in self.nodes:
            if node.proc is not None:
                _kill(node.proc)
                node.proc = None
            with contextlib.suppress(OSError):
                os.unlink(node.out)
        self._write_rows()

    # ----------------------------------------------------------------- probes

    def _start_probe(self, node: _Node, now: float) -> None:
        w = node.worker
        try:
            out = open(node.out, "wb")  # noqa: SIM115 - handed to the child, closed below
        except OSError:
            return
        try:
            stdin = None
            if w.kind == "local":
                home = os.path.expanduser(w.home or "~")
                argv = [sys.executable, "-S", self.script, "--watch"]
                env, cwd = dict(self.base_env, HOME=home), home
            else:
                argv = ranks.ssh_argv(w, self.known_hosts, "python3 - --watch",
                                      connect_timeout=10)
                env, cwd = self.base_env, os.path.dirname(self.script)
                stdin = open(self.script, "rb")  # noqa: SIM115 - the script, piped to the node
            try:
                node.proc = subprocess.Popen(
                    argv, stdin=stdin if stdin is not None else subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True,
                    close_fds=True)
                node.started = now
            finally:
                if stdin is not None:
                    stdin.close()
        except OSError:
            node.proc = None
        finally:
            out.close()

    def _judge_node(self, node: _Node, doc: dict | None, now: float) -> list[dict]:
        if doc is None:
            return []
        rank = node.worker.rank
        wall = time.time()
        found: list[dict] = []
        gpus = [g for g in doc.get("gpus") or [] if isinstance(g, dict)]
        node.last = doc
        node.window.append({"t": wall, "gpus": gpus})
        if any((g.get("util") or 0) > BUSY_UTIL_PCT for g in gpus):
            self.busy_at = now
        xids = [x for x in doc.get("xids") or [] if isinstance(x, dict)]
        lines = {str(x.get("line")) for x in xids}
        if node.xid_lines is None:
            node.xid_lines = lines
        else:
            new = [x for x in xids if str(x.get("line")) not in node.xid_lines]
            node.xid_lines |= lines
            for x in new:
                found.append(_finding(
                    "xid", x.get("status") or "warn", rank,
                    f"Xid {x.get('xid')} ({x.get('meaning')})", [str(x.get("line"))], wall))
        for g in gpus:
            idx = int(g.get("index") or 0)
            ecc = g.get("ecc")
            if isinstance(ecc, int):
                before = node.ecc.setdefault(idx, ecc)
                if ecc > before:
                    node.ecc[idx] = ecc
                    found.append(_finding(
                        "ecc", "fail", rank, f"uncorrected ECC errors on GPU {idx} ({before} -> "
                        f"{ecc})", [f"GPU {idx}: ecc.errors.uncorrected.volatile.total {before} "
                                    f"-> {ecc}"], wall))
            slow = tuple(t for t in g.get("throttle") or [] if t in SLOWING_THROTTLE)
            was = node.throttled.get(idx, ())
            node.throttled[idx] = slow
            if slow and slow != was:
                found.append(_finding(
                    "throttle", "warn", rank, f"GPU {idx} throttled: {', '.join(slow)}",
                    [f"GPU {idx}: clocks_throttle_reasons.active: {', '.join(slow)}; util "
                     f"{g.get('util')}%, power {g.get('power')} W, temp {g.get('temp')} C"], wall))
        return found

    # ----------------------------------------------------------------- ranks

    def _judge_ranks(self, now: float) -> list[dict]:
        for r in self.ranks:
            try:
                size = os.path.getsize(r.log)
            except OSError:
                continue
            if size > r.size:
                r.progress = _last_progress(r.log, max(r.size, size - LOG_SCAN_BYTES),
                                            r.progress)
                r.size, r.wrote_at = size, now
        found: list[dict] = []
        wall = time.time()
        stragglers = self._stragglers(now)
        for i in range(len(self.ranks)):
            key = ("straggler", i)
            if i in stragglers and key not in self.active:
                self.active.add(key)
                found.append(_finding("straggler", "warn", i, stragglers[i][0],
                                      stragglers[i][1], wall))
            elif i not in stragglers:
                self.active.discard(key)
        if self.hang_s > 0:
            quiet_since = max([self.busy_at, *(r.wrote_at for r in self.ranks)])
            if now - quiet_since >= self.hang_s:
                if ("hang", None) not in self.active:
                    self.active.add(("hang", None))
                    utils = [f"node {n.worker.rank}: util " + (", ".join(
                        f"{g.get('util')}%" for g in (n.last or {}).get("gpus") or []) or "n/a")
                        for n in self.nodes]
                    found.append(_finding(
                        "hang", "fail", None, f"hang: no output from any rank and no busy GPU "
                        f"for {now - quiet_since:.0f} s", utils, wall))
            else:
                self.active.discard(("hang", None))
        return found

    def _stragglers(self, now: float) -> dict[int, tuple[str, list[str]]]:
        out: dict[int, tuple[str, list[str]]] = {}
        if len(self.ranks) < 2:
            return out
        pct = self.cfg["straggler_pct"]
        reported = {i: r.progress for i, r in enumerate(self.ranks) if r.progress is not None}
        if len(reported) >= 2:
            for i, p in reported.items():
                others = sorted(v for j, v in reported.items() if j != i)
                median = others[len(others) // 2] if len(others) % 2 else (
                    others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
                if median > 0 and p < median * (1 - pct / 100):
                    behind = 100 * (1 - p / median)
                    out[i] = (f"straggler: progress {p:g} is {behind:.0f}% behind the other "
                              f"ranks' {median:g}",
                              [f"rank {j}: LAUNCHER_PROGRESS={v:g}"
                               for j, v in sorted(reported.items())])
            return out
        silent = self.hang_s / 2 if self.hang_s > 0 else 300.0
        for i, r in enumerate(self.ranks):
            rest = [o for j, o in enumerate(self.ranks) if j != i]
            if now - r.wrote_at >= silent and all(now - o.wrote_at < silent for o in rest):
                out[i] = (f"straggler: no output for {now - r.wrote_at:.0f} s while the other "
                          "ranks write", [f"rank {j}: last output {now - o.wrote_at:.0f} s ago"
                                          for j, o in enumerate(self.ranks)])
        return out

    # ----------------------------------------------------------------- history

    def _count_rows(self) -> tuple[int, int]:
        """(rows in the history file, the next window number): a restarted daemon goes on."""
        rows = read_history(self.job_dir)
        return len(rows), max((int(r.get("w") or 0) for r in rows), default=-1) + 1

    def _write_rows(self) -> None:
        rows = []
        wall = time.time()
        self.window_no += 1
        for node, rank in zip(self.nodes, self.ranks, strict=False):
            samples = node.window
            node.window = []
            gpus = [g for s in samples for g in s["gpus"]]
            utils = [g["util"] for g in gpus if isinstance(g.get("util"), int | float)]
            power = [g["power"] for g in gpus if isinstance(g.get("power"), int | float)]
            rows.append({
                "t": round(wall, 1), "w": self.window_no - 1, "rank": node.worker.rank, "samples": len(samples),
                "gpus": max((len(s["gpus"]) for s in samples), default=0),
                "util": round(sum(utils) / len(utils), 1) if utils else None,
                "util_min": min(utils) if utils else None,
                "mem_used": max((g.get("mem_used") or 0 for g in gpus), default=None),
                "power": round(sum(power) / len(power), 1) if power else None,
                "temp": max((g.get("temp") or 0 for g in gpus), default=None),
                "throttle": sorted({t for g in gpus for t in g.get("throttle") or []}),
                "ecc": sum(node.ecc.values()) if node.ecc else None,
                "progress": rank.progress, "log_bytes": rank.size,
            })
        path = os.path.join(self.job_dir, HISTORY_FILE)
        with contextlib.suppress(OSError):
            with open(path, "a") as fh:
                fh.write("".join(json.dumps(r) + "\n" for r in rows))
            self.rows += len(rows)
            if self.rows > MAX_HISTORY_ROWS:
                self._thin(path)

    def _thin(self, path: str) -> None:
        """Drop every other window (rows of one window share "w"); double the window."""
        rows = read_history(self.job_dir, limit=10 * MAX_HISTORY_ROWS)
        windows = sorted({r.get("w") for r in rows}, key=lambda w: int(w or 0))
        keep = set(windows[::2])
        kept = [r for r in rows if r.get("w") in keep]
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)
        self.rows = len(kept)
        self.history_s *= 2


def _finding(kind: str, severity: str, rank: int | None, summary: str, evidence: list[str],
             at: float) -> dict:
    return {"kind": kind, "severity": severity, "rank": rank, "summary": summary,
            "evidence": evidence[:20], "detected_at": at}


def _read_doc(path: str) -> dict | None:
    try:
        with open(path, "rb") as fh:
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        doc = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _last_progress(path: str, start: int, default: float | None) -> float | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(LOG_SCAN_BYTES * 2)
    except OSError:
        return default
    found = _PROGRESS_RE.findall(data)
    return float(found[-1]) if found else default


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=1.0)

