#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What libkanel.so exports, checked against the headers: the dynamic
symbols it defines (nm -D --defined-only) must be exactly the functions
declared KN_EXPORT in the public headers given (include/kanel.h and
include/kanel_sim.h), so that neither an internal symbol leaks out (a
kn__ name, a layer's static function made visible, a library linked in)
nor a public one is left out of libkanel.map.
Usage: check_exports.py NM LIBRARY HEADER..."""
import re
import subprocess
import sys

COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)
# KN_EXPORT, the return type (over lines, perhaps), the name and '('
DECL = re.compile(r'\bKN_EXPORT\b[^;{}()#]*?\b(kn_\w+)\s*\(')


def declared(headers):
    names = set()
    for path in headers:
        with open(path) as f:
            text = COMMENT.sub(' ', f.read())
        names.update(DECL.findall(text))
    return names


def exported(nm, lib):
    """The defined dynamic symbols of @lib, without their version
    (kn_foo@@KANEL_0), the version nodes themselves (type A) left out."""
    out = subprocess.run([nm, '-D', '--defined-only', lib], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[1] == 'A':
            continue
        names.add(fields[2].split('@')[0])
    return names


def main():
    nm, lib, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    want, have = declared(headers), exported(nm, lib)
    failures = 0
    if not want:
        print('FAIL: no KN_EXPORT declaration found in ' + ', '.join(headers))
        return 1
    for name in sorted(have - want):
        print(f'FAIL: libkanel exports {name}, which no public header '
              'declares KN_EXPORT')
        failures += 1
    for name in sorted(want - have):
        print(f'FAIL: {name} is declared KN_EXPORT but libkanel does not '
              'export it (libkanel.map?)')
        failures += 1
    if not failures:
        print(f'ok: libkanel exports the {len(want)} functions of the '
              'public headers and nothing else')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
