"""`launcher api deploy` and `--down` on moto + sshd bodies: wall time, and where it goes.

The lab of benchmarks/aws_moto.py (moto on the netns gateway, an sshd body per instance)
with the bodies booting the deploy tests' image (tests/server/deploy_env.py: this
machine's system python3, the dependencies on PYTHONPATH, no package index), so the
deploy runs for real: provision through the launch path, agent, venv, pip install of
the uploaded wheel with `[server]`, the server started under the supervisor, login
through the pinned certificate. Each run starts from a fresh moto and LAUNCHER_HOME
(an unprepared region). The phases come from the time each progress line reached the
CLI's stderr:

- provision: from the start to "Installing launcher[server]" (process start, wheel,
  planning, EC2 calls, the body's boot, SSH wait, agent install, wheel upload);
- install: to "Starting the server" (venv, pip, the config and credential copies);
- start + login: the rest (certificate, service, /health, one call through the pin).

Needs root, iproute2 and sshd (network namespaces); otherwise prints "skipped".

    python3 benchmarks/api_deploy.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LAUNCHER = [sys.executable, "-c", "from launcher.cli import main; main()"]


def _timed(args: list[str]) -> tuple[int, float, list[tuple[float, str]]]:
    """Run the CLI; (exit code, wall s, [(s since start, stderr line)])."""
    t0 = time.monotonic()
    proc = subprocess.Popen([*LAUNCHER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)
    lines: list[tuple[float, str]] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append((time.monotonic() - t0, line.rstrip()))
    proc.wait()
    return proc.returncode, time.monotonic() - t0, lines


def _at(lines: list[tuple[float, str]], prefix: str) -> float:
    return next(t for t, ln in lines if ln.startswith(prefix))


def bench(lab: object, runs: int) -> dict[str, list[float]]:
    from tests.server.deploy_env import body_env, image_dir

    out: dict[str, list[float]] = {"wall": [], "provision": [], "install": [], "start": [],
                                   "down": []}
    for _ in range(runs):
        lab.fresh()  # type: ignore[attr-defined]
        fake = lab.fake  # type: ignore[attr-defined]
        lab.bodies.env = body_env(image_dir(lab.workdir), fake.endpoint)  # type: ignore[attr-defined]
        Path(os.environ["AWS_SHARED_CREDENTIALS_FILE"]).write_text(
            "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
        rc, wall, lines = _timed(["api", "deploy", "--cloud", "aws", "--region", "us-east-1",
                                  "--with-credentials", "aws"])
        if rc != 0:
            raise SystemExit("deploy failed:\n" + "\n".join(ln for _, ln in lines[-15:]))
        installing = _at(lines, "Installing launcher[server]")
        starting = _at(lines, "Starting the server")
        out["wall"].append(wall)
        out["provision"].append(installing)
        out["install"].append(starting - installing)
        out["start"].append(wall - starting)
        rc, down, lines = _timed(["api", "deploy", "--down", "--yes"])
        if rc != 0:
            raise SystemExit("--down failed:\n" + "\n".join(ln for _, ln in lines[-15:]))
        out["down"].append(down)
        left = fake.leaks()
        if not left.empty():
            raise SystemExit(f"--down left {left}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.chdir(REPO)
    from benchmarks.aws_moto import _lab

    with _lab() as lab:
        if lab is None:
            return
        r = bench(lab, args.runs)
        med = {k: statistics.median(v) for k, v in r.items()}
        print(f"launcher api deploy on moto + sshd bodies, median of {args.runs} run(s)")
        print(f"  deploy, wall                      {med['wall']:6.2f} s")
        print(f"    provision (to the install)      {med['provision']:6.2f} s")
        print(f"    install (venv, pip)             {med['install']:6.2f} s")
        print(f"    start + login                   {med['start']:6.2f} s")
        print(f"  --down --yes, wall (nothing left) {med['down']:6.2f} s")


if __name__ == "__main__":
    main()
