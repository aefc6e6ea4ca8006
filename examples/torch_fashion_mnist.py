#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A small CNN on Fashion-MNIST, trained by a Kanel job from PyTorch.

    /usr/bin/python3 examples/torch_fashion_mnist.py --workers 4 --epochs 8
    /usr/bin/python3 examples/torch_fashion_mnist.py --protocol bsp,esp,psp \\
        --imbalance persistent:0.25:4 --target-accuracy 0.88

Started by hand, it runs `kanel launch` once per protocol, with itself as
the workers, and prints a table of the runs (time to the target, best and
final accuracy, samples/s).  Started by a launcher (kanel launch, Slurm,
Open MPI, torchrun: KANEL_COORDINATOR or torchrun's variables set), it is
one worker.  Every option is in docs/python.md.

The model: two 5x5 convolutions (16 and 32 channels, each with ReLU and
2x2 max pooling), a 128-unit hidden layer and the 10 outputs.  Each worker
trains on its own stride of the 60,000 training images; rank 0 evaluates
the job's global model on the first 2,000 test images every
--eval-every seconds (in a thread of its own, so that its training does
not stop) and on all 10,000 at the end.
"""
import argparse
import gzip
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def options(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--protocol", default=os.environ.get("KANEL_SYNC", "bsp"),
      help="bsp, asp, ssp, esp, predicted (psp) or cgp; by hand a comma "
           "list, run one after the other (default: KANEL_SYNC or bsp)")
    a("--workers", type=int, default=4, help="workers, by hand (4)")
    a("--servers", type=int, default=1, help="servers, by hand (1)")
    a("--epochs", type=float, default=8, help="epochs of each worker's "
      "shard (8)")
    a("--time-budget", type=float, default=0,
      help="stop after this many seconds (0: no limit)")
    a("--batch", type=int, default=64, help="batch per worker (64)")
    a("--lr", type=float, default=0.05, help="learning rate (0.05)")
    a("--momentum", type=float, default=0.9, help="momentum (0.9)")
    a("--optimizer", choices=("sgd", "adamw"), default="sgd",
      help="the script's optimizer: sgd (with --momentum) or adamw "
           "(with --weight-decay) (sgd)")
    a("--weight-decay", type=float, default=0.0, help="weight decay (0)")
    a("--schedule", choices=("none", "cosine"), default="none",
      help="learning-rate schedule over the run's steps (none)")
    a("--server-optimizer", action="store_true",
      help="by hand: the servers run momentum SGD at --lr, --momentum "
           "instead of the script's optimizer (kanel launch --optimizer "
           "momentum)")
    a("--model", choices=("cnn", "wide"), default="cnn",
      help="cnn, or wide: an MLP of two 2048-unit layers (5.8 M "
           "parameters), whose exchange is a real share of a step (cnn)")
    a("--no-overlap", action="store_true",
      help="push the gradients after backward, not from its hooks")
    a("--bucket-cap-mb", type=float, default=25,
      help="kanel and ddp: gradient buckets' size in MiB, as DDP's (25)")
    a("--api", choices=("optimizer", "ddp"), default="optimizer",
      help="kanel.torch.DistributedOptimizer or its "
           "DistributedDataParallel (optimizer)")
    a("--backend", choices=("kanel", "ddp"), default="kanel",
      help="kanel, or PyTorch's own DistributedDataParallel over gloo "
           "with the same model, data, optimizer and injection: the "
           "baseline (kanel)")
    a("--imbalance", default="none", help="an imbalance model of kanel "
      "train: a worker of factor f sleeps (f - 1) times its step's "
      "compute after it (none)")
    a("--seed", type=int, default=1, help="model, data order and "
      "imbalance seed (1)")
    a("--target-accuracy", type=float, default=0.88,
      help="the accuracy whose time is reported (0.88)")
    a("--eval-every", type=float, default=5, help="seconds between "
      "evaluations (5)")
    a("--device", default="cpu", help="cpu, or cuda: each worker trains "
      "on GPU LOCAL_RANK modulo the GPUs there are, its tensors staged "
      "through pinned host memory (cpu)")
    a("--staging", action="store_true", help="stage CPU tensors through "
      "host buffers as CUDA ones are (to try that path without a GPU)")
    a("--data", default=DATA, help=f"the dataset's folder ({DATA})")
    a("--summary-json", help="write the summary here (rank 0)")
    return p.parse_args(argv)


# ---- data and model ----------------------------------------------------

def idx(path):
    """An IDX file (gzip) as a uint8 array of its shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\0\0" or raw[2] != 8:
        raise ValueError(f"{path}: not an IDX file of bytes")
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
                  for i in range(dims))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder, part):
    x = idx(os.path.join(folder, f"{part}-images-idx3-ubyte.gz"))
    y = idx(os.path.join(folder, f"{part}-labels-idx1-ubyte.gz"))
    x = (x.astype(np.float32) / 255 - 0.2860) / 0.3530
    return x.reshape(-1, 1, 28, 28), y.astype(np.int64)


