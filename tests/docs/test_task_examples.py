"""The training example runs on a bare python3 (nothing installed: `-I -S`, so no numpy
or torch even where they are installed) and resumes exactly from its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "task_examples" / "train_resumable.py"


def _env(ckpt: Path) -> dict[str, str]:
    return {**os.environ, "LAUNCHER_CHECKPOINT_DIR": str(ckpt), "TRAIN_STEPS": "400",
            "CKPT_EVERY": "50", "LOG_EVERY": "100", "STEP_SLEEP_S": "0.005"}


def _run(ckpt: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-S", str(SCRIPT)], env=_env(ckpt),
                          capture_output=True, text=True, timeout=120)


def test_train_example_needs_nothing_installed_and_resumes_exactly(tmp_path: Path) -> None:
    whole = _run(tmp_path / "a")
    assert whole.returncode == 0, whole.stderr
    done = whole.stdout.splitlines()[-1]
    assert done.startswith("done: step 400 ")
    # interrupted once (SIGTERM, as an interruption notice does), then resumed
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(SCRIPT)], env=_env(tmp_path / "b"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "b" / "train.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: checkpoint written at step" in out
    resumed = _run(tmp_path / "b")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[0].startswith("resumed from checkpoint at step")
    assert resumed.stdout.splitlines()[-1] == done  # the very same weights and loss
