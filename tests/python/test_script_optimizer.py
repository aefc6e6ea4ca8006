# SPDX-License-Identifier: Apache-2.0
"""The script's own optimizer trains the model (kanel.torch under the
job's default --optimizer auto, which its workers make sum): under BSP two workers end with the parameters of one
process trained on their combined batch, whichever way the gradients go
(hooks during backward, after backward, the DDP drop-in); under every
protocol a learning rate set by a scheduler is the one that moves the
model; a push starts before backward ends."""
import os
import sys

import subprocess

import pytest
import torch

from conftest import HERE, PYTHON, assert_push_order, explain, launch

sys.path.insert(0, os.path.join(HERE, "jobs"))
import script_opt  # noqa: E402

STEPS = 20
_runs = {}  # (kind, way) -> parameters, for the tests that compare runs


def torch_ddp(kind, steps, out):
    """The same script under PyTorch's DDP (gloo, two processes with
    torchrun's variables): its rank 0's parameters."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # PyTorch alone: a sanitizer build's preloaded ASan runtime is not
    # for it (gloo's C++ exceptions, thrown while a rank waits for the
    # other, trip ASan's __cxa_throw interceptor in an uninstrumented
    # process)
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    procs = [subprocess.Popen(
        [PYTHON, os.path.join(HERE, "jobs", "script_opt.py"), kind,
         str(steps), str(out), "torchddp"],
        env=dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                 KANEL_RANK=str(r)),
        stderr=subprocess.PIPE, text=True) for r in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    return torch.load(out)


def rel_err(got, want):
    return max(((got[k] - want[k]).abs().max() /
                want[k].abs().max()).item() for k in want)


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
@pytest.mark.parametrize("way", ["opt", "noverlap", "ddp"])
def test_bsp_matches_one_process(kind, way, tmp_path):
    out = tmp_path / "params.pt"
    # the job's default --optimizer (auto): the script's optimizer
    res = launch("script_opt.py", kind, STEPS, out, way, workers=2)
    assert res.returncode == 0, explain(res)
    got = _runs[kind, way] = torch.load(out)
    want = script_opt.reference(kind, STEPS)
    init = script_opt.model().state_dict()
    assert rel_err(got, want) < 1e-5
    # it trained: the parameters moved far beyond that tolerance
    assert min((want[k] - init[k]).abs().max().item() for k in want) > 1e-2


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_bsp_matches_pytorch_ddp(kind, tmp_path):
    want = torch_ddp(kind, STEPS, tmp_path / "ddp.pt")
    got = _runs.get((kind, "ddp"))
    if got is None:
        res = launch("script_opt.py", kind, STEPS, tmp_path / "k.pt", "ddp",
                     workers=2)
        assert res.returncode == 0, explain(res)
        got = torch.load(tmp_path / "k.pt")
    assert rel_err(got, want) < 1e-5


def test_overlap_is_bit_identical(tmp_path):
    for way in ("opt", "noverlap"):
        if ("adamw", way) not in _runs:
            res = launch("script_opt.py", "adamw", STEPS,
                         tmp_path / f"{way}.pt", way, workers=2)
            assert res.returncode == 0, explain(res)
            _runs["adamw", way] = torch.load(tmp_path / f"{way}.pt")
    a, b = _runs["adamw", "opt"], _runs["adamw", "noverlap"]
    for k in a:
        assert torch.equal(a[k], b[k]), k


# One worker under the asynchronous protocols: with two, the other
# worker's deltas of its steps before the change still land after it.
# BSP with --optimizer sum named: the same as the default for kanel.torch.
@pytest.mark.parametrize("sync,workers", [
    ("bsp", 2), ("asp", 1), ("ssp", 1), ("cgp", 1), ("cgp", 2),
    ("esp", 1), ("predicted", 1)])
def test_scheduled_rate_reaches_the_update(sync, workers, tmp_path):
    out = tmp_path / "lr.pt"
    # CGP with 2: one group throughout, so that no delta of a step
    # before the change lands after it: a bound below 1 admits no split
    # (any split's tau is at least 1), and no regroup check in 20 steps
    opts = {"bsp": ["--optimizer", "sum"],
            "cgp": ["--cgp-period", "1000",
                    "--cgp-bound", "0.5"]}.get(sync, [])
    res = launch("script_opt.py", "sgd", STEPS, out, "lrzero",
                 workers=workers, sync=sync, options=opts)
    assert res.returncode == 0, explain(res)
    d = torch.load(out)
    init = script_opt.model().state_dict()
    for k in d["end"]:
        # trained while the rate was up, not at all once it was 0
        assert (d["half"][k] - init[k]).abs().max() > 1e-3, k
        assert torch.allclose(d["end"][k], d["half"][k], rtol=1e-6,
                              atol=1e-7), k


def test_push_starts_before_backward_ends():
    assert_push_order()


def test_servers_optimizer_is_named():
    res = launch("script_opt.py", "sgd", 5, "/dev/null", "opt", workers=1,
                 options=["--optimizer", "momentum"])
    assert res.returncode == 0, explain(res)
    assert "does not step" in res.stderr
    assert "--optimizer sum" in res.stderr


def test_ddp_refuses_the_servers_optimizer():
    res = launch("script_opt.py", "sgd", 5, "/dev/null", "ddp", workers=1,
                 options=["--optimizer", "momentum"])
    assert res.returncode != 0
    assert "keeps the script's optimizer" in res.stderr
