"""A real (small) training loop that checkpoints and resumes, in plain Python (nothing to
install: it runs on any node with python3). It fits a linear model y = X w + b + noise
with minibatch SGD.

Resumable-job rules it follows (docs/resumable-jobs.md):
- durable state lives in $LAUNCHER_CHECKPOINT_DIR (the managed-jobs controller keeps
  it across clusters) - the step, the weights, the RNG state;
- a checkpoint is written atomically: to a temp file in the same directory, fsync,
  then os.replace() over the old one - a preemption mid-write leaves the old one;
- every CKPT_EVERY steps, and on SIGTERM (the interruption notice) before exiting, at
  the next step boundary (the handler only sets a flag);
- on start it loads the checkpoint if there is one and continues from its step.

With NumPy or PyTorch the state would be arrays; serialize them into memory first
(np.savez / torch.save into a BytesIO) and write the bytes the same way.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

STEPS = int(os.environ.get("TRAIN_STEPS", "2000"))
CKPT_EVERY = int(os.environ.get("CKPT_EVERY", "100"))
LOG_EVERY = int(os.environ.get("LOG_EVERY", "100"))
STEP_SLEEP_S = float(os.environ.get("STEP_SLEEP_S", "0.002"))
LR = float(os.environ.get("LR", "0.05"))
DIM, BATCH = 16, 64
CKPT_DIR = Path(os.environ.get("LAUNCHER_CHECKPOINT_DIR") or "./checkpoint")
CKPT = CKPT_DIR / "train.json"

_truth = random.Random(1234)  # the "dataset": fixed across restarts
W_TRUE = [_truth.gauss(0.0, 1.0) for _ in range(DIM)]
B_TRUE = 0.5


def batch(rng: random.Random) -> tuple[list[list[float]], list[float]]:
    xs = [[rng.gauss(0.0, 1.0) for _ in range(DIM)] for _ in range(BATCH)]
    ys = [sum(a * w for a, w in zip(x, W_TRUE, strict=True)) + B_TRUE + 0.01 * rng.gauss(0.0, 1.0)
          for x in xs]
    return xs, ys


class State:
    def __init__(self) -> None:
        self.step = 0
        self.w = [0.0] * DIM
        self.b = 0.0
        self.rng = random.Random(0)

    def save(self) -> None:
        CKPT_DIR.mkdir(parents=True, exist_ok=True)
        version, internal, gauss_next = self.rng.getstate()
        doc = {"step": self.step, "w": self.w, "b": self.b,
               "rng": [version, list(internal), gauss_next]}
        tmp = CKPT.with_name(f".{CKPT.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, CKPT)

    def load(self) -> bool:
        if not CKPT.exists():
            return False
        doc = json.loads(CKPT.read_text())
        self.step = int(doc["step"])
        self.w = [float(v) for v in doc["w"]]
        self.b = float(doc["b"])
        version, internal, gauss_next = doc["rng"]
        self.rng.setstate((version, tuple(internal), gauss_next))
        return True


def sgd_step(s: State) -> float:
    xs, ys = batch(s.rng)
    errs = [sum(a * w for a, w in zip(x, s.w, strict=True)) + s.b - y
            for x, y in zip(xs, ys, strict=True)]
    for j in range(DIM):
        s.w[j] -= LR * sum(e * x[j] for e, x in zip(errs, xs, strict=True)) / BATCH
    s.b -= LR * sum(errs) / BATCH
    return sum(e * e for e in errs) / BATCH


def main() -> int:
    s = State()
    if s.load():
        print(f"resumed from checkpoint at step {s.step}", flush=True)
    else:
        print("no checkpoint: starting at step 0", flush=True)

    # The notice only sets a flag: the checkpoint is written between steps, never
    # from the middle of one (half-updated weights, an advanced RNG, the old step).
    stop: list[int] = []

    def on_sigterm(signum: int, frame: object) -> None:
        stop.append(signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    print(f"training to step {STEPS}", flush=True)
    loss = float("nan")
    while s.step < STEPS:
        if stop:
            s.save()
            print(f"SIGTERM: checkpoint written at step {s.step}", flush=True)
            return 128 + stop[0]
        loss = sgd_step(s)
        s.step += 1
        if s.step % CKPT_EVERY == 0:
            s.save()
        if s.step % LOG_EVERY == 0:
            print(f"step {s.step} loss {loss:.6f}", flush=True)
        if STEP_SLEEP_S:
            time.sleep(STEP_SLEEP_S)
    s.save()
    err = max(abs(w - t) for w, t in zip(s.w, W_TRUE, strict=True))
    print(f"done: step {s.step} loss {loss:.6f} max|w-w*| {err:.4f}", flush=True)
    return 0 if err < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
