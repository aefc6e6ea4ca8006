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
OUT gets the parameters at STEPS/2 and at the end).  A WAY ending in
"-staged" (opt-staged, noverlap-staged, ddp-staged) stages the CPU
parameters through host buffers as CUDA ones are (staging=True), and
checks at every push that the host's gradient is the step's.  KIND
bf16: momentum SGD on the model in bfloat16 (no reference run)."""
import os
import sys

import torch
from torch import nn

BATCH = 64


def model(kind="sgd"):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    return m.to(torch.bfloat16) if kind == "bf16" else m


def batches(steps):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, BATCH, 8, generator=g)
    y = torch.randint(0, 4, (steps, BATCH), generator=g)
    return x, y


def optimizer(kind, m):
    if kind == "bf16":
        return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
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


def check_pushes(x):
    """Every push of a staged worker reads the step's gradient: the
    host's copy equals p.grad when the push is posted, so no push
    starts before its bucket's copy is complete."""
    push, checked = x.worker.push, []

    def checking(name):
        i = [n for n, _, _ in x._params].index(name)
        _, p, g = x._params[i]
        if not torch.equal(g, p.grad):
            raise AssertionError(f"{name} pushed before its copy")
        checked.append(name)
        return push(name)
    x.worker.push = checking
    return checked


def worker(kind, steps, out, way):
    torch.set_num_threads(1)
    staged = way.endswith("-staged")
    way = way[:-len("-staged")] if staged else way
    m = model(kind)
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
        net = kt.DistributedDataParallel(m, staging=staged or None)
        n, r = net.worker.size, net.worker.rank
        ender, xch = net, net._x
    else:
        import kanel.torch as kt
        opt = kt.DistributedOptimizer(opt, m.named_parameters(),
                                      overlap=way != "noverlap",
                                      staging=staged or None)
        xch = opt._x
        kt.broadcast_parameters(m.state_dict(), opt)
        sched = schedule(opt)  # on the wrapper, as Horovod's users do
        net, ender = m, opt
        n, r = opt.worker.size, opt.worker.rank
    # bucket pushes: under BSP with the overlap (otherwise step_done
    # pushes, after every copy is done)
    checked = check_pushes(xch) if staged and xch.overlap else None
    x, y = batches(steps)
    if kind == "bf16":
        x = x.to(torch.bfloat16)
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
    if checked is not None and len(checked) < steps * len(list(
            m.parameters())):
        raise AssertionError(f"{len(checked)} pushes checked")
    if staged and not xch.job.local_steps:
        # the model to evaluate is the one trained
        g = ender.global_state()
        for k, v in m.state_dict().items():
            if not torch.equal(g[k], v):
                raise AssertionError(f"global_state()[{k!r}] is stale")
    elif staged:
        # ESP, PSP: finish() merged the last global model into the
        # host's copy, and the device has it
        for i, (k, p, _) in enumerate(xch._params):
            if not torch.equal(xch.stage.data[i], p.data):
                raise AssertionError(f"{k}: the merge did not reach it")
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
