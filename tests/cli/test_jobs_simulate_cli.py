"""`launcher jobs simulate`: replay hand-made spot traces through the deadline policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]

TASK = """\
name: sim
resources:
  accelerators: V100:1
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ), cwd=REPO, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def files(tmp_path: Path, *traces: dict[str, object]) -> tuple[str, str]:
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    paths = []
    for i, doc in enumerate(traces):
        p = tmp_path / f"zone{i}_v100_1.json"
        p.write_text(json.dumps(doc))
        paths.append(str(p))
    return str(task), ",".join(paths)


def test_json_names_and_values(tmp_path: Path) -> None:
    # 1-hour ticks: spot for 4 h, gone 4 h, back; priced trace
    doc = {"metadata": {"gap_seconds": 3600}, "data": [1] * 4 + [0] * 4 + [1] * 12,
           "prices": [1.0] * 20}
    task, trace = files(tmp_path, doc)
    proc = run("jobs", "simulate", task, "--hours", "6", "--trace", trace, "--deadline", "12",
               "--restart-overhead", "30", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for name in ("cost", "on_demand_cost", "savings", "finish_hours", "deadline_hours", "deadline_met",
                 "preemptions", "spot_hours", "on_demand_hours", "policy", "placement"):
        assert name in out, name
    assert out["policy"] == "launcher" and out["deadline_met"] is True
    assert out["deadline_hours"] == 12 and out["finish_hours"] <= 12
    assert out["preemptions"] == 1 and out["spot_price_source"] == "trace"
    assert out["cost"] < out["on_demand_cost"]
    assert out["savings"] == round(1 - out["cost"] / out["on_demand_cost"], 6)
    assert out["placement"].endswith("x1")


def test_table_and_policies(tmp_path: Path) -> None:
    task, trace = files(tmp_path, {"metadata": {"gap_seconds": 1800}, "data": [0, 1] * 40},
                        {"metadata": {"gap_seconds": 1800}, "data": [1, 0] * 40})
    proc = run("jobs", "simulate", task, "--hours", "10", "--trace", trace, "--deadline", "20")
    assert proc.returncode == 0, proc.stderr
    assert "savings" in proc.stdout and "(met)" in proc.stdout and "on-demand" in proc.stdout
    od = json.loads(run("jobs", "simulate", task, "--hours", "10", "--trace", trace,
                        "--policy", "on_demand", "--json").stdout)
    assert od["spot_hours"] == 0 and od["savings"] == 0 and od["deadline_hours"] is None


def test_errors_name_the_option(tmp_path: Path) -> None:
    task, trace = files(tmp_path, {"metadata": {"gap_seconds": 60}, "data": [1, 1]})
    missing = run("jobs", "simulate", task, "--hours", "1", "--trace", str(tmp_path / "nope.json"))
    assert missing.returncode != 0 and "--trace" in missing.stderr and "not found" in missing.stderr
    bad = tmp_path / "bad_x.json"
    bad.write_text("{oops")
    badp = run("jobs", "simulate", task, "--hours", "1", "--trace", str(bad))
    assert badp.returncode != 0 and "not a JSON file" in badp.stderr and str(bad) in badp.stderr
    short = run("jobs", "simulate", task, "--hours", "10", "--trace", trace, "--deadline", "10")
    assert short.returncode != 0 and "--deadline" in short.stderr and "shorter than the work" in short.stderr
    pol = run("jobs", "simulate", task, "--hours", "1", "--trace", trace, "--policy", "magic")
    assert pol.returncode != 0 and "--policy" in pol.stderr
    num = run("jobs", "simulate", task, "--hours", "ten", "--trace", trace)
    assert num.returncode != 0 and "--hours" in num.stderr


SHIPPED = REPO / "task_examples" / "spot-traces"


def _readme_simulate_command() -> list[str]:
    import shlex

    lines = [ln[2:] for ln in (REPO / "README.md").read_text().splitlines()
             if ln.startswith("$ launcher jobs simulate ")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_the_readme_command_runs_on_the_shipped_trace() -> None:
    argv = _readme_simulate_command()
    assert argv[:2] == ["launcher", "jobs"] and "task_examples/spot-traces/" in " ".join(argv)
    proc = run(*argv[1:])
    assert proc.returncode == 0, proc.stderr
    assert "deadline" in proc.stdout and "(met)" in proc.stdout
    # the trace is labelled with what it records, and priced at that placement
    assert ("trace use2-az1_h100_8.json: aws us-east-2 use2-az1 p5.48xlarge (H100:8), 1 node, "
            "synthetic") in proc.stdout
    assert "prices aws use2-az1 p5.48xlarge x1 (the placement the trace records)" in proc.stdout


def test_a_trace_of_another_machine_says_so(tmp_path: Path) -> None:
    trace = tmp_path / "aws-02-15-2023" / "us-west-2a_v100_1.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": [1, 1, 0] * 20}))
    proc = run("jobs", "simulate", str(REPO / "task_examples" / "spot-ordered.yaml"),
               "--trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "trace us-west-2a_v100_1.json: aws us-west-2a V100:1, from the file name" in proc.stdout
    assert "the traces record no placement of this task" in proc.stdout
    assert "placement aws use2-az1" not in proc.stdout  # the old label that passed it off


def test_shipped_traces_are_what_the_script_writes(tmp_path: Path) -> None:
    """Small, seeded, reproducible: the generator writes the same bytes again."""
    from launcher.spot.traces import load_traces

    shipped = sorted(SHIPPED.glob("*.json"))
    assert [p.name for p in shipped] == ["use2-az1_h100_8.json", "use2-az2_h100_8.json"]
    assert sum(p.stat().st_size for p in shipped) < 100_000
    subprocess.run([sys.executable, str(SHIPPED / "make_traces.py"), str(tmp_path)], check=True,
                   capture_output=True, timeout=60)
    for p in shipped:
        assert (tmp_path / p.name).read_bytes() == p.read_bytes(), p.name
    a, b = load_traces(shipped)
    assert a.n_ticks == b.n_ticks == 7 * 24 * 6 and a.gap_s == 600
    assert 0 < sum(a.availability) < a.n_ticks  # capacity comes and goes
