"""The human output of `launcher cost` and `launch --dryrun` (launcher/cli/plan_render.py),
run in-process over the bundled catalog: one true `chosen:` line, launchable placements
first (the rest marked with a reason), counts that agree with `--json`, and tables that
fit 80 and 200 columns."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import launcher.provisioning.planning as core_planning
from launcher.cli import main
from launcher.clouds.base import CredentialStatus

REPO = Path(__file__).resolve().parents[2]
HELLO = str(REPO / "task_examples" / "hello.yaml")
TWO_H100 = "num_nodes: 2\nresources:\n  accelerators: H100:8\nrun: echo hi\n"
SPOT_V100 = "resources:\n  accelerators: V100:1\n  use_spot: true\nrun: echo hi\n"
ON_DEMAND_V100 = "resources:\n  accelerators: V100:1\nrun: echo hi\n"

Run = Callable[..., str]


def enable(monkeypatch: pytest.MonkeyPatch, *clouds: str) -> None:
    """Pretend these clouds (and local) pass their credential check."""
    on = {"local", *clouds}
    def status(c: str) -> CredentialStatus:
        return CredentialStatus(c in on, "ok" if c in on else "no creds")

    # dry runs and cost queries ask the presence probe, launches the full check
    monkeypatch.setattr(core_planning, "_credential_status", status)
    monkeypatch.setattr(core_planning, "_credential_presence", status)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """Run the CLI in this process at a terminal width; returns stdout (exit 0 asserted)."""

    def go(*args: str, width: int = 200) -> str:
        monkeypatch.setenv("COLUMNS", str(width))
        monkeypatch.setenv("NO_COLOR", "1")
        with pytest.raises(SystemExit) as exit_info:
            main(list(args))
        out, err = capsys.readouterr()
        assert exit_info.value.code in (0, None), err
        return out

    return go


def task_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"task-{len(list(tmp_path.glob('task-*.yaml')))}.yaml"
    path.write_text(text)
    return str(path)


def both_commands(task: str) -> list[tuple[str, ...]]:
    return [("cost", task), ("launch", task, "--dryrun")]


def chosen_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("chosen:")]


# ---------------------------------------------------------------- the chosen line


@pytest.mark.parametrize("command", [0, 1], ids=["cost", "dryrun"])
def test_on_demand_chosen_has_one_chosen_line(run: Run, command: int) -> None:
    out = run(*both_commands(HELLO)[command])
    assert chosen_lines(out) == ["chosen: local/local, 1 x local on-demand, $0.00/h"]
    assert "none" not in out


@pytest.mark.parametrize("command", [0, 1], ids=["cost", "dryrun"])
def test_spot_chosen_has_one_chosen_line(run: Run, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, command: int) -> None:
    enable(monkeypatch, "aws")
    out = run(*both_commands(task_file(tmp_path, SPOT_V100))[command])
    lines = chosen_lines(out)
    assert len(lines) == 1, out
    assert lines[0].startswith("chosen: aws/") and " spot, $" in lines[0]
    assert "expected $" in lines[0]


@pytest.mark.parametrize("text", [SPOT_V100, ON_DEMAND_V100], ids=["spot", "on-demand"])
@pytest.mark.parametrize("command", [0, 1], ids=["cost", "dryrun"])
def test_nothing_chosen_says_so_once(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     text: str, command: int) -> None:
    enable(monkeypatch)  # only local, which a V100 task cannot use
    out = run(*both_commands(task_file(tmp_path, text))[command])
    lines = chosen_lines(out)
    assert len(lines) == 1 and lines[0].startswith("chosen: none (no placement is launchable")
    assert "->" not in out
    assert core_planning.NOTHING_LAUNCHABLE not in out  # said once, by the chosen line
    assert not any(len(line) > 200 for line in out.splitlines())


# ---------------------------------------------------------------- launchable first


def table_lines(out: str) -> list[str]:
    lines = out.splitlines()
    end = next(i for i, line in enumerate(lines) if not line.strip() or line.startswith(
        ("...", "chosen:", "(not shown")))
    return lines[1:end]


def test_launchable_placements_come_first_and_the_rest_say_why(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch, "aws")
    task = task_file(tmp_path, TWO_H100)
    out = run("launch", task, "--dryrun")
    rows = table_lines(out)
    assert rows[0].startswith("->") and " aws " in rows[0] and "p5.48xlarge" in rows[0]
    assert rows[0].rstrip().endswith("yes")
    reasons = [row.rstrip().rsplit("  ", 1)[-1].strip() for row in rows]
    first_other = next(i for i, r in enumerate(reasons) if r != "yes")
    assert all(r == "yes" for r in reasons[:first_other])
    assert all(r != "yes" for r in reasons[first_other:])
    assert len(rows) - first_other >= 3, "some non-launchable rows are still shown"
    assert "planned only (GPUDirect)" in out  # GCP a3 gangs
    assert "cloud not enabled" in out  # nebius, lambda...
    data = json.loads(run("launch", task, "--dryrun", "--json", "--all"))
    flags = [p["launchable"] for p in data["placements"]]
    assert flags[0] and flags == sorted(flags, reverse=True) and data["chosen"] == 0
    assert all(p["reason"] is None for p in data["placements"] if p["launchable"])
    gcp = [p for p in data["placements"] if p["cloud"] == "gcp"]
    assert gcp and {p["reason"] for p in gcp} == {"planned only (GPUDirect)"}
    assert "aws" not in data["disabled_clouds"] and "nebius" in data["disabled_clouds"]


def test_nothing_launchable_shows_the_best_rows_marked(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    enable(monkeypatch)
    out = run("launch", task_file(tmp_path, TWO_H100), "--dryrun")
    rows = table_lines(out)
    assert len(rows) == 10 and all(not row.rstrip().endswith("yes") for row in rows)
    assert not any("No placement is on an enabled cloud" in line for line in out.splitlines())


# ---------------------------------------------------------------- counts and the hint

MORE = re.compile(r"^\.\.\. and (\d+) more placements? \(`(--json(?: --all)?)` lists all (\d+)\)$")


def covered_rows(out: str) -> int:
    """How many JSON rows the table's lines stand for ("(+2 regions)": 3)."""
    total = 0
    for row in table_lines(out):
        m = re.search(r"\(\+(\d+) regions?\)", row)
        total += 1 + int(m.group(1)) if m else 1
    return total