def cnn(nn, kind="cnn"):
    if kind == "wide":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(),
            nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10))


def accuracy(torch, model, x, y, device="cpu"):
    with torch.no_grad():
        right = 0
        for i in range(0, len(x), 1000):
            out = model(torch.from_numpy(x[i:i + 1000]).to(device))
            right += int((out.argmax(1).cpu().numpy() ==
                          y[i:i + 1000]).sum())
    return right / len(x)


# ---- one worker ----------------------------------------------------------

class Evaluator(threading.Thread):
    """Rank 0's evaluations of global-model snapshots, off its training
    loop: (seconds, accuracy) per snapshot."""

    def __init__(self, torch, nn, x, y, kind):
        super().__init__(daemon=True)
        self.torch, self.model, self.x, self.y = torch, cnn(nn, kind), x, y
        self.todo, self.curve = queue.Queue(), []

    def run(self):
        while (job := self.todo.get()) is not None:
            t, state = job
            self.model.load_state_dict(state)
            self.curve.append((t, accuracy(self.torch, self.model,
                                          self.x, self.y)))


def worker(o):
    import torch
    from torch import nn

    import kanel
    import kanel.torch as kt

    torch.set_num_threads(1)
    torch.manual_seed(o.seed)
    device = torch.device("cpu")
    if o.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK",
                                   os.environ.get("KANEL_RANK", "0")))
        device = torch.device("cuda", local % torch.cuda.device_count())
    elif o.device != "cpu":
        sys.exit(f"torch example: --device {o.device}: cpu or cuda")
    model = cnn(nn, o.model).to(device)
    if o.optimizer == "adamw":
        inner = torch.optim.AdamW(model.parameters(), lr=o.lr,
                                  weight_decay=o.weight_decay)
    else:
        inner = torch.optim.SGD(model.parameters(), lr=o.lr,
                                momentum=o.momentum,
                                weight_decay=o.weight_decay)
    if o.backend == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        net = nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=o.bucket_cap_mb)
        opt, rank, n = inner, dist.get_rank(), dist.get_world_size()
        job_name = "ddp"

        def global_state():
            return {k: v.detach().clone() for k, v in
                    model.state_dict().items()}
        finish, close = (lambda: None), dist.destroy_process_group
    elif o.api == "ddp":
        net = kt.DistributedDataParallel(model,
                                         protocol=o.protocol.split(",")[0],
                                         bucket_cap_mb=o.bucket_cap_mb,
                                         staging=o.staging or None)
        opt, rank, n = inner, net.worker.rank, net.worker.size
        job_name = net.job.protocol
        global_state, finish, close = net.global_state, net.finish, \
            net.close
    else:
        opt = kt.DistributedOptimizer(inner, model.named_parameters(),
                                      protocol=o.protocol.split(",")[0],
                                      overlap=not o.no_overlap,
                                      bucket_cap_mb=o.bucket_cap_mb,
                                      staging=o.staging or None)
        kt.broadcast_parameters(model.state_dict(), opt)
        net, rank, n = model, opt.worker.rank, opt.worker.size
        job_name = opt.job.protocol
        global_state, finish, close = opt.global_state, opt.finish, \
            opt.close
    timings = getattr(net if o.api == "ddp" else opt, "timings", None)
    x, y = load(o.data, "train")
    x, y = x[rank::n], y[rank::n]
    tx, ty = load(o.data, "t10k")
    slow = kanel.Imbalance(o.imbalance, o.seed, n)
    rng = np.random.default_rng(o.seed * 1000 + rank)
    steps_per_epoch = len(x) // o.batch
    steps = int(o.epochs * steps_per_epoch)
    sched = None
    if o.schedule == "cosine":
        # over the run: its steps, or what the time budget lets this
        # worker make at its first epoch's pace is not known in advance,
        # so the steps of --epochs
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    ev = Evaluator(torch, nn, tx[:2000], ty[:2000], o.model) \
        if rank == 0 else None
    if ev:
        ev.start()
    start = time.monotonic()
    next_eval, waited, step, order = 0.0, 0.0, 0, None
    while step < steps:
        now = time.monotonic() - start
        stop = bool(o.time_budget and now >= o.time_budget)
        if o.backend == "ddp":
            # DDP's ranks must make the same all-reduces: they stop at
            # the same step, when the first of them runs out of time
            flag = torch.tensor([float(stop)])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = flag.item() > 0
        if stop:
            break
        if ev and now >= next_eval:
            ev.todo.put((now, global_state()))
            next_eval = now + o.eval_every
        if step % steps_per_epoch == 0:
            order = rng.permutation(len(x))
        pick = order[(step % steps_per_epoch) * o.batch:][:o.batch]
        t0 = time.monotonic()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(
            net(torch.from_numpy(x[pick]).to(device)),
            torch.from_numpy(y[pick]).to(device))
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the step's compute, done
        compute = time.monotonic() - t0
        f = slow.factor(rank, t0 - start)
        if f > 1:
            time.sleep((f - 1) * compute)
        t1 = time.monotonic()
        opt.step()
        if sched:
            sched.step()
        waited += time.monotonic() - t1
        step += 1
        if rank == 0 and step % 50 == 0:
            last = ev.curve[-1][1] if ev.curve else float("nan")
            print(f"\r[{now:7.1f} s] step {step}/{steps}, epoch "
                  f"{step / steps_per_epoch:.2f} | test accuracy "
                  f"{last:.4f} | loss {loss.item():.4f}", end="",
                  file=sys.stderr, flush=True)
    finish()
    elapsed = time.monotonic() - start
    if ev:
        ev.todo.put((elapsed, global_state()))
        ev.todo.put(None)
        ev.join()
        model.load_state_dict(global_state())
        final = accuracy(torch, model, tx, ty, device)
        report(o, job_name, n, ev.curve, final, step, elapsed, waited,
               timings() if timings else None)
    close()


