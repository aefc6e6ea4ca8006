# SPDX-License-Identifier: Apache-2.0
"""The script's own optimizer trains the model (kanel.torch under the
job's default --optimizer auto, which its workers make sum): under BSP two workers end with the parameters of one
process trained on their combined batch, whichever way the gradients go
(hooks during backward, after backward, the DDP drop-in); under every
protocol a learning rate set by a scheduler is the one that moves the
model; a push starts before backward ends."""
import os
import sys

import pytest
import torch

from conftest import HERE, explain, launch, lines

sys.path.insert(0, os.path.join(HERE, "jobs"))
import script_opt  # noqa: E402

STEPS = 20


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
    got = torch.load(out)
    want = script_opt.reference(kind, STEPS)
    init = script_opt.model().state_dict()
    assert rel_err(got, want) < 1e-5
    # it trained: the parameters moved far beyond that tolerance
    assert min((want[k] - init[k]).abs().max().item() for k in want) > 1e-2


def test_overlap_is_bit_identical(tmp_path):
    res = [launch("script_opt.py", "adamw", STEPS, tmp_path / f"{w}.pt", w,
                  workers=2)
           for w in ("opt", "noverlap")]
    for r in res:
        assert r.returncode == 0, explain(r)
    a, b = (torch.load(tmp_path / f"{w}.pt") for w in ("opt", "noverlap"))
    for k in a:
        assert torch.equal(a[k], b[k]), k


# One worker under the asynchronous protocols: with two, the other
# worker's deltas of its steps before the change still land after it.
@pytest.mark.parametrize("sync,workers", [
    ("bsp", 2), ("asp", 1), ("ssp", 1), ("cgp", 1), ("cgp", 2),
    ("esp", 1), ("predicted", 1)])
def test_scheduled_rate_reaches_the_update(sync, workers, tmp_path):
    out = tmp_path / "lr.pt"
    res = launch("script_opt.py", "sgd", STEPS, out, "lrzero",
                 workers=workers, sync=sync)
    assert res.returncode == 0, explain(res)
    d = torch.load(out)
    init = script_opt.model().state_dict()
    for k in d["end"]:
        # trained while the rate was up, not at all once it was 0
        assert (d["half"][k] - init[k]).abs().max() > 1e-3, k
        assert torch.allclose(d["end"][k], d["half"][k], rtol=1e-6,
                              atol=1e-7), k


def test_push_starts_before_backward_ends():
    res = launch("overlap_order.py", workers=2)
    assert res.returncode == 0, explain(res)
    out = lines(res.stdout, "order ")
    assert len(out) == 2, explain(res)
    for o in out:
        # pushes posted before the first layer's backward ran (the last
        # part of backward), and every parameter pushed once
        assert int(o[2]) >= 1, explain(res)
        assert int(o[3]) == int(o[4]), explain(res)


def test_explicit_sum_is_the_same(tmp_path):
    res = launch("script_opt.py", "sgd", STEPS, tmp_path / "p.pt", "opt",
                 workers=2, options=["--optimizer", "sum"])
    assert res.returncode == 0, explain(res)
    assert rel_err(torch.load(tmp_path / "p.pt"),
                   script_opt.reference("sgd", STEPS)) < 1e-5


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
