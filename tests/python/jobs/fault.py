# SPDX-License-Identifier: Apache-2.0
"""A worker that trains STEPS steps of DELAY seconds each and writes its
pid to DIR/pid-RANK once started, so that the test can interrupt or
kill it; it prints "done RANK STEPS" at the end.  A KeyboardInterrupt
leaves the job through the context manager, as Ctrl-C should.
Arguments: DIR STEPS DELAY."""
import os
import sys
import time

import numpy as np

import kanel
from jobout import say

where, steps, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with kanel.Worker() as w:
    x = np.zeros(1024, dtype=np.float32)
    g = np.full_like(x, 0.001)
    w.register("x", x, g)
    w.start()
    with open(os.path.join(where, f"pid-{w.rank}"), "w") as f:
        f.write(str(os.getpid()))
    try:
        for s in range(steps):
            time.sleep(delay)
            w.step_done()
    except KeyboardInterrupt:
        say(f"interrupted {w.rank} at step {s}")
        raise
    say(f"done {w.rank} {steps}")
