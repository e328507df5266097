"""Node health checks (stdlib only; copied to every node and run there with python3).

    python3 health_checks.py '<expectation JSON>'
    python3 health_checks.py --sample
    python3 health_checks.py --watch      (also `python3 - --watch` with the file on stdin)

The first prints one JSON report on stdout and exits 0 (also when a check fails: the report says
so; a non-zero exit means the checker itself broke). The expectation (all keys optional):

    {"gate": "quick" | "dcgm-1" | "dcgm-2", "gpus": 8, "model": "H100",
     "simulated": false, "nvlink": false, "ib": 0, "efa": 0}

`gpus` is what was paid for per node (None: not checked), `model` the catalog's
accelerator name, `simulated` says the node's GPUs are not real (the local cloud:
a missing nvidia-smi is then no failure), `nvlink` that the machine has NVLink, `ib` how
many InfiniBand devices the fabric needs up, `efa` how many EFA devices. The report:

    {"status": "ok" | "warn" | "fail", "seconds": 0.4,
     "checks": [{"name", "status", "summary", "evidence": [raw lines], "seconds"}]}

Commands are found through PATH (`nvidia-smi`, `dcgmi`, `dmesg`, `journalctl`, `ibstat`,
`fi_info`); the kernel log is the file named by LAUNCHER_HEALTH_KMSG_PATH when set, else
`dmesg`, else `journalctl -k -b`, else /dev/kmsg; InfiniBand devices are read from
LAUNCHER_HEALTH_IB_PATH when set (a sysfs-like tree), else from `ibstat` when installed,
else from /sys/class/infiniband; EFA devices from `fi_info -p efa -t FI_EP_RDM`. Pure
parsers (parse_gpu_csv, parse_xids, parse_nvlink, parse_dcgm_diag, parse_sample_csv,
parse_ibstat, parse_fi_info) are importable for tests.

`--sample` prints what `launcher top` shows, one JSON document:
{"gpus": [{"index", "name", "util", "mem_used", "mem_total", "power", "temp",
"throttle": [reasons]}], "error": null | "why no sample"}.

`--watch` prints what the head agent's watch samples on every node while a job runs
(launcher/runtime/agent_watch.py): the `--sample` document with each GPU's "ecc"
(uncorrected volatile ECC errors, null when not reported) and the kernel log's XIDs:
"xids": the last 20 XID events, "xid_count": how many there are since boot, "kmsg": where
the log was read from (null: no log could be read).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

OK, WARN, FAIL = "ok", "warn", "fail"
_RANK = {OK: 0, WARN: 1, FAIL: 2}
GPU_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "memory.total",
    "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
    "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max",
)  # fmt: skip
SAMPLE_FIELDS = (
    "index", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw",
    "temperature.gpu", "clocks_throttle_reasons.active",
)  # fmt: skip
# clocks_throttle_reasons.active bits that slow the GPU down (nvidia-smi --help-query-gpu);
# 0x1 (idle) and 0x2/0x100 (clocks set by applications / display) are no throttling.
THROTTLE_BITS = {
    0x4: "power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal",
    0x80: "power brake",
}
ECC_FIELD = "ecc.errors.uncorrected.volatile.total"
KMSG_ENV = "LAUNCHER_HEALTH_KMSG_PATH"
IB_ENV = "LAUNCHER_HEALTH_IB_PATH"
DEFAULT_IB_PATH = "/sys/class/infiniband"
COMMAND_TIMEOUT_S = 60.0
DCGM_TIMEOUT_S = {"dcgm-1": 120.0, "dcgm-2": 600.0}

# NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors): what each means and whether
# the node can keep the job. FAIL = the GPU needs a reset or the node is lost; WARN = an
# application fault or a recorded event that does not take the GPU down.
XID_ACTIONS: dict[int, tuple[str, str]] = {
    13: (WARN, "graphics engine exception (application error)"),
    31: (WARN, "GPU memory page fault (application error)"),
    43: (WARN, "GPU stopped processing (application error)"),
    45: (WARN, "preemptive cleanup after a fault"),
    48: (FAIL, "double-bit ECC error (DBE): reset the GPU"),
    61: (FAIL, "internal micro-controller breakpoint/warning"),
    62: (FAIL, "internal micro-controller halt"),
    63: (WARN, "ECC page retirement / row remapping recorded: reset when convenient"),
    64: (FAIL, "ECC page retirement / row remapper recording failure"),
    74: (FAIL, "NVLink error"),
    79: (FAIL, "GPU has fallen off the bus"),
    92: (WARN, "high single-bit ECC error rate"),
    94: (WARN, "contained ECC error: the application was stopped, the GPU is usable"),
    95: (FAIL, "uncontained ECC error: reset the GPU"),
    119: (FAIL, "GSP RPC timeout"),
    120: (FAIL, "GSP error"),
}
_XID_RE = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+),?(?P<rest>.*)")
_NVLINK_RE = re.compile(r"^\s*Link (?P<link>\d+): (?P<state>.+?)\s*$")
_GPU_HEAD_RE = re.compile(r"^GPU (?P<index>\d+):")
_NA = ("[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "")


def _worst(statuses: list[str]) -> str:
    return max(statuses, key=lambda s: _RANK[s], default=OK)


def _check(name: str, status: str, summary: str, evidence: list[str], started: float) -> dict:
    return {"name": name, "status": status, "summary": summary,
            "evidence": evidence[:50], "seconds": round(time.monotonic() - started, 3)}


def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
    """(exit code, stdout+stderr) of a command found through PATH; 127 when absent."""
    exe = shutil.which(argv[0])
    if exe is None:
        return 127, f"{argv[0]}: not found on PATH"
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer within {timeout:g} s"
    except OSError as exc:
        return 126, f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout + proc.stderr


# ------------------------------------------------------------------ parsers


def _num(text: str) -> int | None:
    text = text.strip()
    if text.lower() in _NA:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def parse_gpu_csv(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits`,
    as dicts keyed by field name (values stripped text). Lines with the wrong number of
    fields are skipped."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(GPU_FIELDS):
            continue
        rows.append({f: parts[i] for i, f in enumerate(GPU_FIELDS)})
    return rows


def parse_xids(text: str) -> list[dict]:
    """XID events in kernel-log text: {"xid", "pci", "line", "status", "meaning"}."""
    out = []
    for line in text.splitlines():
        m = _XID_RE.search(line)
        if not m:
            continue
        code = int(m.group("code"))
        status, meaning = XID_ACTIONS.get(code, (WARN, "not in the launcher's XID table"))
        out.append({"xid": code, "pci": m.group("pci"), "line": line.strip(),
                    "status": status, "meaning": meaning})
    return out


def parse_nvlink(text: str) -> dict[int, list[tuple[int, str]]]:
    """`nvidia-smi nvlink -s` -> {gpu index: [(link, state text)]}. A state is a speed
    ("26.562 GB/s") or "<inactive>"."""
    out: dict[int, list[tuple[int, str]]] = {}
    gpu = -1
    for line in text.splitlines():
        head = _GPU_HEAD_RE.match(line)
        if head:
            gpu = int(head.group("index"))
            out[gpu] = []
            continue
        m = _NVLINK_RE.match(line)
        if m and gpu >= 0:
            out[gpu].append((int(m.group("link")), m.group("state")))
    return out


def parse_dcgm_diag(text: str) -> tuple[str, list[str]]:
    """The worst result in `dcgmi diag` table output and the lines that gave it."""
    fails = [ln.strip() for ln in text.splitlines() if re.search(r"\|\s*Fail", ln)]
    warns = [ln.strip() for ln in text.splitlines() if re.search(r"\|\s*Warn", ln)]
    if fails:
        return FAIL, fails
    return (WARN, warns) if warns else (OK, [])


def model_matches(expected: str, name: str) -> bool:
    """Whether the catalog's accelerator name fits nvidia-smi's. Compared: the GPU family
    (the first alphanumeric token: "A100-80GB-SXM" -> A100) and a memory size when the
    name has one (80GB); form-factor words (SXM, NVLINK, MEGA, WS) are not, as nvidia-smi
    spells them differently or not at all. A token matches a token of `name` or several
    adjacent ones run together ("RTX4090" ~ "GeForce RTX 4090"). Case-insensitive."""
    got = [t for t in re.split(r"[^A-Za-z0-9]+", name.upper()) if t]
    joined = {"".join(got[i:j]) for i in range(len(got)) for j in range(i + 1, len(got) + 1)}
    tokens = [t for t in re.split(r"[^A-Za-z0-9]+", expected.upper()) if t]
    if not tokens:
        return False
    want = [tokens[0]] + [t for t in tokens[1:] if re.fullmatch(r"\d+GB", t)]
    return all(t in joined for t in want)


# ------------------------------------------------------------------ checks


def check_gpus(expect: dict) -> tuple[list[dict], list[dict]]:
    """The inventory, ECC and PCIe checks from one nvidia-smi query; also the rows."""
    t0 = time.monotonic()
    gpus = expect.get("gpus")
    rc, out = _run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}",
                    "--format=csv,noheader,nounits"])
    if rc == 127:
        if not gpus:
            return [_check("gpus", OK, "no GPUs expected (no nvidia-smi)", [], t0)], []
        if expect.get("simulated"):
            return [_check("gpus", OK, f"{gpus:g} GPU(s) simulated by the local cloud; no "
                           "nvidia-smi here, GPU checks skipped", [out], t0)], []
        return [_check("gpus", FAIL, f"nvidia-smi not found, but {gpus:g} GPU(s) per node "
                       "were paid for: no NVIDIA driver on this node", [out], t0)], []
    rows = parse_gpu_csv(out) if rc == 0 else []
    lines = out.strip().splitlines()
    if rc != 0 or not rows:
        status = OK if not gpus or expect.get("simulated") else FAIL
        return [_check("gpus", status, f"nvidia-smi failed (exit {rc})", lines, t0)], []
    # ecc and pcie read the same query: their own seconds are the parsing only
    checks = [_inventory(rows, lines, expect, t0), _ecc(rows, time.monotonic()),
              _pcie(rows, time.monotonic())]
    return checks, rows


def _inventory(rows: list[dict], lines: list[str], expect: dict, t0: float) -> dict:
    gpus, model = expect.get("gpus"), expect.get("model")
    names = sorted({r["name"] for r in rows})
    problems = []
    if gpus and not expect.get("simulated") and len(rows) < int(gpus):
        problems.append(f"{len(rows)} GPU(s) visible, {int(gpus)} paid for")
    if model and not expect.get("simulated"):
        wrong = [r["name"] for r in rows if not model_matches(model, r["name"])]
        if wrong:
            problems.append(f"model {wrong[0]!r} is not the {model} paid for")
    if problems:
        return _check("gpus", FAIL, "; ".join(problems), lines, t0)
    status = WARN if gpus and len(rows) > int(gpus) else OK
    return _check("gpus", status, f"{len(rows)} x {', '.join(names)}", lines, t0)


def _ecc(rows: list[dict], t0: float) -> dict:
    bad, pending = [], []
    for r in rows:
        errors = _num(r["ecc.errors.uncorrected.volatile.total"])
        if errors:
            bad.append(f"GPU {r['index']} ({r['pci.bus_id']}): {errors} uncorrected ECC error(s)")
        if r["retired_pages.pending"].strip().lower() == "yes":
            pending.append(f"GPU {r['index']} ({r['pci.bus_id']}): page retirement pending")
    if bad or pending:
        return _check("ecc", FAIL, "; ".join(bad + pending), bad + pending, t0)
    return _check("ecc", OK, "no uncorrected ECC errors, no pending page retirement", [], t0)


def _pcie(rows: list[dict], t0: float) -> dict:
    # A link's generation drops at idle to save power, so only the width is a finding.
    narrow = []
    for r in rows:
        cur, top = _num(r["pcie.link.width.current"]), _num(r["pcie.link.width.max"])
        if cur is not None and top is not None and cur < top:
            narrow.append(f"GPU {r['index']} ({r['pci.bus_id']}): PCIe x{cur} of x{top}, "
                          f"gen {r['pcie.link.gen.current']} of {r['pcie.link.gen.max']}")
    if narrow:
        return _check("pcie", WARN, "; ".join(narrow), narrow, t0)
    return _check("pcie", OK, "every GPU link at its full width", [], t0)


def read_kernel_log() -> tuple[str | None, str]:
    """(text, where it came from); text None when no source could be read."""
    path = os.environ.get(KMSG_ENV)
    if path:
        path = os.path.expanduser(path)  # "~/kern.log": the node's own home
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(), path
        except OSError as exc:
            return None, f"{KMSG_ENV}={path}: {exc.strerror}"
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        rc, out = _run(argv)
        if rc == 0:
            return out, argv[0]
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None, "no readable kernel log (dmesg, journalctl, /dev/kmsg)"
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten while reading; go on
                continue
            if not chunk:
                break
            chunks.append(chunk.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return "".join(chunks), "/dev/kmsg"


def check_xids(expect: dict) -> dict:
    t0 = time.monotonic()
    text, source = read_kernel_log()
    if text is None:
        status = WARN if expect.get("gpus") and not expect.get("simulated") else OK
        return _check("xid", status, f"kernel log not readable: {source}", [], t0)
    events = parse_xids(text)
    if not events:
        return _check("xid", OK, f"no XID errors since boot ({source})", [], t0)
    status = _worst([e["status"] for e in events])
    worst = [e for e in events if e["status"] == status]
    codes = sorted({e["xid"] for e in worst})
    summary = "; ".join(f"Xid {c}: {XID_ACTIONS.get(c, (WARN, 'unknown'))[1]}" for c in codes)
    return _check("xid", status, summary, [e["line"] for e in events], t0)


def check_nvlink() -> dict:
    t0 = time.monotonic()
    rc, out = _run(["nvidia-smi", "nvlink", "-s"])
    lines = out.strip().splitlines()
    if rc != 0:
        return _check("nvlink", FAIL, f"nvidia-smi nvlink -s failed (exit {rc})", lines, t0)
    links = parse_nvlink(out)
    down = [f"GPU {g} link {n}: {s}" for g, ls in links.items() for n, s in ls
            if "inactive" in s.lower() or "down" in s.lower()]
    if not any(links.values()):
        return _check("nvlink", FAIL, "no NVLink links reported on an NVLink machine", lines, t0)
    if down:
        return _check("nvlink", FAIL, f"{len(down)} NVLink link(s) down", down, t0)
    total = sum(len(ls) for ls in links.values())
    return _check("nvlink", OK, f"{total} link(s) up on {len(links)} GPU(s)", [], t0)


def parse_ibstat(text: str) -> list[dict]:
    """`ibstat` (OFED) -> one dict per CA port: {"ca", "port", "state", "physical", "rate",
    "link_layer"} (missing fields "")."""
    ports: list[dict] = []
    ca = ""
    cur: dict | None = None
    for line in text.splitlines():
        m = re.match(r"^CA '(?P<ca>[^']+)'", line)
        if m:
            ca, cur = m.group("ca"), None
            continue
        m = re.match(r"^\s+Port (?P<port>\d+):\s*$", line)
        if m and ca:
            cur = {"ca": ca, "port": int(m.group("port")), "state": "", "physical": "",
                   "rate": "", "link_layer": ""}
            ports.append(cur)
            continue
        m = re.match(r"^\s+(?P<key>State|Physical state|Rate|Link layer):\s*(?P<value>.*?)\s*$",
                     line)
        if m and cur is not None:
            key = {"State": "state", "Physical state": "physical", "Rate": "rate",
                   "Link layer": "link_layer"}[m.group("key")]
            cur[key] = m.group("value")
    return ports


def parse_fi_info(text: str) -> list[str]:
    """`fi_info -p efa` -> the EFA devices (domains without their -rdm/-dgrm suffix)."""
    devices: list[str] = []
    provider = ""
    for line in text.splitlines():
        m = re.match(r"^\s*(?P<key>provider|domain):\s*(?P<value>\S+)", line)
        if not m:
            continue
        if m.group("key") == "provider":
            provider = m.group("value")
        elif provider == "efa":
            dev = re.sub(r"-(rdm|dgrm)$", "", m.group("value"))
            if dev not in devices:
                devices.append(dev)
    return devices


def check_ib(needed: int) -> dict:
    t0 = time.monotonic()
    if not os.environ.get(IB_ENV) and shutil.which("ibstat"):
        return _check_ibstat(needed, t0)
    root = os.environ.get(IB_ENV) or DEFAULT_IB_PATH
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        devices = []
    up, evidence = [], []
    for dev in devices:
        ports = os.path.join(root, dev, "ports")
        try:
            names = sorted(os.listdir(ports))
        except OSError:
            continue
        for port in names:
            try:
                with open(os.path.join(ports, port, "state"), encoding="utf-8") as f:
                    state = f.read().strip()
            except OSError:
                continue
            evidence.append(f"{dev} port {port}: {state}")
            if "ACTIVE" in state.upper():
                up.append(dev)
    count = len(set(up))
    if count < needed:
        return _check("infiniband", FAIL, f"{count} of the {needed} InfiniBand device(s) the "
                      f"fabric needs are up ({root})", evidence, t0)
    return _check("infiniband", OK, f"{count} InfiniBand device(s) up", evidence, t0)


def _check_ibstat(needed: int, t0: float) -> dict:
    rc, out = _run(["ibstat"])
    if rc != 0:
        return _check("infiniband", FAIL, f"ibstat failed (exit {rc})",
                      out.strip().splitlines()[-5:], t0)
    ports = parse_ibstat(out)
    evidence = [f"{p['ca']} port {p['port']}: {p['state']}/{p['physical']}, rate {p['rate']}, "
                f"{p['link_layer']}" for p in ports]
    up = {p["ca"] for p in ports if p["state"].lower() == "active"
          and p["physical"].lower() == "linkup"}
    if len(up) < needed:
        return _check("infiniband", FAIL, f"{len(up)} of the {needed} InfiniBand device(s) the "
                      "fabric needs are up (ibstat)", evidence, t0)
    return _check("infiniband", OK, f"{len(up)} InfiniBand device(s) up (ibstat)", evidence, t0)


def check_efa(needed: int) -> dict:
    t0 = time.monotonic()
    rc, out = _run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    lines = out.strip().splitlines()
    if rc == 127:
        return _check("efa", FAIL, "fi_info not found: no libfabric (the EFA installer) on a "
                      "node whose fabric is EFA", lines, t0)
    devices = parse_fi_info(out) if rc == 0 else []
    if len(devices) < needed:
        return _check("efa", FAIL, f"{len(devices)} of the {needed} EFA device(s) the fabric "
                      f"needs are visible (fi_info exit {rc})", lines[-10:], t0)
    return _check("efa", OK, f"{len(devices)} EFA device(s): {', '.join(devices)}", [], t0)


def check_dcgm(gate: str) -> dict:
    t0 = time.monotonic()
    level = gate.split("-")[1]
    rc, out = _run(["dcgmi", "diag", "-r", level], timeout=DCGM_TIMEOUT_S[gate])
    if rc == 127:
        return _check("dcgm", WARN, f"gate {gate} asked for DCGM diagnostics, but dcgmi is "
                      "not installed: skipped", [out], t0)
    status, lines = parse_dcgm_diag(out)
    if rc != 0 and status == OK:
        status, lines = FAIL, out.strip().splitlines()[-20:]
    summary = {OK: f"dcgmi diag -r {level} passed", WARN: f"dcgmi diag -r {level} warned",
               FAIL: f"dcgmi diag -r {level} failed"}[status]
    return _check("dcgm", status, summary, lines, t0)


def run_checks(expect: dict) -> dict:
    """Every check the expectation asks for; the report described in the module doc."""
    t0 = time.monotonic()
    checks, rows = check_gpus(expect)
    real = bool(rows)
    if real or (expect.get("gpus") and not expect.get("simulated")):
        checks.append(check_xids(expect))
    if expect.get("nvlink") and real:
        checks.append(check_nvlink())
    if expect.get("ib"):
        checks.append(check_ib(int(expect["ib"])))
    if expect.get("efa"):
        checks.append(check_efa(int(expect["efa"])))
    gate = expect.get("gate", "quick")
    if gate in DCGM_TIMEOUT_S and real:
        checks.append(check_dcgm(gate))
    return {"status": _worst([c["status"] for c in checks]), "checks": checks,
            "seconds": round(time.monotonic() - t0, 3)}


def parse_sample_csv(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=<SAMPLE_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(SAMPLE_FIELDS):
            continue
        row = {f: parts[i] for i, f in enumerate(SAMPLE_FIELDS)}
        try:
            mask = int(row["clocks_throttle_reasons.active"], 16)
        except ValueError:
            mask = 0
        gpus.append({
            "index": _num(row["index"]), "name": row["name"],
            "util": _float(row["utilization.gpu"]), "mem_used": _float(row["memory.used"]),
            "mem_total": _float(row["memory.total"]), "power": _float(row["power.draw"]),
            "temp": _float(row["temperature.gpu"]),
            "throttle": [name for bit, name in sorted(THROTTLE_BITS.items()) if mask & bit],
        })
    return gpus


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # [N/A], [Not Supported]
        return None


def sample() -> dict:
    """One utilization sample of every GPU (the `--sample` document)."""
    rc, out = _run(["nvidia-smi", f"--query-gpu={','.join(SAMPLE_FIELDS)}",
                    "--format=csv,noheader,nounits"])
    if rc != 0:
        return {"gpus": [], "error": out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"}
    return {"gpus": parse_sample_csv(out), "error": None}


def watch_sample() -> dict:
    """The `--watch` document: one sample of every GPU with its ECC counter, and the XIDs
    in the kernel log. Never raises: what could not be read is said in "error"/"kmsg"."""
    fields = (*SAMPLE_FIELDS, ECC_FIELD)
    rc, out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                    "--format=csv,noheader,nounits"])
    gpus, error = [], None
    if rc == 0:
        rows = [ln.rsplit(",", 1) for ln in out.splitlines() if ln.count(",") == len(fields) - 1]
        gpus = parse_sample_csv("\n".join(r[0] for r in rows))
        for gpu, row in zip(gpus, rows, strict=False):
            gpu["ecc"] = _num(row[1])
    else:
        error = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
    text, source = read_kernel_log()
    events = parse_xids(text) if text is not None else []
    return {"gpus": gpus, "error": error, "xids": events[-20:], "xid_count": len(events),
            "kmsg": source if text is not None else None}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--sample"]:
        print(json.dumps(sample()))
        return 0
    if argv[:1] == ["--watch"]:
        print(json.dumps(watch_sample()))
        return 0
    try:
        expect = json.loads(argv[0]) if argv else {}
        if not isinstance(expect, dict):
            raise ValueError("the expectation must be a JSON object")
    except ValueError as exc:
        print(json.dumps({"error": f"bad expectation: {exc}"}))
        return 2
    print(json.dumps(run_checks(expect)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
