#!/usr/bin/env bash
# main.sh - the main job on one machine.  Until the engine exists this is
# the aggregation-kernel benchmark in its quick mode (under 30 s), built
# with optimisation; extra arguments go to perf/bench_kernels.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$here/scripts/setup.sh" "$here/build-release" --buildtype=release
exec "$here/build-release/perf/bench_kernels" --quick "$@"
