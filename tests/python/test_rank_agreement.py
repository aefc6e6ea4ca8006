# SPDX-License-Identifier: Apache-2.0
"""scripts/rank_agreement.py: the pairs each side separates, and whether
the other side's medians order them the same way."""
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "rank_agreement.py")
PYTHON = "/usr/bin/python3"


def write_runs(folder, name, imbalance, times):
    """One JSON per seed, as kanel compare (run-*) or kanel sim write."""
    os.makedirs(folder, exist_ok=True)
    for proto, ts in times.items():
        for seed, t in enumerate(ts, 1):
            path = os.path.join(folder, name % (proto, seed))
            with open(path, "w") as f:
                json.dump({"protocol": proto, "imbalance": imbalance,
                           "seed": seed, "time_to_target_s": t}, f)


def run(tmp_path, real, sim):
    for imb, times in real.items():
        write_runs(str(tmp_path / "real"), "run-%s-" + imb + "-seed%d.json",
                   imb, times)
    for imb, times in sim.items():
        write_runs(str(tmp_path / "sim"), "%s-" + imb + "-%d.json", imb,
                   times)
    out = subprocess.run([PYTHON, SCRIPT, "--real", str(tmp_path / "real"),
                          "--sim", str(tmp_path / "sim")],
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_agreeing_pairs_are_counted_and_overlaps_are_not(tmp_path):
    # real: ASP before BSP and before ESP; ESP and BSP overlap
    real = {"x": {"bsp": [10, 11, 12], "asp": [5, 6, 7],
                  "esp": [9, 10.5, 13]}}
    sim = {"x": {"bsp": [3, 3.1, 3.2], "asp": [1, 1.1, 1.2],
                 "esp": [2.0, 2.5, 3.5]}}
    out = run(tmp_path, real, sim)
    assert "real asp 6.00 (5.00-7.00); esp 10.50" in out
    assert "real separates 2 pairs, the simulator orders 2 of them" in out
    assert "the simulator separates 2 pairs, real training orders 2" in out
    assert out.rstrip().endswith(
        "agrees on 2 of the 2 pairs real training separates; real "
        "training on 2 of the 2 the simulator separates")


def test_a_reversed_pair_is_named_and_a_miss_ranks_last(tmp_path):
    real = {"y": {"bsp": [1, 1, 1], "cgp": [2, 2, 2],
                  "ssp": [None, None, 5]}}
    sim = {"y": {"bsp": [5, 5, 5], "cgp": [4, 4, 4], "ssp": [9, 9, 9]}}
    out = run(tmp_path, real, sim)
    assert "real: bsp before cgp; the simulator: not" in out
    assert "simulator: cgp before bsp; real: not" in out
    # never reached twice of three: its median is last, its range open
    assert "ssp inf (5.00-inf)" in out
    assert "agrees on 2 of the 3 pairs" in out
