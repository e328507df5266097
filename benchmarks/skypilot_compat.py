"""SkyPilot task-YAML compatibility: how many SkyPilot task files dry-run here.

    python benchmarks/skypilot_compat.py DIR [--launcher PATH] [--jobs N] [--timeout S] [--verbose]

Runs `launcher launch FILE --dryrun --json` (or `launcher jobs launch FILE --dryrun
--json` for a multi-document pipeline) on every `*.yaml` under DIR (recursively) and
prints accepted / refused counts, the refusal causes grouped by the first line of the
error (file names and line numbers taken out, so like causes group), and every file
whose run printed a Python traceback. Exit status: 0, or 1 if any traceback.

Only files SkyPilot itself would treat as tasks are counted. Set aside (and listed as
such): Kubernetes manifests (`apiVersion` + `kind`), SkyPilot config files (only
config sections such as `aws:`, `kubernetes:`, `jobs:` at the top), volume specs
(`sky volumes apply`: `type` + `size`/`infra`, no `run`), Jinja templates
(`{{ ... }}`, filled in by SkyPilot's tests before use) and files that are not valid
YAML (SkyPilot cannot load them either).

"Accepted" means exit 0 with at least one ranked placement in the JSON (for a
pipeline: every stage has one). Nothing here touches the network; the dry run ranks
over the bundled catalog. `--timeout` (default 120 s) bounds one dry run; raise it on a
loaded machine (a run that times out counts as refused, with that cause).

SkyPilot's files are not in this repository: fetch its `examples/`, `llm/` and
`tests/test_yamls/` and pass their directory. The last figures are in
docs/task-format.md ("Measured on SkyPilot's own task files").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

# Top-level keys of a SkyPilot task document.
TASK_KEYS = frozenset({
    "name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts", "setup",
    "run", "service", "config", "volumes", "pool", "inputs", "outputs", "event_callback",
    "file_mounts_mapping", "api_server_access", "experimental",
})
# Top-level sections of SkyPilot's config file (~/.sky/config.yaml).
CONFIG_KEYS = frozenset({
    "aws", "gcp", "azure", "kubernetes", "oci", "nebius", "lambda", "runpod", "ssh", "slurm",
    "jobs", "serve", "docker", "nvidia_gpus", "allowed_clouds", "admin_policy", "api_server",
    "workspaces", "active_workspace", "provision", "rbac", "db", "logs", "daemons", "usage",
    "cudo", "vast", "fluidstack", "ibm", "scp", "paperspace", "do", "coreweave", "seeweb",
    "primeintellect", "hyperbolic", "shadeform", "vsphere", "users", "volumes_config",
})
_PATH_RE = re.compile(r"\(?[^\s(]*\.ya?ml(?::\d+)?,?\s*")
_LINE_RE = re.compile(r"\bline \d+\b")


@dataclass
class Result:
    path: str
    kind: str  # "task", "pipeline" or a reason the file is not a task
    accepted: bool = False
    cause: str = ""
    traceback: bool = False


def classify(text: str) -> tuple[str, int]:
    """("task" | "pipeline" | why it is not a task, number of documents)."""
    if "{{" in text and "}}" in text:
        return "not a task: Jinja template", 0
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        return "not a task: not valid YAML (SkyPilot cannot load it either)", 0
    if not docs or not all(isinstance(d, dict) for d in docs):
        return "not a task: not a mapping", len(docs)
    keys = set().union(*(set(d) for d in docs))
    if any("apiVersion" in d and "kind" in d for d in docs):
        return "not a task: Kubernetes manifest", len(docs)
    if "type" in keys and ({"size", "infra"} & keys) and not ({"run", "setup"} & keys):
        return "not a task: volume spec", len(docs)
    if not (keys & TASK_KEYS) or keys <= CONFIG_KEYS:
        return "not a task: SkyPilot config file", len(docs)
    return ("pipeline" if len(docs) > 1 else "task"), len(docs)


def run_one(path: Path, launcher: list[str], env: dict[str, str], timeout: float = 120.0) -> Result:
    text = path.read_text(encoding="utf-8", errors="replace")
    kind, _ = classify(text)
    result = Result(str(path), kind)
    if kind not in ("task", "pipeline"):
        return result
    verb = ["jobs", "launch"] if kind == "pipeline" else ["launch"]
    try:
        proc = subprocess.run(
            [*launcher, *verb, path.name, "--dryrun", "--json"],
            capture_output=True, text=True, env=env, cwd=path.parent, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        result.cause = f"no answer within {timeout:g} s (raise --timeout on a loaded machine)"
        return result
    result.traceback = "Traceback (most recent call last)" in proc.stderr
    if proc.returncode == 0:
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            result.cause = "exit 0 but the output is not JSON"
            return result
        stages = data.get("stages") if isinstance(data, dict) else None
        plans = [s.get("plan", s) for s in stages] if stages else [data]
        result.accepted = all(isinstance(p, dict) and p.get("placements") for p in plans)
        if not result.accepted:
            result.cause = "exit 0 but no placement"
        return result
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    first = next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "")
    result.cause = first or f"exit {proc.returncode} with no message"
    return result


def normalize(cause: str) -> str:
    """The cause without file names and line numbers, so like causes group."""
    text = _PATH_RE.sub("", cause)
    text = _LINE_RE.sub("line N", text)
    return text.strip()[:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--launcher", default=None, help="the launcher command (default: on PATH)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one dry run may take before it counts as refused")
    parser.add_argument("--verbose", "-v", action="store_true", help="list every refused file")
    args = parser.parse_args(argv)
    launcher = [args.launcher] if args.launcher else (
        [shutil.which("launcher")] if shutil.which("launcher")
        else [sys.executable, "-c", "from launcher.cli import main; main()"])
    files = sorted(p for p in args.dir.rglob("*.yaml") if p.is_file())
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "LAUNCHER_HOME": home}
        # one warm-up so the per-user catalog cache is built once, not in parallel
        subprocess.run([*launcher, "gpus", "H100"], capture_output=True, env=env)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda p: run_one(p, launcher, env, args.timeout), files))
    tasks = [r for r in results if r.kind in ("task", "pipeline")]
    skipped = Counter(r.kind for r in results if r.kind not in ("task", "pipeline"))
    accepted = [r for r in tasks if r.accepted]
    refused = [r for r in tasks if not r.accepted]
    tracebacks = [r for r in results if r.traceback]
    print(f"{len(files)} YAML files; {len(tasks)} task files "
          f"({sum(r.kind == 'pipeline' for r in tasks)} pipelines); set aside:")
    for why, n in skipped.most_common():
        print(f"  {n:4d}  {why}")
    share = 100.0 * len(accepted) / len(tasks) if tasks else 0.0
    print(f"accepted {len(accepted)} / {len(tasks)} ({share:.1f}%), refused {len(refused)}, "
          f"tracebacks {len(tracebacks)}")
    causes = Counter(normalize(r.cause) for r in refused)
    if causes:
        print("refusal causes (files):")
        for cause, n in causes.most_common():
            print(f"  {n:4d}  {cause}")
    if args.verbose:
        for r in refused:
            print(f"  refused {r.path}: {r.cause}")
    for r in tracebacks:
        print(f"TRACEBACK in {r.path}")
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
