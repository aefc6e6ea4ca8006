#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layering, checked by the compiler: each probe target
(tests/cli/layer_probe.c with one header, compiled with the dependencies
a layer gets) must fail to build because that header is not found.  The
probes after `--layer tools/` hold tools/ to kanel.h (and kanel_sim.h),
those after `--layer sim/` hold the simulator to sync/: no header of
engine/, transport/ or kernels/; those after `--layer launch/` hold the
job launcher to libc.  And the public-only sources of perf/
(--public-only SOURCE, e.g. bench_engine.c), checked by reading them:
they include kanel.h, bench_util.h and bench_engine.h (both read the
same way), launch.h (the job launcher, libc only) and system headers
only.
Usage: check_layering.py BUILD_DIR [--public-only SOURCE]...
[--layer NAME HEADER=TARGET_PATH...]..."""
import os
import re
import subprocess
import sys

PUBLIC = ('kanel.h', 'bench_util.h', 'bench_engine.h', 'launch.h')
INCLUDE = re.compile(r'\s*#\s*include\b\s*(.*)')


def public_only(path, layer_headers):
    """The reasons @path (and the perf/ headers it includes) breaks the
    rule: a quoted include other than PUBLIC, a layer's header however
    written, or an include by macro."""
    bad = []
    with open(path) as f:
        lines = f.read().splitlines()
    for n, line in enumerate(lines, 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        arg = m.group(1).split('/*')[0].strip()
        name = arg[1:-1]
        if not (re.fullmatch(r'"[^"]+"', arg) or
                re.fullmatch(r'<[^>]+>', arg)):
            bad.append(f'{path}:{n}: include by macro: {line.strip()}')
        elif os.path.basename(name) in layer_headers or (
                arg[0] == '"' and name not in PUBLIC):
            bad.append(f'{path}:{n}: {line.strip()}')
        elif arg[0] == '"':
            near = os.path.join(os.path.dirname(path), name)
            if os.path.exists(near):
                bad += public_only(near, layer_headers)
    return bad


def main():
    build = sys.argv[1]
    args = sys.argv[2:]
    sources = []
    while len(args) >= 2 and args[0] == '--public-only':
        sources.append(args[1])
        args = args[2:]
    probes = []
    layer = 'tools/'
    while args:
        if args[0] == '--layer' and len(args) >= 2:
            layer = args[1]
            args = args[2:]
            continue
        probes.append([layer] + args[0].split('=', 1))
        args = args[1:]
    failures = 0
    for layer, header, target in probes:
        target = os.path.relpath(target, build)
        run = subprocess.run(['ninja', '-C', build, target],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        out = run.stdout
        if run.returncode == 0:
            print(f'FAIL: {layer} can include {header}: a dependency '
                  'passes an internal include folder on')
            failures += 1
        elif header not in out or 'No such file' not in out:
            print(f'FAIL: the {header} probe failed for another reason:\n'
                  + out)
            failures += 1
        else:
            print(f'ok: {header} is not visible to {layer}')
    for source in sources:
        bad = public_only(source, {header for _, header, _ in probes})
        for why in bad:
            print(f'FAIL: {why}: perf/ outside the layer benchmarks '
                  'sees kanel.h alone')
        failures += len(bad)
        if not bad:
            print(f'ok: {os.path.basename(source)} includes only '
                  f'{", ".join(PUBLIC)} and system headers')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
