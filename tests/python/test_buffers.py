# SPDX-License-Identifier: Apache-2.0
"""Registration: the program's own memory, checked, and refused with the
right exception; one BSP step equal to the value computed by hand."""
import array

import numpy as np
import pytest
import torch

import kanel
from conftest import explain, launch, lines


def buf(obj):
    return kanel._Buffer(obj, "t")


def test_numpy_and_torch_are_their_own_memory():
    a = np.zeros(10, dtype=np.float32)
    assert buf(a).addr == a.ctypes.data
    t = torch.zeros(10, dtype=torch.bfloat16)
    b = buf(t)
    assert (b.addr, b.dtype, b.count) == (t.data_ptr(), 2, 10)
    h = array.array("f", [0.0] * 6)
    assert buf(h).count == 6


@pytest.mark.parametrize("obj,exc", [
    (np.zeros(10, dtype=np.float64), TypeError),
    (np.zeros(10, dtype=np.int32), TypeError),
    (np.zeros((4, 4), dtype=np.float32)[:, 1], ValueError),
    (torch.zeros(10, dtype=torch.float64), TypeError),
    (torch.zeros(4, 4).t(), ValueError),
    (array.array("d", [0.0]), TypeError),
    (b"\0" * 16, TypeError),  # format 'B'
    ("a string", TypeError),
    (3.5, TypeError),
])
def test_bad_buffers_raise(obj, exc):
    with pytest.raises(exc):
        buf(obj)


def test_read_only_array_refused():
    a = np.zeros(4, dtype=np.float32)
    a.setflags(write=False)
    with pytest.raises(ValueError):
        buf(a)


def test_moved_tensor_detected():
    t = torch.zeros(8)
    b = buf(t)
    t.data = torch.ones(8)  # a new storage under the same tensor
    with pytest.raises(ValueError, match="moved"):
        b.check()


def test_bad_options_raise_error_with_the_engine_reason():
    with pytest.raises(kanel.Error) as e:
        kanel.Worker(coordinator="not an address", rank=0, timeout_ms=200)
    assert e.value.errno > 0
    assert e.value.engine_message  # the engine said why


def test_unknown_imbalance_is_a_value_error():
    with pytest.raises(ValueError, match="persistent"):
        kanel.Imbalance("persistent:2:4", 1, 8)
    assert str(kanel.Imbalance("persistent", 1, 8)) == "persistent:0.25:4"


def test_bsp_step_equals_the_hand_computed_one():
    res = launch("exact.py", workers=2, sync="bsp",
                 options=["--optimizer", "sgd", "--lr", "0.5"])
    assert res.returncode == 0, explain(res)
    ok = lines(res.stdout, "ok ")
    assert sorted(l[1] for l in ok) == ["0", "1"], explain(res)
    assert all(l[2:5] == ["bsp", "sgd", "0.5"] for l in ok)


def test_three_workers_two_servers():
    res = launch("exact.py", workers=3, servers=2, sync="bsp",
                 options=["--optimizer", "sgd", "--lr", "0.25"])
    assert res.returncode == 0, explain(res)
    assert len(lines(res.stdout, "ok ")) == 3


def test_the_gil_is_free_while_the_engine_waits():
    res = launch("gil.py", workers=2, sync="bsp")
    assert res.returncode == 0, explain(res)
    (line,) = lines(res.stdout, "gil ")
    took, counted = float(line[1]), int(line[2])
    assert took > 0.5, explain(res)  # it did wait for rank 1
    # a thread that never got the GIL back would count nothing; a
    # Python loop counts millions a second
    assert counted > 100000, explain(res)
