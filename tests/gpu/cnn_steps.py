# SPDX-License-Identifier: Apache-2.0
"""The example CNN for 20 steps under a Kanel job (tests/gpu/check.sh):

    cnn_steps.py --device cuda|cpu [--staging] --data DIR --out FILE
    cnn_steps.py --compare GOT.pt WANT.pt

Each of the job's workers trains the example's CNN with momentum SGD on
its half of fixed batches of 128 Fashion-MNIST images; rank 0 saves its
parameters (on the CPU) to FILE.  TF32 and nondeterministic convolution
algorithms are off, so that a GPU's sums differ from the CPU's by float
rounding only.  --compare prints each tensor's largest difference
relative to the tensor's largest value, and exits 1 above 1e-5."""
import argparse
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, BATCH, TOL = 20, 128, 1e-5


def example():
    path = os.path.join(HERE, "..", "..", "examples",
                        "torch_fashion_mnist.py")
    spec = importlib.util.spec_from_file_location("example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compare(got, want):
    a, b = torch.load(got), torch.load(want)
    worst = 0.0
    for k in b:
        rel = ((a[k] - b[k]).abs().max() / b[k].abs().max()).item()
        worst = max(worst, rel)
        print(f"  {k:12} {rel:.2e}")
    ok = worst <= TOL
    print(f"cnn_steps: largest relative difference {worst:.2e}: "
          f"{'within' if ok else 'ABOVE'} {TOL:g}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--staging", action="store_true")
    p.add_argument("--data", default=None)
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2)
    o = p.parse_args()
    if o.compare:
        return compare(*o.compare)
    import kanel.torch as kt
    ex = example()
    torch.set_num_threads(1)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0) if o.device == "cuda" else \
        torch.device("cpu")
    torch.manual_seed(1)
    model = ex.cnn(torch.nn).to(dev)
    opt = kt.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        model.named_parameters(), staging=o.staging or None)
    kt.broadcast_parameters(model.state_dict(), opt)
    x, y = ex.load(o.data or ex.DATA, "train")
    rank, n = opt.worker.rank, opt.worker.size
    per = BATCH // n
    for s in range(STEPS):
        lo = s * BATCH + rank * per
        xs = torch.from_numpy(x[lo:lo + per]).to(dev)
        ys = torch.from_numpy(y[lo:lo + per]).to(dev)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()
    opt.finish()
    if rank == 0:
        torch.save({k: v.detach().cpu() for k, v in
                    model.state_dict().items()}, o.out)
    opt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
