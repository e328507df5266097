"""Count to COUNT_TO, one step every STEP_S seconds, resuming from a checkpoint.

The smallest honest resumable job (used by the managed-jobs tests):
- the checkpoint is `$LAUNCHER_CHECKPOINT_DIR/count.json`, written atomically
  (temp file + fsync + rename) every CKPT_EVERY steps and on SIGTERM;
- a step is printed only after it is checkpointed (when it is), so a resumed run
  continues right after the last line that counts;
- on start it prints where it resumes from.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

COUNT_TO = int(os.environ.get("COUNT_TO", "20"))
STEP_S = float(os.environ.get("STEP_S", "0.2"))
CKPT_EVERY = int(os.environ.get("CKPT_EVERY", "1"))
CKPT_DIR = Path(os.environ.get("LAUNCHER_CHECKPOINT_DIR") or "./checkpoint")
CKPT = CKPT_DIR / "count.json"


def load() -> int:
    try:
        return int(json.loads(CKPT.read_text())["count"])
    except FileNotFoundError:
        return 0


def save(count: int) -> None:
    CKPT_DIR.mkdir(parents=True, exist_ok=True)
    tmp = CKPT.with_name(f".{CKPT.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump({"count": count, "task_id": os.environ.get("LAUNCHER_TASK_ID")}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, CKPT)  # atomic: a reader sees the old or the new file, never half


count = load()


def on_sigterm(signum: int, frame: object) -> None:
    save(count)
    print(f"SIGTERM: checkpoint at {count}", flush=True)
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_sigterm)
print(f"resuming from {count}" if count else "starting from 0", flush=True)
while count < COUNT_TO:
    time.sleep(STEP_S)
    nxt = count + 1
    if nxt % CKPT_EVERY == 0 or nxt == COUNT_TO:
        save(nxt)
    count = nxt
    print(f"count {count}", flush=True)
print(f"done: counted to {count}", flush=True)
