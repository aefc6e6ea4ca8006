#!/usr/bin/python3
"""Runs the command lines that README.md and docs/*.md mark as runnable.

A code block (indented by four spaces, or fenced with ```) runs when the
line before it, blank lines aside, is a marker:

    <!-- test -->                 its commands, in order, as one script
    <!-- test: together -->       each command a process of its own, all
                                  at once (the roles of one job)
    <!-- test: timeout=SECONDS --> (with either) the block's time limit

Blocks in pages whose owners have not marked them yet are named in
pending.txt next to this script, one per line:

    PAGE | OPTIONS | FIRST LINE [| LAST LINE]

(the lines FIRST to LAST of the block that holds FIRST, exactly as the
page writes them; OPTIONS as in a marker, or `-`).

Each block runs in a fresh empty directory, which is also $HOME; in it,
the source tree's top entries are linked (so `scripts/`, `tests/fuzz/`
resolve), and each `build`, `build-NAME` folder the block names is a link
to the build directory under test.  $PATH starts with the folder of the
`kanel` given, so `kanel` is that build's.  Nothing else is changed: a
command runs as the page writes it.  A block passes when every command
exits 0 within the time limit.  A block that needs the Fashion-MNIST
dataset (kanel train, compare or launch) or gnuplot is skipped, with the
reason, where they are not installed.  A marked block must need no
cluster: srun, mpirun or ssh in one is a failure of the page.

Prints one line per block ([PASS], [FAIL] with the failing command and
the end of its output, [SKIP] with the reason), then
"doc commands: N passed, N failed, N skipped".  Exits 1 if a block
failed, 77 (skipped) if none ran, else 0.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^<!--\s*test(?::\s*(.*?))?\s*-->\s*$")
CLUSTER = re.compile(r"(^|[\s;|&(])(srun|mpirun|ssh)\s")
BUILD_DIR = re.compile(r"(?<![\w./-])(build(?:-[\w]+)?)/")
DATASET = "/usr/share/datasets/fashion-mnist"
PYTHON = re.compile(r"\bpython3\b")
NEEDS_DATASET = re.compile(r"\bkanel\s+(train|compare|launch)\b")
DEFAULT_TIMEOUT = 120
TAIL = 1500


class Block:
    def __init__(self, page, line, commands, options):
        self.page, self.line = page, line
        self.commands = commands  # [(line number, text)]
        self.together = False
        self.timeout = DEFAULT_TIMEOUT
        for opt in (options or "").split():
            if opt == "together":
                self.together = True
            elif opt.startswith("timeout="):
                self.timeout = float(opt[len("timeout="):])
            elif opt != "-":
                raise ValueError(f"{page}:{line}: unknown option {opt!r}")

    def name(self):
        return f"{self.page}:{self.line}"


def code_blocks(lines):
    """Yields (first index, last index + 1, body lines) of each block."""
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            yield i, min(j + 1, len(lines)), lines[i + 1:j], i + 1
            i = j + 1
        elif lines[i].startswith("    ") and lines[i].strip() and (
                i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or
                                      not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            body = [l[4:] for l in lines[i:j]]
            yield i, j, body, i
            i = j
        else:
            i += 1


def commands_of(body, first):
    """The block's commands, continuation lines joined: [(line, text)]."""
    out, cur, start = [], "", None
    for k, raw in enumerate(body):
        if start is None:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            start = first + k + 1
        cur += raw.strip() if cur else raw.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip() + " "
            continue
        out.append((start, cur))
        cur, start = "", None
    if start is not None:
        out.append((start, cur))
    return out


def marked_blocks(src, page):
    lines = open(os.path.join(src, page), encoding="utf-8").read().split("\n")
    blocks = []
    for i0, _, body, first in code_blocks(lines):
        k = i0 - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = MARKER.match(lines[k]) if k >= 0 else None
        if m:
            blocks.append(Block(page, first + 1, commands_of(body, first),
                                m.group(1)))
    return blocks


def pending_blocks(src, path):
    """The blocks pending.txt names, found in their pages."""
    blocks, errors = [], []
    if not os.path.exists(path):
        return blocks, errors
    for n, entry in enumerate(open(path, encoding="utf-8"), 1):
        entry = entry.rstrip("\n")
        if not entry.strip() or entry.startswith("#"):
            continue
        parts = [p.strip() for p in entry.split(" | ")]
        if len(parts) not in (3, 4):
            errors.append(f"pending.txt:{n}: PAGE | OPTIONS | FIRST [| LAST]")
            continue
        page, options, first = parts[:3]
        last = parts[3] if len(parts) == 4 else first
        found = None
        try:
            lines = open(os.path.join(src, page),
                         encoding="utf-8").read().split("\n")
        except OSError as e:
            errors.append(f"pending.txt:{n}: {e}")
            continue
        for _, _, body, at in code_blocks(lines):
            cmds = commands_of(body, at)
            texts = [c[1].strip() for c in cmds]
            if first in texts:
                a = texts.index(first)
                b = texts.index(last, a) if last in texts[a:] else -1
                if b >= 0:
                    found = cmds[a:b + 1]
                    break
        if not found:
            errors.append(f"pending.txt:{n}: {page} no longer holds a "
                          f"block with {first!r}")
            continue
        blocks.append(Block(page, found[0][0], found, options))
    return blocks, errors


