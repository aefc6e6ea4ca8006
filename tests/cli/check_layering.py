#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layering of tools/, checked by the compiler: each probe target
(tests/cli/layer_probe.c with one layer's header, compiled with the
dependencies tools/ gets) must fail to build because that header is not
found.  Usage: check_layering.py BUILD_DIR HEADER=TARGET_PATH..."""
import os
import subprocess
import sys


def main():
    build = sys.argv[1]
    failures = 0
    for arg in sys.argv[2:]:
        header, target = arg.split('=', 1)
        target = os.path.relpath(target, build)
        run = subprocess.run(['ninja', '-C', build, target],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        out = run.stdout
        if run.returncode == 0:
            print(f'FAIL: tools/ can include {header}: a dependency '
                  'passes an internal include folder on')
            failures += 1
        elif header not in out or 'No such file' not in out:
            print(f'FAIL: the {header} probe failed for another reason:\n'
                  + out)
            failures += 1
        else:
            print(f'ok: {header} is not visible to tools/')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
