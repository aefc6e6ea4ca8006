#!/usr/bin/env bash
# main.sh - the main job on one machine: set-up and an optimised build,
# then `kanel train` (docs/training.md): an MLP trained on Fashion-MNIST
# by a local job of 4 workers under BSP, about a minute, with live
# progress, a summary and the accuracy-vs-time curve in kanel-curve.csv.
# Extra arguments go to kanel train (for example --protocol asp
# --imbalance persistent:0.25:4, or --workers 8 --time-budget 60).
#
# It installs only the packages the build and kanel train need
# (setup.sh --packages main: no test framework, VM or fuzzing
# compiler), and builds no tests.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$here/scripts/setup.sh" --packages main "$here/build-release" \
	--buildtype=release -Dtests=disabled
exec "$here/build-release/tools/kanel" train --workers 4 "$@"
