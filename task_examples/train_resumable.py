"""A real (small) training loop that checkpoints and resumes: CPU PyTorch when it is
installed, else numpy. It fits a linear model y = X w + b + noise with minibatch SGD.

Resumable-job rules it follows (docs/resumable-jobs.md):
- durable state lives in $LAUNCHER_CHECKPOINT_DIR (the managed-jobs controller keeps
  it across clusters) - the step, the weights, the optimizer state, the RNG state;
- a checkpoint is written atomically: to a temp file in the same directory, fsync,
  then os.replace() over the old one - a preemption mid-write leaves the old one;
- every CKPT_EVERY steps, and on SIGTERM (the interruption notice) before exiting;
- on start it loads the checkpoint if there is one and continues from its step.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

STEPS = int(os.environ.get("TRAIN_STEPS", "2000"))
CKPT_EVERY = int(os.environ.get("CKPT_EVERY", "100"))
LOG_EVERY = int(os.environ.get("LOG_EVERY", "100"))
STEP_SLEEP_S = float(os.environ.get("STEP_SLEEP_S", "0.002"))
LR = float(os.environ.get("LR", "0.05"))
DIM, BATCH = 16, 64
CKPT_DIR = Path(os.environ.get("LAUNCHER_CHECKPOINT_DIR") or "./checkpoint")
CKPT = CKPT_DIR / "train.npz"

try:  # CPU PyTorch when available, numpy otherwise
    import torch

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

rng_true = np.random.default_rng(1234)  # the "dataset": fixed across restarts
W_TRUE = rng_true.normal(size=DIM)
B_TRUE = 0.5


def batch(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(BATCH, DIM))
    y = x @ W_TRUE + B_TRUE + 0.01 * rng.normal(size=BATCH)
    return x, y


class State:
    def __init__(self) -> None:
        self.step = 0
        self.w = np.zeros(DIM)
        self.b = 0.0
        self.rng = np.random.default_rng(0)

    def save(self) -> None:
        CKPT_DIR.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, step=self.step, w=self.w, b=self.b,
                 rng=np.frombuffer(json.dumps(self.rng.bit_generator.state).encode(), np.uint8))
        tmp = CKPT.with_name(f".{CKPT.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, CKPT)

    def load(self) -> bool:
        if not CKPT.exists():
            return False
        with np.load(CKPT) as d:
            self.step = int(d["step"])
            self.w = d["w"].copy()
            self.b = float(d["b"])
            self.rng.bit_generator.state = json.loads(bytes(d["rng"]).decode())
        return True


def sgd_step_numpy(s: State) -> float:
    x, y = batch(s.rng)
    err = x @ s.w + s.b - y
    s.w -= LR * (x.T @ err) / BATCH
    s.b -= LR * float(err.mean())
    return float((err**2).mean())


def sgd_step_torch(s: State) -> float:
    x, y = batch(s.rng)
    w = torch.tensor(s.w, requires_grad=True)
    b = torch.tensor(s.b, requires_grad=True, dtype=torch.float64)
    loss = ((torch.from_numpy(x) @ w + b - torch.from_numpy(y)) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        s.w = (w - LR * w.grad).numpy().copy()
        s.b = float(b - LR * b.grad)
    return float(loss)


def main() -> int:
    s = State()
    if s.load():
        print(f"resumed from checkpoint at step {s.step}", flush=True)
    else:
        print("no checkpoint: starting at step 0", flush=True)

    def on_sigterm(signum: int, frame: object) -> None:
        s.save()
        print(f"SIGTERM: checkpoint written at step {s.step}", flush=True)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    step_fn = sgd_step_torch if HAVE_TORCH else sgd_step_numpy
    print(f"training with {'torch' if HAVE_TORCH else 'numpy'} to step {STEPS}", flush=True)
    loss = float("nan")
    while s.step < STEPS:
        loss = step_fn(s)
        s.step += 1
        if s.step % CKPT_EVERY == 0:
            s.save()
        if s.step % LOG_EVERY == 0:
            print(f"step {s.step} loss {loss:.6f}", flush=True)
        if STEP_SLEEP_S:
            time.sleep(STEP_SLEEP_S)
    s.save()
    err = float(np.abs(s.w - W_TRUE).max())
    print(f"done: step {s.step} loss {loss:.6f} max|w-w*| {err:.4f}", flush=True)
    return 0 if err < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
