# SPDX-License-Identifier: Apache-2.0
"""A script's own optimizer under Kanel, against the same script in one
process.  Imported by the tests for the reference run, and started by
`kanel launch` as a worker:

    script_opt.py KIND STEPS OUT [WAY]

KIND: sgd (momentum, Nesterov, weight decay) or adamw (two parameter
groups); a StepLR schedule and clip_grad_norm_ in both.  Each of the n
workers trains on its slice of a combined batch of 64; rank 0 saves its
parameters to OUT after STEPS steps.  WAY: opt (DistributedOptimizer,
gradients pushed from backward hooks), noverlap (the same, pushed after
backward), ddp (kanel.torch.DistributedDataParallel), torchddp
(PyTorch's own DDP over gloo, started with torchrun's variables, not by
kanel launch), lrzero (KIND's
optimizer with a schedule that sets the rate to 0 from step STEPS/2 on;
OUT gets the parameters at STEPS/2 and at the end)."""
import os
import sys

import torch
from torch import nn

BATCH = 64


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def batches(steps):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, BATCH, 8, generator=g)
    y = torch.randint(0, 4, (steps, BATCH), generator=g)
    return x, y


def optimizer(kind, m):
    if kind == "sgd":
        return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9,
                               nesterov=True, weight_decay=1e-3)
    weights = [p for n, p in m.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in m.named_parameters() if n.endswith("bias")]
    return torch.optim.AdamW([{"params": weights, "lr": 1e-2},
                              {"params": biases, "lr": 5e-3,
                               "weight_decay": 0.0}], weight_decay=0.05)


def reference(kind, steps):
    """The one-process run on the combined batch: the parameters."""
    torch.set_num_threads(1)
    m = model()
    opt = optimizer(kind, m)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    x, y = batches(steps)
    for s in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x[s]), y[s]).backward()
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
    return {k: v.clone() for k, v in m.state_dict().items()}


def worker(kind, steps, out, way):
    torch.set_num_threads(1)
    m = model()
    if os.environ.get("KANEL_RANK", "0") != "0":
        with torch.no_grad():  # the start must hand out rank 0's model
            for p in m.parameters():
                p.add_(torch.randn_like(p))
    opt = optimizer(kind, m)

    def schedule(opt):
        if way == "lrzero":
            return torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: 1.0 if s < steps // 2 else 0.0)
        return torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    if way in ("ddp", "torchddp"):
        sched = schedule(opt)
    if way == "torchddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        net = nn.parallel.DistributedDataParallel(m)
        n, r = dist.get_world_size(), dist.get_rank()
        ender = None
    elif way == "ddp":
        import kanel.torch as kt
        net = kt.DistributedDataParallel(m)
        n, r = net.worker.size, net.worker.rank
        ender = net
    else:
        import kanel.torch as kt
        opt = kt.DistributedOptimizer(opt, m.named_parameters(),
                                      overlap=way != "noverlap")
        kt.broadcast_parameters(m.state_dict(), opt)
        sched = schedule(opt)  # on the wrapper, as Horovod's users do
        net, ender = m, opt
        n, r = opt.worker.size, opt.worker.rank
    x, y = batches(steps)
    per = BATCH // n
    half = None
    for s in range(steps):
        if way == "lrzero" and s == steps // 2:
            half = {k: v.clone() for k, v in m.state_dict().items()}
        xs, ys = x[s][r * per:(r + 1) * per], y[s][r * per:(r + 1) * per]
        opt.zero_grad()
        nn.functional.cross_entropy(net(xs), ys).backward()
        if way not in ("ddp", "torchddp"):
            opt.synchronize()  # the mean gradient, before clipping
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
    if ender:
        ender.finish()
    if r == 0:
        state = {k: v.clone() for k, v in m.state_dict().items()}
        torch.save({"half": half, "end": state} if way == "lrzero"
                   else state, out)
    if ender:
        ender.close()
    else:
        dist.destroy_process_group()


if __name__ == "__main__":
    worker(sys.argv[1], int(sys.argv[2]), sys.argv[3],
           sys.argv[4] if len(sys.argv) > 4 else "opt")
