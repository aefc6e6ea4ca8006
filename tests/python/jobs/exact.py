# SPDX-License-Identifier: Apache-2.0
"""Registration and one BSP step in the program's own memory: rank 0's
values become everyone's at start, then one SGD step on the mean of the
workers' gradients, checked against the value computed by hand, in
fp32 (NumPy), fp16 (NumPy) and bf16 (torch)."""
import numpy as np
import torch

import kanel
from jobout import say

with kanel.Worker() as w:
    r, n = w.rank, w.size
    job = w.job
    a = np.arange(1, 9, dtype=np.float32) * (1 if r == 0 else -7)
    ga = np.full(8, r + 1, dtype=np.float32)
    h = np.arange(4, dtype=np.float16) * (1 if r == 0 else 5)
    gh = np.full(4, 2 * (r + 1), dtype=np.float16)
    t = torch.arange(16, dtype=torch.bfloat16) * (1 if r == 0 else 3)
    gt = torch.full((16,), 4.0 * (r + 1), dtype=torch.bfloat16)
    w.register("a", a, ga)
    w.register("h", h, gh)
    w.register("t", t, gt)
    w.set_priority("t", -1)  # before "a" and "h"
    try:
        w.set_priority("none", 0)
        raise AssertionError("set_priority of an unknown key")
    except kanel.Error:
        pass
    where = (a.ctypes.data, h.ctypes.data, t.data_ptr())
    w.start()
    assert np.array_equal(a, np.arange(1, 9, dtype=np.float32)), a
    assert np.array_equal(h, np.arange(4, dtype=np.float16)), h
    assert torch.equal(t, torch.arange(16, dtype=torch.bfloat16)), t
    w.step_done()
    # the mean gradient of ranks 0..n-1 is (n + 1) / 2 times the base
    mean = (n + 1) / 2
    want_a = np.arange(1, 9, dtype=np.float32) - np.float32(job.lr * mean)
    want_h = (np.arange(4) - job.lr * 2 * mean).astype(np.float16)
    want_t = (torch.arange(16, dtype=torch.float32)
              - job.lr * 4 * mean).to(torch.bfloat16)
    assert (a.ctypes.data, h.ctypes.data, t.data_ptr()) == where
    assert np.array_equal(a, want_a), (a, want_a)
    assert np.array_equal(h, want_h), (h, want_h)
    assert torch.equal(t, want_t), (t, want_t)
    # the same step again through pushpull and a handle, then push and
    # pull of one tensor: each a second and a third SGD step on "a"
    h = w.pushpull()
    w.wait(h)
    assert w.test(h)
    want_a -= np.float32(job.lr * mean)
    assert np.array_equal(a, want_a), (a, want_a)
    w.wait(w.push("a"))
    w.wait(w.pull("a"))
    want_a -= np.float32(job.lr * mean)
    assert np.array_equal(a, want_a), (a, want_a)
    say("ok", r, job.protocol, job.optimizer, job.lr)
