#!/usr/bin/env bash
# test.sh - builds Kanel with warnings as errors and runs the whole test
# suite, builds the release build with warnings as errors too (without
# running it), then builds it again under AddressSanitizer and
# UndefinedBehaviorSanitizer and runs the suite a second time, then runs
# the libFuzzer targets for a minute each.  Ends with one line "N passed, N
# failed, N skipped" counted from the three runs' meson test logs; exits
# non-zero if any test failed or anything did not build.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
status=0
logs=()
failed_builds=()

# $suite, where set, runs that meson test suite alone.
run_suite() { # BUILD_DIR MESON_OPTION...
	local build=$1
	shift
	if ! scripts/setup.sh "$build" "$@"; then
		echo "test.sh: building $build failed" >&2
		failed_builds+=("$build")
		status=1
		return
	fi
	rm -f "$build/meson-logs/testlog.json"
	meson test -C "$build" --print-errorlogs ${suite:+--suite "$suite"} ||
		status=1
	logs+=("$build/meson-logs/testlog.json")
}

run_suite build-test -Dwerror=true -Dbuildtype=debugoptimized

# The release build with warnings as errors, built and not run: -O3
# without asserts inlines further and finds warnings the debugoptimized
# builds do not (-Wmaybe-uninitialized), and the main job and the
# benchmarks are release builds.  The suites themselves ran above.
if ! scripts/setup.sh build-release-werror -Dbuildtype=release \
	-Dwerror=true; then
	echo "test.sh: building build-release-werror failed" >&2
	failed_builds+=(build-release-werror)
	status=1
fi

# UBSan stops at its first finding (the build also has
# -fno-sanitize-recover), so that a finding fails the test; LeakSanitizer
# checks every test process as it exits.  The rxe suite runs here too:
# vm.sh hands these variables to the tests in the VM.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
run_suite build-asan -Dwerror=true -Dbuildtype=debugoptimized \
	-Db_sanitize=address,undefined -Db_lundef=false \
	-Dc_args=-fno-sanitize-recover=all

# The libFuzzer targets (tests/fuzz/), 60 s each, each counted as one
# test: the tcp receive path, and the engine's control messages and
# handshake.  They need clang (CC for the first configure only: meson
# keeps the compiler), and the whole build instrumented for coverage and
# ASan + UBSan, so that libFuzzer learns from the code it drives.  New
# inputs go to build-fuzz/tests/fuzz/corpus*, crashes next to them; the
# checked-in corpora are only read.
CC=clang suite=fuzz run_suite build-fuzz -Dfuzz=enabled \
	-Dbuildtype=debugoptimized -Db_lundef=false \
	-Db_sanitize=address,undefined \
	'-Dc_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=all'

# Next to test_summary's FAILED lines, so that the tail of a log names
# every build that failed too.
for b in "${failed_builds[@]}"; do
	echo "FAILED building $b (its compiler output is above)"
done
python3 scripts/test_summary.py "${logs[@]}" || status=1
exit $status
