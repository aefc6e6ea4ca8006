#!/usr/bin/env bash
# installed.sh BUILD_DIR KANEL: install the build into a scratch root and
# use the package from there, as a user who ran `meson install` would:
# its _build_info names the prefix's library, and with that library (in
# the scratch root, through KANEL_LIBRARY) a one-worker job trains.
set -euo pipefail
build=$1 kanel=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" --no-rebuild --quiet >/dev/null
init=$(find "$root" -path '*/kanel/__init__.py' -print -quit)
test -n "$init" || { echo "the package was not installed" >&2; exit 1; }
pkg=$(dirname "$(dirname "$init")")
lib=$(find "$root" -name 'libkanel.so.0' -print -quit)
for f in __init__.py _lib.py torch.py _build_info.py; do
	test -f "$pkg/kanel/$f" || { echo "kanel/$f not installed" >&2; exit 1; }
done
echo "installed in ${pkg#"$root"}"
# the installed package names the installed library, not the build's
PYTHONPATH=$pkg /usr/bin/python3 - "${lib#"$root"}" <<'PY'
import sys
from kanel import _build_info
want = sys.argv[1].rsplit("/", 1)[0]
assert _build_info.LIBDIR == want, (_build_info.LIBDIR, want)
print("its library:", _build_info.LIBDIR)
PY
PYTHONPATH=$pkg KANEL_LIBRARY=$lib "$kanel" launch --workers 1 \
	--optimizer momentum --lr 0.5 -- /usr/bin/python3 \
	"$here/jobs/tiny.py" 200
