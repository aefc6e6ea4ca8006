#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Kanel against PyTorch's DDP (gloo) from the torch example, over seeds:
runs examples/torch_fashion_mnist.py once per (setting, seed) and prints
each setting's median and range of time to the target, steps/s of rank
0, best and final accuracy, and the ratio of DDP's median time to each
setting's (docs/python.md, "Kanel against DDP").

    scripts/torch_compare.py --seeds 1,2,3 --out DIR -- \\
        ddp="--backend ddp" psp="--protocol psp" ... -- EXAMPLE_ARGS...

Each NAME="ARGS" is a setting: the example's arguments for it, added to
the common EXAMPLE_ARGS (every setting gets --seed S and its own
--summary-json).  A run already in DIR (NAME-S.json) is not run again,
so an interrupted sweep goes on where it stopped."""
import json
import os
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "torch_fashion_mnist.py")


def med(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return (f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
            if len(xs) > 1 else f"{xs[0]:.2f}")


def main(argv):
    seeds, out = [1, 2, 3], "torch-compare"
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--seeds":
            seeds = [int(s) for s in argv.pop(0).split(",")]
        elif flag == "--out":
            out = argv.pop(0)
        else:
            sys.exit(f"torch_compare: unknown option {flag}")
    if not argv:
        sys.exit(__doc__)
    argv.pop(0)
    settings = []
    while argv and argv[0] != "--":
        name, _, args = argv.pop(0).partition("=")
        settings.append((name, shlex.split(args)))
    common = argv[1:]
    os.makedirs(out, exist_ok=True)
    res = {}
    for s in seeds:
        for name, args in settings:
            js = os.path.join(out, f"{name}-{s}.json")
            if not os.path.exists(js):
                cmd = ["/usr/bin/python3", EXAMPLE, *common, *args,
                       "--seed", str(s), "--summary-json", js]
                print(f"torch_compare: {name} seed {s}: "
                      + " ".join(map(shlex.quote, cmd[1:])),
                      file=sys.stderr, flush=True)
                rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
                if rc or not os.path.exists(js):
                    print(f"torch_compare: {name} seed {s} failed",
                          file=sys.stderr)
                    continue
            with open(js) as f:
                res.setdefault(name, []).append(json.load(f))
    base = next((n for n, _ in settings if n.startswith("ddp")), None)
    tb = None
    if base and res.get(base):
        t = [r["time_to_target_s"] for r in res[base]
             if r["time_to_target_s"] is not None]
        tb = statistics.median(t) if t else None
    target = next(iter(res.values()))[0]["target"] if res else 0
    print(f"| setting | time to {target:g} (s) | vs {base or '-'} | reached "
          "| steps/s (rank 0) | best | final |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _ in settings:
        rs = res.get(name, [])
        times = [r["time_to_target_s"] for r in rs]
        got = [t for t in times if t is not None]
        ratio = f"{tb / statistics.median(got):.2f}x" if tb and got else "-"
        sps = [r["steps"] / r["seconds"] for r in rs]
        print(f"| {name} | {med(times)} | {ratio} | {len(got)}/{len(rs)} | "
              f"{med(sps)} | {med([r['best_accuracy'] for r in rs])} | "
              f"{med([r['final_accuracy'] for r in rs])} |")
    for name, _ in settings:
        per = ", ".join("-" if r["time_to_target_s"] is None else
                        f"{r['time_to_target_s']:.1f}"
                        for r in res.get(name, []))
        print(f"{name}: time to target per seed {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