def report(o, name, n, curve, final, steps, elapsed, waited, split):
    reach = next((t for t, a in curve if a >= o.target_accuracy), None)
    s = {
        "protocol": name, "imbalance": o.imbalance,
        "workers": n, "seed": o.seed, "target": o.target_accuracy,
        "time_to_target_s": reach,
        "best_accuracy": max(a for _, a in curve),
        "final_accuracy": final, "seconds": elapsed, "steps": steps,
        "batch": o.batch, "model": o.model, "optimizer": o.optimizer,
        "samples_per_s_rank0": steps * o.batch / elapsed,
        "wait_fraction_rank0": waited / elapsed,
        "device": o.device,
        "curve": curve,
    }
    if split:  # rank 0's seconds per step, by stage
        s["split_ms_per_step_rank0"] = {
            k: 1000 * v / max(steps, 1) for k, v in split.items()}
        s["split_ms_per_step_rank0"]["step"] = 1000 * elapsed / max(steps, 1)
    print(f"\nkanel torch example: {name}, {n} workers, imbalance "
          f"{o.imbalance}")
    print(f"  time to {o.target_accuracy:g} accuracy  " +
          (f"{reach:.2f} s" if reach is not None else "not reached"))
    print(f"  best accuracy          {s['best_accuracy']:.4f} (first 2,000 "
          "test images)")
    print(f"  final accuracy         {final:.4f} (all 10,000)")
    print(f"  rank 0                 {steps} steps in {elapsed:.1f} s, "
          f"{s['samples_per_s_rank0']:.0f} samples/s, waiting "
          f"{100 * s['wait_fraction_rank0']:.1f}%", flush=True)
    if split:
        ms = s["split_ms_per_step_rank0"]
        print(f"  rank 0 per step        {ms['step']:.2f} ms: waiting for "
              f"the exchange {ms['exchange']:.2f} ms, copies to the host "
              f"{ms['d2h']:.2f} ms, back {ms['h2d']:.2f} ms (copies on "
              "their own stream overlap the rest)", flush=True)
    if o.summary_json:
        with open(o.summary_json, "w") as f:
            json.dump(s, f, indent=1)


