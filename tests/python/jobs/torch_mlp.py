# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer with a real torch.nn model: an MLP on a
synthetic two-class task for STEPS steps.  Each worker prints its first
and last training loss and a checksum of its global model (equal on
every worker under BSP).  Arguments: STEPS [set_to_none]."""
import os
import sys

import torch
from torch import nn

import kanel.torch as kt
from jobout import say


steps = int(sys.argv[1])
to_none = len(sys.argv) > 2 and sys.argv[2] == "set_to_none"
torch.set_num_threads(1)
torch.manual_seed(1234 + int(os.environ["KANEL_RANK"]))
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
opt = kt.DistributedOptimizer(inner, model.named_parameters())
kt.broadcast_parameters(model.state_dict())
w = opt.worker
g = torch.Generator().manual_seed(w.rank)
center = torch.linspace(-1, 1, 8)
losses = []
for _ in range(steps):
    x = torch.randn(64, 8, generator=g)
    y = (x @ center > 0).long()
    opt.zero_grad(set_to_none=to_none)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
opt.finish()
state = opt.global_state()
total = sum(float(t.double().sum()) for t in state.values())
say(f"torch {w.rank} {w.job.protocol} {losses[0]:.4f} "
      f"{sum(losses[-10:]) / 10:.4f} {total!r}")
opt.close()
