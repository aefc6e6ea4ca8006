# SPDX-License-Identifier: Apache-2.0
"""Staging through host memory, as CUDA parameters take it, run on CPU
parameters (staging=True) so that a machine without a GPU exercises
everything but the CUDA calls: the buckets' host buffers, the copies,
their order against the pushes, and what comes back.  A staged job ends
with the very parameters of the same job unstaged."""
import os
import sys

import pytest
import torch

from conftest import HERE, assert_push_order, explain, launch

sys.path.insert(0, os.path.join(HERE, "jobs"))
import kanel.torch as kt  # noqa: E402

STEPS = 20


def run(tmp_path, kind, way, workers=2, sync="bsp"):
    out = tmp_path / f"{kind}-{way}-{sync}.pt"
    res = launch("script_opt.py", kind, STEPS, out, way, workers=workers,
                 sync=sync)
    assert res.returncode == 0, explain(res)
    return torch.load(out)


def identical(a, b):
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert torch.equal(a[k], b[k]), k


# BSP: the mean gradient comes back through the host buffers, pushed
# from the hooks (opt), after backward (noverlap) or by the drop-in
# (ddp); bf16 stays 16-bit on the wire and in the host buffers.
@pytest.mark.parametrize("kind,way", [
    ("sgd", "opt"), ("sgd", "ddp"), ("bf16", "opt"), ("adamw", "noverlap")])
def test_staged_bsp_is_bit_identical(kind, way, tmp_path):
    identical(run(tmp_path, kind, way),
              run(tmp_path, kind, way + "-staged"))


# The script's optimizer steps the device model; its delta goes through
# the host and the model the engine leaves there comes back (one
# worker: ASP's and SSP's runs are deterministic).
@pytest.mark.parametrize("sync", ["asp", "ssp"])
def test_staged_deltas_are_bit_identical(sync, tmp_path):
    identical(run(tmp_path, "adamw", "opt", workers=1, sync=sync),
              run(tmp_path, "adamw", "opt-staged", workers=1, sync=sync))


# PSP's local steps follow its planner, which hears step times, so two
# runs differ; staged, it trains, and the job checks that the model it
# ends on is the global one (script_opt.py).
def test_staged_local_steps_train(tmp_path):
    import script_opt
    got = run(tmp_path, "adamw", "opt-staged", workers=2, sync="predicted")
    init = script_opt.model().state_dict()
    assert min((got[k] - init[k]).abs().max().item() for k in got) > 1e-2


def test_staged_push_follows_its_copy_and_precedes_backwards_end():
    assert_push_order("staged")


def test_cuda_parameter_without_cuda_is_named():
    dev = torch.device("cuda", 0)
    if torch.cuda.is_available():
        kt._check_device("w", dev)  # taken where CUDA is
        return
    with pytest.raises(ValueError, match="sees no CUDA device"):
        kt._check_device("w", dev)


def test_other_devices_are_refused_before_joining():
    # refused before any worker is made: no launcher needed
    p = torch.nn.Parameter(torch.empty(4, device="meta"))
    with pytest.raises(ValueError, match="'w' is on meta"):
        kt.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), [("w", p)])
    m = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="device_ids names cuda:0"):
        kt.DistributedDataParallel(m, device_ids=[0])