def prepare(src, build, block):
    """A fresh directory for @block, the tree and build folders linked."""
    d = tempfile.mkdtemp(prefix="kanel-doc-")
    for e in os.listdir(src):
        if e == ".git" or e.startswith("build"):
            continue
        os.symlink(os.path.join(src, e), os.path.join(d, e))
    for _, text in block.commands:
        for b in BUILD_DIR.findall(text):
            if not os.path.lexists(os.path.join(d, b)):
                os.symlink(build, os.path.join(d, b))
    return d


def tail(text):
    text = text.strip()
    return text if len(text) <= TAIL else "..." + text[-TAIL:]


def run_script(block, cwd, env):
    """Runs the commands as one bash script: (ok, what, output)."""
    script = ("set -e\n"
              "trap 'echo \"doc-test: this command failed: "
              "$BASH_COMMAND\" >&2' ERR\n" +
              "\n".join(text for _, text in block.commands) + "\n")
    p = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=block.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return False, f"timed out after {block.timeout:g} s", out
    if p.returncode:
        return False, f"exit status {p.returncode}", out
    return True, "", out


def run_together(block, cwd, env):
    """Starts every command at once; all must exit 0 in time."""
    procs = []
    for line, text in block.commands:
        log = open(os.path.join(cwd, f".out-{line}"), "w+")
        procs.append((line, text, log,
                      subprocess.Popen(["bash", "-c", text], cwd=cwd, env=env,
                                       stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)))
    deadline = time.monotonic() + block.timeout
    bad = []
    for line, text, log, p in procs:
        try:
            rc = p.wait(timeout=max(0.0, deadline - time.monotonic()))
            if rc:
                bad.append((line, text, f"exit status {rc}"))
        except subprocess.TimeoutExpired:
            bad.append((line, text, f"still running after "
                        f"{block.timeout:g} s"))
    for _, _, _, p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out = []
    for line, text, log, _ in procs:
        log.seek(0)
        out.append(f"--- line {line}: {text}\n{tail(log.read())}")
        log.close()
    if bad:
        what = "; ".join(f"line {l} ({why}): {t}" for l, t, why in bad)
        return False, what, "\n".join(out)
    return True, "", "\n".join(out)


def sanitizer_python_env(build, env):
    """What blocks that run python3 add to the environment: in a build whose
    library needs ASan's runtime, that runtime preloaded (an
    uninstrumented interpreter does not load it first) and leak checks
    off (the interpreter's own memory at exit is not ours; the other
    suites check the library's)."""
    lib = os.path.join(build, "libkanel.so")
    try:
        deps = subprocess.run(["ldd", lib], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    m = re.search(r"libasan\.so\S* => (\S+)", deps)
    if not m:
        return {}
    return dict(LD_PRELOAD=m.group(1), ASAN_OPTIONS=(
        env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":"))


def skip_reason(block):
    text = "\n".join(t for _, t in block.commands)
    if NEEDS_DATASET.search(text) and not os.path.isdir(DATASET):
        return f"needs the dataset ({DATASET}, dataset-fashion-mnist)"
    if re.search(r"\bgnuplot\b", text) and not shutil.which("gnuplot"):
        return "needs gnuplot (gnuplot-nox)"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--kanel", required=True)
    ap.add_argument("--list", action="store_true",
                    help="list the blocks and run none")
    ap.add_argument("--only", help="run only blocks whose page:line "
                    "contains this")
    a = ap.parse_args()
    src, build = os.path.abspath(a.source), os.path.abspath(a.build)

    pages = ["README.md"] + sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src,
                                                                "docs/*.md")))
    blocks, errors = [], []
    for page in pages:
        try:
            blocks += marked_blocks(src, page)
        except ValueError as e:
            errors.append(str(e))
    more, errs = pending_blocks(src, os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "pending.txt"))
    blocks += more
    errors += errs

    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(a.kanel)) + os.pathsep + \
        env.get("PATH", "/usr/bin:/bin")
    python_extra = sanitizer_python_env(build, env)
    passed = failed = skipped = 0
    for e in errors:
        print(f"[FAIL] {e}")
        failed += 1
    for b in blocks:
        if a.only and a.only not in b.name():
            continue
        if a.list:
            mode = "together" if b.together else "script"
            print(f"{b.name()} ({mode}, {b.timeout:g} s):")
            for line, text in b.commands:
                print(f"    {line}: {text}")
            continue
        for _, text in b.commands:
            if CLUSTER.search(text):
                print(f"[FAIL] {b.name()}: needs a cluster, so it must "
                      f"not be marked: {text}")
                failed += 1
                break
        else:
            why = skip_reason(b)
            if why:
                print(f"[SKIP] {b.name()}: {why}")
                skipped += 1
                continue
            d = prepare(src, build, b)
            env["HOME"] = d
            t0 = time.monotonic()
            run = run_together if b.together else run_script
            text = "\n".join(t for _, t in b.commands)
            ok, what, out = run(b, d, dict(env, **python_extra)
                                if PYTHON.search(text) else env)
            dt = time.monotonic() - t0
            if ok:
                print(f"[PASS] {b.name()} ({dt:.1f} s)")
                passed += 1
                shutil.rmtree(d, ignore_errors=True)
            else:
                print(f"[FAIL] {b.name()}: {what} ({dt:.1f} s), kept in {d}")
                for line, text in b.commands:
                    print(f"    {line}: {text}")
                print("    output:")
                for l in tail(out).split("\n"):
                    print(f"      {l}")
                failed += 1
        sys.stdout.flush()
    if a.list:
        return 0
    print(f"doc commands: {passed} passed, {failed} failed, "
          f"{skipped} skipped")
    if failed:
        return 1
    return 0 if passed else 77


if __name__ == "__main__":
    sys.exit(main())
