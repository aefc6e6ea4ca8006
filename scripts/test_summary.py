#!/usr/bin/env python3
"""Count test results from meson test logs (meson-logs/testlog.json).

A Criterion executable is one meson test but many tests: its own
"Synthesis" line gives how many it ran, passed and failed, and its
--verbose output one "[SKIP]" line per skipped test.  The docs suite's
run_doc_commands.py is one meson test too, and its last line, "doc
commands: N passed, N failed, N skipped", counts each documented block.
A pytest run (the python suite) is one meson test too: its closing line
("N passed, N failed in 2.1s") counts each test, and a pytest skip
counts as a failure (a Python test that did not run, a missing module
say, must not pass unseen).  Any other meson test counts as one, by
meson's result.  A test binary that crashed or timed out
before its synthesis counts as one failure, and so does one whose output
holds a sanitizer report: a leak found as a forked Criterion test exits
does not change that test's verdict or the binary's exit status.

Names each failed test, with its failing lines, just above the one line
"N passed, N failed, N skipped", so that a CI log cut to its tail still
says what failed.  Exits 1 if anything failed or no test ran at all.
"""
import json
import re
import sys

SANITIZER = re.compile(r"ERROR: (LeakSanitizer|AddressSanitizer)|"
                       r"runtime error: ")
SYNTH = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| "
                   r"Failing: (\d+) \| Crashing: (\d+)")
DOCS = re.compile(r"^doc commands: (\d+) passed, (\d+) failed, "
                  r"(\d+) skipped$", re.M)


PYTEST = re.compile(r"^=* ?((?:\d+ (?:passed|failed|skipped|errors?|"
                    r"xfailed|xpassed|warnings?|deselected)(?:, )?)+) in "
                    r"[\d.]+s", re.M)
FAILED_LINE = re.compile(r"\[FAIL\]|(FAILED|ERROR|SKIPPED) |"
                         r"\[----\] \S+:\d+: |.*(CRASH|Timed out|"
                         r"Aborted|ERROR: [A-Za-z]+Sanitizer|runtime error: )")


MESSAGE = re.compile(r"\[----\] +\S")  # an assertion's message
LOG = re.compile(r"kanel: ")  # what the job's processes logged


def report(t, out, why):
    """Names a failed meson test and shows its failing lines, at most 30:
    the assertions with their messages, each after the last 5 lines the
    test's processes logged before it (with --jobs 1 they are its own)."""
    lines, logged = [], []
    for l in out.splitlines():
        if FAILED_LINE.match(l) or MESSAGE.match(l):
            lines += [f"  {x}" for x in logged[-5:]]
            logged = []
            lines.append(l)
        elif LOG.match(l):
            logged.append(l)
        elif l.startswith(("[RUN ]", "[PASS]")):
            logged = []
    print(f"FAILED {t['name']} ({why}, {t['duration']:.1f} s)")
    for l in lines[:30]:
        print(f"    {l}")


def count(path):
    passed = failed = skipped = 0
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            out = (t.get("stdout") or "") + (t.get("stderr") or "")
            m = SYNTH.search(out)
            d = DOCS.search(out)
            ok = t["result"] in ("OK", "EXPECTEDFAIL")
            py = PYTEST.findall(out)
            if py and not m and not d:
                n = {w: int(c) for c, w in
                     (x.split() for x in py[-1].split(", "))}
                bad = (n.get("failed", 0) + n.get("error", 0) +
                       n.get("errors", 0) + n.get("skipped", 0))
                passed += n.get("passed", 0)
                failed += bad
                if bad:
                    report(t, out, f"{bad} pytest tests failed, erred or "
                                   "were skipped")
                elif not ok:
                    failed += 1
                    report(t, out, t["result"])
                continue
            if d and not m:
                p, f_, s_ = map(int, d.groups())
                passed += p
                failed += f_
                skipped += s_
                if f_:
                    report(t, out, f"{f_} of {p + f_} blocks failed")
                elif not ok and t["result"] != "SKIP":
                    failed += 1  # e.g. killed after its count
                    report(t, out, t["result"])
            elif m:
                tested, passing, failing, crashing = map(int, m.groups())
                passed += passing
                failed += failing + crashing
                if failing + crashing:
                    report(t, out, f"{failing + crashing} of {tested} failed")
                # a --filter run lists the tests it left out as disabled
                skipped += out.count("[SKIP] ") - out.count(
                    ": Test is disabled")
                if failing + crashing == 0 and (not ok or SANITIZER.search(out)):
                    failed += 1  # e.g. a leak report after the tests
                    report(t, out, "sanitizer report" if ok else t["result"])
            elif t["result"] == "SKIP":
                skipped += 1
            elif ok:
                passed += 1
            else:
                failed += 1
                report(t, out, t["result"])
    return passed, failed, skipped


def main(paths):
    totals = [0, 0, 0]
    for p in paths:
        try:
            c = count(p)
        except OSError as e:
            print(f"test_summary: {e}", file=sys.stderr)
            totals[1] += 1
            continue
        totals = [a + b for a, b in zip(totals, c)]
    passed, failed, skipped = totals
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