# ---- by hand: one kanel launch per protocol ---------------------------

def strip(argv, names):
    """@argv without the options @names and their values."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not a.startswith(tuple(n + "=" for n in names)):
            out.append(a)
    return out


def ddp_run(o, cmd):
    """PyTorch's DDP: the workers started as torchrun starts them (its
    variables, one process per rank), over gloo on loopback."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(o.workers):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), RANK=str(r), LOCAL_RANK=str(r),
                   WORLD_SIZE=str(o.workers),
                   LOCAL_WORLD_SIZE=str(o.workers))
        procs.append(subprocess.Popen(cmd, env=env))
    return max(p.wait() for p in procs)


def by_hand(o, argv):
    import kanel
    rows = []
    protocols = ["ddp"] if o.backend == "ddp" else o.protocol.split(",")
    opt = ["--optimizer", "momentum", "--lr", str(o.lr), "--momentum",
           str(o.momentum)] if o.server_optimizer else ["--optimizer",
                                                         "sum"]
    for p in protocols:
        with tempfile.NamedTemporaryFile(suffix=".json") as js:
            rest = strip(argv, ("--protocol", "--summary-json"))
            me = [sys.executable, os.path.abspath(__file__), *rest,
                  "--protocol", "bsp" if p == "ddp" else p,
                  "--summary-json", js.name]
            cmd = [kanel._kanel_command(), "launch", "--workers",
                   str(o.workers), "--servers", str(o.servers), "--sync", p,
                   *opt, "--", *me]
            print(f"torch example: {p} ...", file=sys.stderr, flush=True)
            rc = ddp_run(o, me) if p == "ddp" else subprocess.run(
                cmd).returncode
            if rc:
                print(f"torch example: the {p} run failed", file=sys.stderr)
                rows.append((p, None))
                continue
            with open(js.name) as f:
                rows.append((p, json.load(f)))
    if o.summary_json:  # the last run's summary (one protocol: its own)
        runs = [r for _, r in rows if r]
        if runs:
            with open(o.summary_json, "w") as f:
                json.dump(runs[-1] if len(runs) == 1 else runs, f)
    bsp = next((r["time_to_target_s"] for p, r in rows
                if r and r["protocol"] == "bsp"), None)
    print(f"\n| protocol | time to {o.target_accuracy:g} (s) | vs bsp | best "
          "| final | rank 0 samples/s |\n|---|---:|---:|---:|---:|---:|")
    for p, r in rows:
        if not r:
            print(f"| {p} | failed | | | | |")
            continue
        t = r["time_to_target_s"]
        ratio = f"{bsp / t:.2f}x" if bsp and t else "-"
        print(f"| {r['protocol']} | "
              f"{'not reached' if t is None else f'{t:.1f}'} | {ratio} | "
              f"{r['best_accuracy']:.4f} | {r['final_accuracy']:.4f} | "
              f"{r['samples_per_s_rank0']:.0f} |")
    return 0 if all(r for _, r in rows) else 1


def main(argv):
    o = options(argv)
    launched = any(k in os.environ for k in
                   ("KANEL_COORDINATOR", "MASTER_ADDR", "SLURM_PROCID",
                    "OMPI_COMM_WORLD_RANK"))
    if not launched:
        return by_hand(o, argv)
    worker(o)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
