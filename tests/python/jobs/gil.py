# SPDX-License-Identifier: Apache-2.0
"""The GIL is free while a worker waits in the engine: rank 1 starts its
step a second late, so rank 0's BSP step waits for it, and meanwhile a
Python thread of rank 0 keeps counting.  Rank 0 prints how long its step
took and how far the thread counted in that time."""
import threading
import time

import numpy as np

import kanel
from jobout import say


count, stop = 0, False


def counter():
    global count
    while not stop:
        count += 1


with kanel.Worker() as w:
    x = np.zeros(16, dtype=np.float32)
    g = np.ones_like(x)
    w.register("x", x, g)
    w.start()
    if w.rank == 1:
        time.sleep(1.0)
        w.step_done()
    else:
        th = threading.Thread(target=counter)
        th.start()
        time.sleep(0.05)
        before, t0 = count, time.monotonic()
        w.step_done()
        took, counted = time.monotonic() - t0, count - before
        stop = True
        th.join()
        say("gil", f"{took:.3f}", counted)
