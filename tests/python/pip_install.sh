#!/usr/bin/env bash
# pip_install.sh SOURCE_ROOT: `pip install .` as docs/python.md
# ("Install") tells a PyTorch user to run it: into a scratch venv that
# sees Debian's torch and NumPy (--system-site-packages), offline, with
# Debian's meson-python as the backend (--no-build-isolation).  Then,
# from a folder outside the checkout and with none of the variables that
# point at a build tree, the venv's package imports (kanel, kanel.torch)
# and loads the library inside it, the venv's kanel command runs, and the
# two train a two-worker job.  Nothing of the build directory under test
# is used: meson-python configures and builds a wheel of its own.
set -euo pipefail
src=$(cd "$1" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# what meson test or a developer's shell points at a build tree
unset PYTHONPATH KANEL_LIBRARY KANEL_EXE PYTHONHOME

venv=$scratch/venv
/usr/bin/python3 -m venv --system-site-packages "$venv"
start=$SECONDS
"$venv/bin/python" -m pip install --no-build-isolation --no-index \
	--no-cache-dir --quiet "$src"
echo "pip install: $((SECONDS - start)) s"

# the job script alone, so that nothing is imported from the checkout
run=$scratch/run
mkdir "$run"
cp "$src/tests/python/jobs/tiny.py" "$src/tests/python/jobs/jobout.py" \
	"$run"
cd "$run"

"$venv/bin/python" - "$venv" <<'PY'
import os
import sys

import kanel
import kanel.torch
from kanel import _build_info, _lib

venv = os.path.realpath(sys.argv[1])
pkg = os.path.dirname(os.path.realpath(kanel.__file__))
lib = os.path.realpath(_lib.lib._name)
assert pkg.startswith(venv + os.sep), f"kanel imported from {pkg}"
assert lib == os.path.join(pkg, "libkanel.so.0"), f"library {lib}"
# where kanel finds the kanel command it starts (under torchrun)
bindir = os.path.join(venv, "bin")
assert os.path.realpath(_build_info.BINDIR) == bindir, _build_info.BINDIR
exe = kanel._kanel_command()
assert os.path.realpath(exe) == os.path.join(bindir, "kanel"), exe
print("package:", pkg)
print("library:", lib)
PY

test -x "$venv/bin/kanel" || { echo "no $venv/bin/kanel" >&2; exit 1; }
"$venv/bin/kanel" --help >/dev/null
"$venv/bin/kanel" launch --workers 2 --optimizer momentum --lr 0.5 -- \
	"$venv/bin/python" tiny.py 200
