# SPDX-License-Identifier: Apache-2.0
"""Every protocol trains a tiny model to 0.9 through Worker.step_done,
and a DistributedOptimizer trains a torch.nn model under each."""
import pytest

from conftest import explain, launch, lines

PROTOCOLS = ["bsp", "asp", "ssp", "esp", "predicted", "psp", "cgp"]


@pytest.mark.parametrize("sync", PROTOCOLS)
def test_tiny_model_converges(sync):
    res = launch("tiny.py", 300, workers=4, servers=2, sync=sync,
                 options=["--optimizer", "momentum", "--lr", "0.5"])
    acc = lines(res.stdout, "accuracy ")
    assert res.returncode == 0, explain(res)
    assert len(acc) == 4
    for a in acc:
        assert float(a[2]) >= 0.9
        assert a[3] == ("predicted" if sync == "psp" else sync)


@pytest.mark.parametrize("sync", ["bsp", "asp", "ssp", "esp", "predicted",
                                  "cgp"])
def test_distributed_optimizer_trains(sync):
    # the job's default: the script's SGD with momentum steps
    res = launch("torch_mlp.py", 60, workers=2, sync=sync)
    assert res.returncode == 0, explain(res)
    out = lines(res.stdout, "torch ")
    assert len(out) == 2, explain(res)
    for o in out:
        first, last = float(o[3]), float(o[4])
        assert last < 0.7 * first, explain(res)
    if sync == "bsp":  # one model: the same on every worker
        assert out[0][5] == out[1][5], explain(res)
    assert "does not step" not in res.stderr
    # a normal end is quiet: a server's close after a worker finished
    # is the job's end, not a loss
    assert "lost" not in res.stderr, explain(res)
    assert "the job ended" not in res.stderr, explain(res)


def test_gradients_set_to_none_still_exchanged():
    # pushed from the hooks, which copy a fresh p.grad into ours
    res = launch("torch_mlp.py", 40, "set_to_none", workers=2, sync="bsp")
    assert res.returncode == 0, explain(res)
    out = lines(res.stdout, "torch ")
    assert out[0][5] == out[1][5]
    assert float(out[0][4]) < 0.7 * float(out[0][3])


def test_mismatched_optimizer_is_named():
    res = launch("torch_mlp.py", 5, workers=1, sync="bsp",
                 options=["--optimizer", "sgd", "--lr", "0.01"])
    assert res.returncode == 0, explain(res)
    assert "the wrapped SGD does not step" in res.stderr


def test_the_example_ends_quietly():
    # the PyTorch example as a user starts it, by hand (it runs kanel
    # launch itself): a normal end prints its table and no loss line
    import os
    import subprocess
    from conftest import HERE, PYTHON
    example = os.path.join(HERE, "..", "..", "examples",
                           "torch_fashion_mnist.py")
    if not os.path.exists("/usr/share/datasets/fashion-mnist"):
        pytest.fail("the dataset is missing (dataset-fashion-mnist)")
    res = subprocess.run([PYTHON, example, "--workers", "2", "--epochs",
                          "0.02", "--protocol", "bsp,asp", "--eval-every",
                          "100"], capture_output=True, text=True,
                         timeout=180)
    assert res.returncode == 0, explain(res)
    assert "| bsp |" in res.stdout and "| asp |" in res.stdout, \
        explain(res)
    assert "lost" not in res.stderr, explain(res)
    assert "the job ended" not in res.stderr, explain(res)
