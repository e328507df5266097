"""Shell completion: typer's --install-completion/--show-completion on the root group,
and cluster names / managed job ids completed from the state DB of LAUNCHER_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import completion

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]
REPORT = """
import atexit, sys
def report():
    mods = sorted(m for m in sys.modules
                  if m.split(".")[0] in ("rich", "paramiko", "yaml", "pydantic", "boto3")
                  or m in ("launcher.state.db", "launcher.api"))
    sys.stderr.write("MODULES " + " ".join(mods) + "\\n")
atexit.register(report)
from launcher.cli import main
main()
"""


def run(*args: str, home: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "LAUNCHER_HOME": str(home), **(env or {})})


def complete(line: str, home: Path) -> tuple[list[str], str]:
    """What bash completion offers for `line` (the script's protocol: COMP_WORDS,
    COMP_CWORD, _LAUNCHER_COMPLETE=complete_bash), and the modules it imported."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    proc = subprocess.run(
        [sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "LAUNCHER_HOME": str(home), "_LAUNCHER_COMPLETE": "complete_bash",
             "COMP_WORDS": line, "COMP_CWORD": str(cword)})
    assert proc.returncode == 0, proc.stderr
    modules = next(ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES"))
    return proc.stdout.split(), modules


def make_clusters(*names: str) -> None:
    from launcher.state.db import PlacementRecord, StateDB

    with StateDB() as db:
        for name in names:
            db.create_cluster(name, PlacementRecord(
                cloud="local", region="local", zone=None, instance_type="local",
                num_nodes=1, use_spot=False, accelerator=None, accelerator_count=0,
                hourly_cost=0.0, resources="1x local"))


def make_jobs(*names: str) -> list[int]:
    from launcher.jobs.store import JobStore

    store = JobStore()
    return [store.add_job(name=n, task_yaml="{}", task_source=None, strategy="EAGER_NEXT_REGION",
                          max_restarts_on_errors=0, recover_on_exit_codes=()).id
            for n in names]


# ---------------------------------------------------------------- the root options


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", "complete -o default -F _launcher_completion launcher"),
    ("zsh", "#compdef launcher"),
    ("fish", "complete --command launcher"),
])
def test_show_completion_prints_the_script(shell: str, marker: str, launcher_home: Path) -> None:
    proc = run("--show-completion", shell, home=launcher_home)
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and "_LAUNCHER_COMPLETE=complete_" + shell in proc.stdout


def test_install_completion_writes_the_script(launcher_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "user"
    home.mkdir()
    proc = run("--install-completion", "bash", home=launcher_home, env={"HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    script = home / ".bash_completions" / "launcher.sh"
    assert "_LAUNCHER_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (home / ".bashrc").read_text()


def test_root_help_lists_the_options(launcher_home: Path) -> None:
    for _ in range(2):  # rendered by click, then from the cached index
        out = run("--help", home=launcher_home).stdout
        assert "--install-completion" in out and "--show-completion" in out


# ---------------------------------------------------------------- values


def test_cluster_names_come_from_the_state_db(launcher_home: Path) -> None:
    make_clusters("train-a", "train-b", "eval")
    assert completion.cluster_names() == ["eval", "train-a", "train-b"]
    assert completion.cluster_names("tr") == ["train-a", "train-b"]
    assert completion.cluster_names("x") == []


def test_job_ids_come_from_the_state_db(launcher_home: Path) -> None:
    ids = make_jobs("sft", "eval")
    got = completion.managed_job_ids()
    assert [i for i, _ in got] == [str(i) for i in sorted(ids, reverse=True)]
    assert got[-1][1] == "sft (PENDING)"
    assert completion.managed_job_ids(str(ids[1])) == [(str(ids[1]), "eval (PENDING)")]


def test_no_state_db_completes_nothing_and_creates_nothing(launcher_home: Path) -> None:
    assert completion.cluster_names() == [] and completion.managed_job_ids() == []
    assert not (launcher_home / "state.db").exists()


def test_tab_completes_cluster_names(launcher_home: Path) -> None:
    make_clusters("train-a", "train-b", "eval")
    names, modules = complete("launcher logs tr", launcher_home)
    assert names == ["train-a", "train-b"]
    # cheap: the state DB is read with sqlite3 alone; no rich, yaml, launcher.state
    assert modules.split() == ["MODULES"], modules
    assert complete("launcher exec ", launcher_home)[0] == ["eval", "train-a", "train-b"]
    # a name already given is not offered again
    assert complete("launcher down train-a ", launcher_home)[0] == ["eval", "train-b"]
    for command in ("queue", "cancel", "status", "stop", "start", "autostop"):
        assert complete(f"launcher {command} e", launcher_home)[0] == ["eval"], command


def test_tab_completes_managed_job_ids(launcher_home: Path) -> None:
    ids = make_jobs("sft", "eval")
    for command in ("logs", "cancel"):
        got, _ = complete(f"launcher jobs {command} ", launcher_home)
        assert got == [str(i) for i in sorted(ids, reverse=True)], command


def test_tab_completes_command_names(launcher_home: Path) -> None:
    assert complete("launcher lau", launcher_home)[0] == ["launch"]
