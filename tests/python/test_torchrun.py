# SPDX-License-Identifier: Apache-2.0
"""torchrun's environment: every process a worker, RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT read, rank 0 starting the coordinator and
the servers.  The processes are started here with exactly the variables
torchrun gives its children (Debian's torchrun of torch 1.13 fails on
Python 3.11 before starting any: docs/python.md)."""
import os
import socket
import subprocess

from conftest import HERE, PYTHON, kanel_exe, lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_env(rank, world, port, secret=True):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KANEL_") or k in ("KANEL_EXE",)}
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
               LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), KANEL_SYNC="esp",
               KANEL_OPTIMIZER="momentum", KANEL_LR="0.5")
    if secret:
        env["KANEL_SECRET"] = "a torchrun test secret"
    return env


def start(world, port, secret=True):
    kanel_exe()  # the suite's kanel: rank 0 starts its roles with it
    return [subprocess.Popen([PYTHON, os.path.join(HERE, "jobs", "tiny.py"),
                              "200"], env=torchrun_env(r, world, port,
                                                       secret),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for r in range(world)]


def test_workers_of_torchrun_train_together():
    port = free_port() - 1  # the coordinator takes MASTER_PORT + 1
    procs = start(3, port)
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, (out, err)
    acc = [lines(out, "accuracy ")[0] for out, _ in outs]
    assert sorted(a[1] for a in acc) == ["0", "1", "2"]
    assert all(a[3] == "esp" and float(a[2]) >= 0.9 for a in acc), acc


def test_torchrun_without_a_secret_is_refused():
    procs = start(1, free_port() - 1, secret=False)
    out, err = procs[0].communicate(timeout=60)
    assert procs[0].returncode != 0
    assert "KANEL_SECRET_FILE" in err
