#!/usr/bin/env python3
"""check_format.py CLANG_FORMAT SOURCE_ROOT

Every C file of the tree (sources, headers, tests, and the kernels'
body.inl) is as clang-format makes it with the checked-in .clang-format:
kernel style, tabs, 80 columns.  Prints each file that differs with the
command that mends it, and exits 1; 0 when all agree.  The files are the
ones git tracks where the root is a git checkout, else every *.c, *.h
and *.inl under the layers' folders (a source archive), never a build
folder's.  The fuzz corpus is data, not code.
"""
import os
import subprocess
import sys

FOLDERS = ('include', 'kernels', 'transport', 'sync', 'sim', 'engine',
           'launch', 'tools', 'perf', 'examples', 'tests')
SUFFIXES = ('.c', '.h', '.inl')


def tracked(root):
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-z'],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode().split('\0') if p]


def walked(root):
    for top in FOLDERS:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                yield os.path.relpath(os.path.join(d, n), root)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    exe, root = sys.argv[1], sys.argv[2]
    paths = tracked(root)
    if paths is None:
        paths = list(walked(root))
    paths = sorted(p for p in paths
                   if p.endswith(SUFFIXES) and '/corpus' not in p)
    bad = []
    for p in paths:
        with open(os.path.join(root, p), 'rb') as f:
            have = f.read()
        want = subprocess.run([exe, '--style=file',
                               '--assume-filename=' + p],
                              input=have, capture_output=True,
                              cwd=root, check=True).stdout
        if want != have:
            bad.append(p)
    for p in bad:
        print(f'{p}: not as clang-format makes it; mend with: '
              f'clang-format -i --style=file {p}')
    print(f'{len(paths) - len(bad)} of {len(paths)} files formatted')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
