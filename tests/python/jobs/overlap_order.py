# SPDX-License-Identifier: Apache-2.0
"""The overlap, observed: a three-layer model whose first layer logs
when its backward runs (the last part of backward); each worker prints
how many pushes were posted before that, and how many in all, for
three steps: "order RANK BEFORE PUSHED PARAMS".  With the argument
"staged", the CPU parameters are staged as CUDA ones are, and each push
must come after its bucket's copy was seen complete."""
import sys

import torch
from torch import nn

import kanel.torch as kt
from jobout import say


class Mark(torch.autograd.Function):
    """Identity; its backward logs into the trace."""

    @staticmethod
    def forward(ctx, x, trace):
        ctx.trace = trace
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.trace.append(("first layer backward", None))
        return g, None


torch.set_num_threads(1)
torch.manual_seed(0)
layers = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64),
                       nn.Tanh(), nn.Linear(64, 4))
# every parameter its own bucket: this model is far below DDP's 1 MiB
staged = sys.argv[1:] == ["staged"]
opt = kt.DistributedOptimizer(torch.optim.SGD(layers.parameters(), lr=0.1),
                              layers.named_parameters(), bucket_cap_mb=0,
                              staging=staged or None)
kt.broadcast_parameters(layers.state_dict(), opt)
w = opt.worker
trace = []
opt._x.trace = trace
x = torch.randn(16, 8)
y = torch.randint(0, 4, (16,))
for step in range(3):
    opt.zero_grad()
    trace.clear()
    h = layers[0](x)
    h = Mark.apply(h, trace)
    loss = nn.functional.cross_entropy(layers[1:](h), y)
    loss.backward()
    opt.step()
    if staged:  # every push after its own bucket's copy was seen done
        names = [n for n, _, _ in opt._x._params]
        seen = set()
        for e, what in trace:
            if e == "copied":  # what: the bucket
                seen.add(what)
            elif e == "push":
                assert opt._x._bucket_of[names.index(what)] in seen, \
                    (what, trace)
first = [e for e, _ in trace].index("first layer backward")
before = sum(1 for e, _ in trace[:first] if e == "push")
pushed = sum(1 for e, _ in trace if e == "push")
say(f"order {w.rank} {before} {pushed} {len(list(layers.parameters()))}")
opt.finish()
opt.close()
