"""How a task's script is started (agent_ranks.task_shell), run for real with bash: the
SkyPilot semantics (interactive bash after ~/.bashrc and conda, PYTHONUNBUFFERED=1, the
task's variables restored, the workdir) and what the subshell keeps from a plain script."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launcher.runtime.agent_ranks import skypilot_gpus, task_shell

# A stock Debian/Ubuntu ~/.bashrc starts like this: nothing below it runs in a
# non-interactive shell.
GUARD = "case $- in\n  *i*) ;;\n  *) return;;\nesac\n"


def _run(home: Path, script: str, *, env: dict[str, str] | None = None, keep: list[str] | None = None,
         cd: str = '"$HOME"/work', path_prefix: str = "",
         timeout: float = 30) -> subprocess.CompletedProcess[str]:
    path = home.parent / "task.sh"
    path.write_text(script + "\n")
    command = task_shell(keep or sorted(env or {}), cd) + f" {path}"
    full = {"PATH": path_prefix + os.environ["PATH"], "HOME": str(home), **(env or {})}
    return subprocess.run(["bash", "-c", command], env=full, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "work").mkdir(parents=True)
    return h


def test_bashrc_behind_an_interactive_guard_is_sourced(home: Path) -> None:
    (home / ".bashrc").write_text(GUARD + "export TEST_VAR=test\nalias hi='echo alias-ok'\n"
                                  "greet() { echo function-ok; }\n")
    p = _run(home, 'echo "TEST_VAR=$TEST_VAR"\nhi\ngreet')
    assert p.returncode == 0, p
    assert p.stdout.splitlines() == ["TEST_VAR=test", "alias-ok", "function-ok"]
    assert p.stderr == ""  # no "no job control in this shell" warnings


def test_no_bashrc_is_fine(home: Path) -> None:
    p = _run(home, "echo ok")
    assert (p.returncode, p.stdout, p.stderr) == (0, "ok\n", "")


def test_task_variables_win_over_bashrc_and_pythonunbuffered_is_set(home: Path) -> None:
    (home / ".bashrc").write_text("export MY_ENV=from-bashrc\nexport OTHER=from-bashrc\n"
                                  "export PYTHONUNBUFFERED=0\ncd /\n")
    weird = "it's \"$HOME\" `x` \\ $(nope)\nsecond line"
    p = _run(home, 'echo "$MY_ENV|$OTHER|$PYTHONUNBUFFERED|$PWD"; printf "%s|" "$WEIRD"',
             env={"MY_ENV": "from-task", "WEIRD": weird})
    assert p.returncode == 0, p
    first, rest = p.stdout.split("\n", 1)
    # bashrc's own variables stay; the task's are restored; the workdir is entered again
    assert first == f"from-task|from-bashrc|1|{home}/work"
    assert rest == weird + "|"


def test_a_task_can_set_pythonunbuffered_itself(home: Path) -> None:
    p = _run(home, 'echo "$PYTHONUNBUFFERED"', env={"PYTHONUNBUFFERED": "0"})
    assert p.stdout == "0\n"


def test_conda_profile_is_sourced_when_conda_exists(home: Path, tmp_path: Path) -> None:
    base = tmp_path / "miniconda"
    (base / "etc" / "profile.d").mkdir(parents=True)
    (base / "etc" / "profile.d" / "conda.sh").write_text(
        "CONDA_FAKE_BASE=" + str(base) + "\nconda_activate_ok() { echo conda-function; }\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    conda = bindir / "conda"
    conda.write_text(f'#!/bin/sh\n[ "$1 $2" = "info --base" ] && echo {base}\n')
    conda.chmod(0o755)
    script = 'echo "base=$CONDA_FAKE_BASE"; conda_activate_ok; bash -c \'echo "child=$CONDA_FAKE_BASE"\''
    p = _run(home, script, path_prefix=f"{bindir}:")
    assert p.returncode == 0, p
    # the profile's variables are exported (set -a), its functions usable in the script
    assert p.stdout.splitlines() == [f"base={base}", "conda-function", f"child={base}"]
    without = _run(home, 'echo "base=${CONDA_FAKE_BASE:-none}"')
    assert without.stdout == "base=none\n" and without.stderr == ""


def test_exit_status_and_no_exit_line_no_history_expansion(home: Path) -> None:
    p = _run(home, 'echo "a!b"\nx=1\necho "!x"\nexit 7\necho never')
    assert p.returncode == 7
    assert p.stdout == "a!b\n!x\n"  # an interactive shell's "exit" is not printed
    assert p.stderr == ""


def test_the_script_has_no_arguments_and_no_size_limit(home: Path) -> None:
    big = "#" * (300 * 1024)  # over one bash argument's 128 KiB
    p = _run(home, f'{big}\necho "args=$# [$1] $0"')
    assert (p.returncode, p.stdout, p.stderr) == (0, "args=0 [] launcher-task\n", "")


def test_starts_in_home_without_a_workdir(home: Path) -> None:
    p = _run(home, "pwd", cd='"$HOME"/sky_workdir')
    assert p.stdout == f"{home}\n"


def test_sigterm_ends_the_script_although_the_shell_is_interactive(home: Path) -> None:
    # exec: the interactive shell is the process the signal finds, as in a rank's group
    script = home.parent / "task.sh"
    script.write_text("sleep 30; echo after-sleep\n")
    command = f"exec {task_shell([], chr(34) + '$HOME' + chr(34))} {script}"
    proc = subprocess.Popen(["bash", "-c", command], env={**os.environ, "HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _has_child_sleep(proc.pid):
        time.sleep(0.02)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)  # as the agent stops a rank: its whole group
    out, _ = proc.communicate(timeout=10)
    assert time.monotonic() - t0 < 5
    assert "after-sleep" not in out
    assert proc.returncode == 128 + signal.SIGTERM  # the interactive shell itself exits


def _has_child_sleep(pid: int) -> bool:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                pgrp = int(f.read().rsplit(")", 1)[1].split()[2])
        except (OSError, ValueError, IndexError):
            continue
        if cmd[:2] == [b"sleep", b"30"] and pgrp == pid:
            return True
    return False


@pytest.mark.parametrize(("given", "shown"), [(0, "0"), (1, "1"), (8, "8"), (0.5, "1"),
                                              (2.25, "3")])
def test_skypilot_gpu_count_rounds_a_fraction_up(given: float, shown: str) -> None:
    assert skypilot_gpus(given) == shown
