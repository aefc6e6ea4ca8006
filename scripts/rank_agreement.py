#!/usr/bin/python3
"""Compares two rankings of the protocols: real training's and the simulator's.

    rank_agreement.py --real DIR [DIR ...] --sim DIR

--real takes `kanel compare --out` folders (their run-*.json), --sim a
folder of `kanel sim --summary-json` files run with --target-loss.  Both
hold one JSON per protocol, imbalance and seed, with `protocol`,
`imbalance`, `seed` and `time_to_target_s` (null: never reached, ranked
last).  Where several --real folders hold the same protocol and
imbalance, the first one's runs are taken.

Per imbalance it prints each side's order, fastest first, by the median
time over the seeds, with the range.  Medians alone would rank noise, so
the agreement is counted over the pairs that one side separates: A
before B when A's slowest seed is faster than B's fastest.  For each
pair that real training separates, the simulator agrees when its median
orders the two the same way; and the other way round.  The last line is
the total over all imbalances.
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

ORDER = ["bsp", "asp", "ssp", "esp", "predicted", "cgp"]


def load(folders, pattern):
    """{imbalance: {protocol: [times]}} from the JSON files of folders."""
    times, source = {}, {}
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, pattern))):
            with open(path) as f:
                run = json.load(f)
            t = run.get("time_to_target_s")
            key = (run["imbalance"], run["protocol"])
            if source.setdefault(key, folder) != folder:
                continue
            times.setdefault(key[0], {}).setdefault(key[1], []).append(
                math.inf if t is None else float(t))
    return times


def describe(ts):
    med = statistics.median(ts)
    return "%.2f (%.2f-%.2f)" % (med, min(ts), max(ts))


def separated(side):
    """The pairs (a, b) whose ranges do not overlap, a the faster."""
    return [(a, b) for a in side for b in side
            if a != b and max(side[a]) < min(side[b])]


def agree(pairs, other):
    med = {p: statistics.median(ts) for p, ts in other.items()}
    return sum(1 for a, b in pairs if med[a] < med[b])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real", nargs="+", required=True)
    ap.add_argument("--sim", required=True)
    args = ap.parse_args()
    real = load(args.real, "run-*.json")
    sim = load([args.sim], "*.json")
    total = [0, 0, 0, 0]
    for imb in real:
        if imb not in sim:
            print("%s: not in the simulator's runs" % imb, file=sys.stderr)
            continue
        protos = [p for p in ORDER if p in real[imb] and p in sim[imb]]
        r = {p: real[imb][p] for p in protos}
        s = {p: sim[imb][p] for p in protos}
        print(imb)
        for name, side in (("real", r), ("sim", s)):
            order = sorted(protos, key=lambda p: statistics.median(side[p]))
            print("  %-4s %s" % (name, "; ".join(
                "%s %s" % (p, describe(side[p])) for p in order)))
        rs, ss = separated(r), separated(s)
        ra, sa = agree(rs, s), agree(ss, r)
        print("  real separates %d pairs, the simulator orders %d of them "
              "the same way" % (len(rs), ra))
        print("  the simulator separates %d pairs, real training orders "
              "%d of them the same way" % (len(ss), sa))
        for a, b in rs:
            if statistics.median(s[a]) >= statistics.median(s[b]):
                print("    real: %s before %s; the simulator: not" % (a, b))
        for a, b in ss:
            if statistics.median(r[a]) >= statistics.median(r[b]):
                print("    simulator: %s before %s; real: not" % (a, b))
        total = [x + y for x, y in zip(total, (len(rs), ra, len(ss), sa))]
    print("all: the simulator agrees on %d of the %d pairs real training "
          "separates; real training on %d of the %d the simulator "
          "separates" % (total[1], total[0], total[3], total[2]))


if __name__ == "__main__":
    main()