@pytest.mark.parametrize("text,enabled", [(TWO_H100, ()), (TWO_H100, ("aws",)),
                                          (ON_DEMAND_V100, ("aws",))])
def test_more_line_agrees_with_json(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    text: str, enabled: tuple[str, ...]) -> None:
    enable(monkeypatch, *enabled)
    task = task_file(tmp_path, text)
    out = run("cost", task)
    data = json.loads(run("cost", task, "--json"))
    every = json.loads(run("cost", task, "--json", "--all"))
    total = data["placements_total"]
    assert len(every["placements"]) == total == every["placements_total"]
    assert len(data["placements"]) == min(total, 100)
    assert data["truncated"] is (total > 100) and every["truncated"] is False
    m = next(MORE.match(line) for line in out.splitlines() if MORE.match(line))
    assert m is not None
    more, option, listed = int(m.group(1)), m.group(2), int(m.group(3))
    assert listed == total and more + covered_rows(out) == total
    assert option == ("--json --all" if total > 100 else "--json")


# ---------------------------------------------------------------- terminal width


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("case", ["rdma-dryrun", "spot-hours", "nothing-enabled", "local"])
def test_output_fits_the_terminal(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  width: int, case: str) -> None:
    enable(monkeypatch, *(() if case == "nothing-enabled" else ("aws",)))
    args = {
        "rdma-dryrun": lambda: ("launch", str(REPO / "task_examples" / "train-2node-rdma.yaml"),
                                "--dryrun"),
        "spot-hours": lambda: ("cost", task_file(tmp_path, SPOT_V100), "--hours", "10"),
        "nothing-enabled": lambda: ("cost", task_file(tmp_path, TWO_H100)),
        "local": lambda: ("cost", HELLO),
    }[case]()
    out = run(*args, width=width)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width, "\n".join(
        line for line in lines if len(line) > width)
    header = lines[0].split()
    for key in ("CLOUD", "REGION/ZONE", "INSTANCE", "LAUNCHABLE"):
        assert key in header
    assert ("TOTAL" in header) if case == "spot-hours" else ("$/H" in header)
    if case == "spot-hours":
        assert "EXPECTED" in header, out
    assert any(line.startswith("chosen:") for line in lines)
    assert any(line.startswith("rejected:") for line in lines)
    if width == 200:
        assert "(not shown" not in out  # every column fits
        for key in ("GPUS", "NODES", "MARKET", "FABRIC", "$/NODE-H"):
            assert key in header
    elif case != "local":
        hidden = next(i for i, line in enumerate(lines) if line.startswith("(not shown"))
        said = " ".join(line.strip() for line in lines[hidden:hidden + 2])
        assert "NODES" in said and "NODES" not in header  # dropped first, and said so
