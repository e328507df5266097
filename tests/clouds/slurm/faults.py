"""Fault injection at the Slurm commands themselves: shims on PATH.

    shims = SlurmShims(tmp_path / "shims")   # shims for sbatch, squeue, sinfo, scontrol, srun, scancel
    monkeypatch.setenv("PATH", f"{shims.bin}:{os.environ['PATH']}")
    shims.calls()                            # ["squeue", "sinfo", "scontrol show node", ...]
    shims.arm("sbatch", 1, "fail-after")     # the 1st sbatch from now on: see KINDS
    shims.arm("srun", 0, "fail", containing="agent submit")  # the first such srun

Each shim logs the call's key (the command, and for scontrol its two leading words:
`scontrol show job`), then, if a fault is armed for this key and occurrence, acts it
out; otherwise it execs the real binary. Counting starts again at every `arm`/`reset`.
Bash, flock and the real binaries only: the shims catch whatever runs the commands
through PATH (launcher's `login: localhost`, and a login reached over SSH whose
shell finds them first). `real(name)` is the real binary, for a test's own checks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

COMMANDS = ("sbatch", "squeue", "sinfo", "scontrol", "srun", "scancel")
# fail: exit 1 before the command runs (Slurm never saw it); fail-after: the command
# ran (an sbatch submitted), then its answer is lost (exit 1, no output); hang: never
# answers, nothing done; hang-after: done, then never answers.
# kill / kill-after: SIGKILL of the launcher process that runs the command (the
# nearest python ancestor: a CLI client, or the managed-jobs controller) before the
# command runs / once it has acted.
KINDS = ("fail", "fail-after", "hang", "hang-after", "kill", "kill-after")

_SHIM = r"""#!/bin/bash
d=__DIR__
name=__NAME__
key=$name
if [ "$name" = scontrol ]; then
  w=(); for a in "$@"; do case $a in -*) ;; *) w+=("$a");; esac; [ ${#w[@]} -ge 2 ] && break; done
  key="scontrol ${w[0]} ${w[1]}"
fi
# the launcher process that runs this command: the nearest python ancestor
victim=""
p=$PPID
while [ -n "$p" ] && [ "$p" -gt 1 ]; do
  case "$(cat /proc/$p/comm 2>/dev/null)" in python*) victim=$p; break ;; esac
  p=$(ps -o ppid= -p "$p" | tr -d ' ')
done
# the test's own commands (lab.sh) are neither logged nor faulted
if [ -n "$victim" ] && [ -f "$d/protect" ] && [ "$victim" = "$(cat "$d/protect")" ]; then
  exec __REAL__ "$@"
fi
exec 9>>"$d/lock"; flock 9
echo "$key" >> "$d/calls"
printf '%s\n' "$key $(printf '%q ' "$@" | head -c 300)" >> "$d/argv"
n=$(grep -cxF "$key" "$d/calls")
kind=""
if [ -f "$d/fault" ] && [ ! -f "$d/fired" ]; then
  IFS='|' read -r fkey fn fkind fsub < "$d/fault"
  if [ "$fkey" = "$key" ]; then
    if [ -n "$fsub" ]; then
      case "$*" in *"$fsub"*) kind=$fkind ;; esac
    elif [ "$fn" = "$n" ]; then kind=$fkind; fi
    [ -n "$kind" ] && printf '%s\n' "$key|$n|$kind|$victim $(tr '\0' ' ' < /proc/$victim/cmdline | head -c 200)|$(printf '%q ' "$@" | head -c 400)" >> "$d/fired"
  fi
fi
exec 9>&-
case $kind in
  fail) echo "$name: error: injected fault" >&2; exit 1 ;;
  hang) exec sleep 3600 ;;
  fail-after) __REAL__ "$@" >/dev/null 2>&1; echo "$name: error: Socket timed out on send/recv operation (injected)" >&2; exit 1 ;;
  hang-after) __REAL__ "$@" >/dev/null 2>&1; exec sleep 3600 ;;
  kill) kill -9 "$victim"; exit 1 ;;
  kill-after) __REAL__ "$@" >/dev/null 2>&1; kill -9 "$victim"; exit 1 ;;
esac
exec __REAL__ "$@"
"""


class SlurmShims:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state = root / "state"
        self.bin.mkdir(parents=True)
        self.state.mkdir()
        self.reals: dict[str, str] = {}
        for name in COMMANDS:
            real = shutil.which(name)
            assert real is not None, name
            self.reals[name] = real
            shim = self.bin / name
            shim.write_text(_SHIM.replace("__DIR__", str(self.state)).replace("__NAME__", name)
                            .replace("__REAL__", real))
            shim.chmod(0o755)
        self.reset()

    def reset(self) -> None:
        """No fault; the call log starts empty."""
        for f in ("calls", "fault", "fired", "argv"):
            (self.state / f).unlink(missing_ok=True)
        (self.state / "calls").write_text("")

    def arm(self, key: str, occurrence: int, kind: str, containing: str = "") -> None:
        """Fault `kind` at the `occurrence`-th call of `key` from now on or, with
        `containing`, at the first call of `key` whose arguments contain that text.
        A fault fires once."""
        assert kind in KINDS, kind
        assert "|" not in containing and "\n" not in containing
        self.reset()
        (self.state / "fault").write_text(f"{key}|{occurrence}|{kind}|{containing}\n")

    def protect(self, pid: int) -> None:
        """Commands run by process `pid` (the test itself) go straight to Slurm."""
        (self.state / "protect").write_text(str(pid))

    def real(self, name: str) -> str:
        """The real binary's path (found before the shims went on PATH)."""
        return self.reals[name]

    def calls(self) -> list[str]:
        return (self.state / "calls").read_text().splitlines()

    def argv(self) -> list[str]:
        """Each call's key and (the first 300 characters of) its arguments, for messages."""
        return (self.state / "argv").read_text().splitlines()

    def fired_at(self) -> str:
        """What fired: key, occurrence, kind, the victim's pid and command line, the args."""
        return (self.state / "fired").read_text() if self.fired() else ""

    def fired(self) -> bool:
        return (self.state / "fired").exists()
