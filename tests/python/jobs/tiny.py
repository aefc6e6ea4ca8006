# SPDX-License-Identifier: Apache-2.0
"""Logistic regression on a synthetic task, under whatever protocol the
job runs, through Worker.step_done (the engine's worker rule).  Rank 0
prints the accuracy of the global model it ends with on held-out
samples; every worker exits 1 if it is below 0.9.  Argument: STEPS."""
import sys

import numpy as np

import kanel
from jobout import say

DIM, BATCH = 16, 32
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
truth = np.random.default_rng(7).uniform(-1, 1, DIM)


def draw(rng, count):
    x = rng.uniform(-1, 1, (count, DIM)).astype(np.float32)
    return x, (x @ truth + 0.1 > 0).astype(np.float32)


with kanel.Worker() as w:
    rng = np.random.default_rng(100 + w.rank)
    model = np.zeros(DIM + 1, dtype=np.float32)
    grad = np.zeros_like(model)
    w.register("model", model, grad)
    w.start()
    for _ in range(steps):
        x, y = draw(rng, BATCH)
        p = 1 / (1 + np.exp(-(x @ model[:DIM] + model[DIM])))
        grad[:DIM] = x.T @ (p - y) / BATCH
        grad[DIM] = np.mean(p - y)
        w.step_done()
    w.finish()
    final = np.empty_like(model)
    w.global_model("model", final)
    x, y = draw(np.random.default_rng(999), 4000)
    acc = np.mean(((x @ final[:DIM] + final[DIM]) > 0) == (y > 0.5))
    say(f"accuracy {w.rank} {acc:.4f} {w.job.protocol} clock {w.clock}")
    sys.exit(0 if acc >= 0.9 else 1)
