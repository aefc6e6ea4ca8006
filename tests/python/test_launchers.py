# SPDX-License-Identifier: Apache-2.0
"""The launchers other than kanel launch, from their environment.
torchrun: every process a worker, RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT read, rank 0 starting the coordinator and the servers; the
processes are started here with exactly the variables torchrun gives its
children (Debian's torchrun of torch 1.13 fails on Python 3.11 before it
starts any: docs/python.md).  Open MPI and Slurm: the ranks of the
role script."""
import os
import socket
import subprocess

import pytest

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


@pytest.mark.parametrize("rank_var,size_var", [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS")])
def test_workers_under_a_cluster_launcher(rank_var, size_var):
    """Open MPI's and Slurm's variables, as the role script of
    docs/engine.md uses them: rank 0 the coordinator, rank 1 a server
    (the kanel command), ranks 2 and 3 Python workers, which take their
    role and rank from the same variables as a C program."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KANEL_", "OMPI_", "SLURM_"))}
    env.update(KANEL_COORDINATOR=f"127.0.0.1:{free_port()}",
               KANEL_SERVERS="1", KANEL_SECRET="a cluster test secret",
               KANEL_SYNC="predicted", KANEL_OPTIMIZER="momentum",
               KANEL_LR="0.5", KANEL_WORKERS="2")
    env[size_var] = "4"
    procs = []
    for rank in range(4):
        # the role script's split; a worker is given no role or rank:
        # the engine takes both from OMPI_COMM_WORLD_RANK
        cmd = [[kanel_exe(), "coordinator"],
               [kanel_exe(), "server", "--rank", "0"]][rank] if rank < 2 \
            else [PYTHON, os.path.join(HERE, "jobs", "tiny.py"), "200"]
        procs.append(subprocess.Popen(
            cmd, env=dict(env, **{rank_var: str(rank)}),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, (out, err)
    acc = [lines(out, "accuracy ")[0] for out, _ in outs[2:]]
    assert sorted(a[1] for a in acc) == ["0", "1"]
    assert all(a[3] == "predicted" and float(a[2]) >= 0.9 for a in acc)


def test_a_worker_on_the_coordinators_rank_is_told():
    env = {k: v for k, v in os.environ.items() if not k.startswith("KANEL_")}
    env.update(KANEL_COORDINATOR="127.0.0.1:9", KANEL_SECRET="s",
               OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="3")
    res = subprocess.run([PYTHON, "-c", "import kanel; kanel.Worker()"],
                         env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0
    assert "kanel.Error" in res.stderr
    assert "the job's coordinator, not a worker" in res.stderr


def test_a_script_without_a_launcher_is_told_how_to_start():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KANEL_COORDINATOR", "KANEL_RANK",
                                "SLURM_", "OMPI_", "MASTER_", "RANK",
                                "WORLD_SIZE"))}
    res = subprocess.run(
        [PYTHON, "-c", "import torch, kanel.torch as kt\n"
         "m = torch.nn.Linear(2, 2)\n"
         "kt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1),"
         " m.named_parameters())"],
        capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode != 0
    assert "RuntimeError: kanel: this process was not started as a " \
        "worker" in res.stderr, res.stderr
    assert "kanel launch --workers" in res.stderr
    assert "torchrun --nproc_per_node" in res.stderr
