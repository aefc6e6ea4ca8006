# SPDX-License-Identifier: Apache-2.0
"""Helpers of the Python suite: run a job of Python workers under
`kanel launch`, with the build tree's library and package (meson test
sets KANEL_EXE, KANEL_LIBRARY and PYTHONPATH)."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's, which numpy and torch belong to


def kanel_exe():
    exe = os.environ.get("KANEL_EXE")
    if not exe:
        pytest.fail("KANEL_EXE is not set: run this suite with meson test")
    return exe


def launch(script, *args, workers=2, servers=1, sync="bsp",
           options=(), timeout=120, env=None, popen=False):
    """`kanel launch` N workers, each `python3 jobs/SCRIPT ARGS`; the
    CompletedProcess (or the Popen with popen=True)."""
    cmd = [kanel_exe(), "launch", "--workers", str(workers), "--servers",
           str(servers), "--sync", sync, *options, "--", PYTHON,
           os.path.join(HERE, "jobs", script), *map(str, args)]
    e = dict(os.environ, **(env or {}))
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=e)
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout, env=e)


def lines(out, prefix):
    """The lines of @out that start with @prefix, split into words."""
    return [l.split() for l in out.splitlines() if l.startswith(prefix)]


def explain(res):
    return (f"exit {res.returncode}\n--- stdout\n{res.stdout}"
            f"\n--- stderr\n{res.stderr[-4000:]}")


def assert_push_order(*args):
    """Run overlap_order.py with @args on two workers and check each
    worker's "order" line: pushes posted before the first layer's
    backward ran (the last part of backward), and every parameter
    pushed once."""
    res = launch("overlap_order.py", *args, workers=2)
    assert res.returncode == 0, explain(res)
    out = lines(res.stdout, "order ")
    assert len(out) == 2, explain(res)
    for o in out:
        assert int(o[2]) >= 1, explain(res)
        assert int(o[3]) == int(o[4]), explain(res)


sys.path.insert(0, HERE)
