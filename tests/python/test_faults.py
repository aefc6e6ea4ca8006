# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C and a dead worker, handled as for a C program under kanel
launch: the worker leaves, the others finish the job, no one hangs."""
import os
import signal
import time

import pytest

from conftest import launch, lines


def pid_of(where, rank, proc, limit=30):
    path = os.path.join(where, f"pid-{rank}")
    end = time.monotonic() + limit
    while not os.path.exists(path) or not open(path).read():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the worker never started"
        time.sleep(0.05)
    return int(open(path).read())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_survivors_finish(tmp_path, sig):
    proc = launch("fault.py", tmp_path, 150, 0.02, workers=3, popen=True)
    victim = pid_of(tmp_path, 1, proc)
    time.sleep(0.5)
    os.kill(victim, sig)
    start = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 30
    done = sorted(l[1] for l in lines(out, "done "))
    assert done == ["0", "2"], (out, err)
    if sig == signal.SIGINT:
        assert lines(out, "interrupted 1"), (out, err)
        assert "KeyboardInterrupt" in err
    # launch reports the worker that ended badly with its status
    assert proc.returncode != 0
    assert "worker 1" in err
